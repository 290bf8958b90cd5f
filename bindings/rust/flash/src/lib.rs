//! Safe Rust API for libflash: exact attention, `O = softmax(scale * Q K^T + mask) V`, computed the
//! FlashAttention way (tiles through on-chip memory, online softmax, no N x N matrix) on the CPU or a
//! CUDA GPU, behind libflash's stable C ABI (`flash.h`, raw bindings in [`sys`]).
//!
//! - Every libflash status becomes a [`Result`]; an [`Error`] carries the status code, its name and the
//!   library's message naming the exact problem.
//! - Host tensors are borrowed slices ([`Tensor`], [`TensorMut`]) over `f32`, [`half::f16`] or
//!   [`half::bf16`], their shape and strides checked against the slice before any call.
//! - GPU tensors are device pointers ([`RawTensor`]) behind an `unsafe` constructor; the
//!   [`Stream`] a call runs on is always passed explicitly.
//! - [`Forward`] holds the options: scale, causal with its [`Alignment`], sliding window,
//!   [`BlockMask`], [`Algorithm`].
//! - [`Backward`] (made from the forward's options: `Backward::from(forward)`) computes dQ, dK, dV from
//!   Q, K, V, O, dO and the forward's LSE, by recomputation; optionally deterministic.
//! - [`KvcacheForward`] is attention over a key/value cache (decode, chunked prefill; FlashAttention-2's
//!   `flash_attn_with_kvcache`), contiguous or paged as a [`CacheIndex`] says, appending the new tokens'
//!   keys and values in place ([`KvcacheForward::run_append`]); [`combine`] merges partial results
//!   (split-KV). Both need libflash 1.2.
//! - [`Varlen`] describes a packed variable-length batch (sequences of different lengths end to end, no
//!   padding; FlashAttention's `flash_attn_varlen_func` layout): [`Forward::run_varlen`],
//!   [`Backward::run_varlen`] and their `_raw` forms. Needs libflash 1.3.
//!
//! ```
//! use flash::{Forward, Tensor, TensorMut};
//!
//! // [batch, seqlen, heads, head_dim]
//! let (b, s, h, d) = (1, 128, 4, 64);
//! let q: Vec<f32> = (0..b * s * h * d).map(|i| ((i * 7 % 13) as f32 - 6.0) / 6.0).collect();
//! let k = q.iter().rev().copied().collect::<Vec<_>>();
//! let v = q.clone();
//! let mut o = vec![0.0f32; q.len()];
//!
//! let used = Forward::new().causal(true).run(
//!     &Tensor::new(&q, [b, s, h, d])?,
//!     &Tensor::new(&k, [b, s, h, d])?,
//!     &Tensor::new(&v, [b, s, h, d])?,
//!     &mut TensorMut::new(&mut o, [b, s, h, d])?,
//! )?;
//! println!("ran {used}");
//! // Causal: the first query sees only the first key, so its output is that key's value row.
//! assert!((0..d).all(|i| (o[i] - v[i]).abs() < 1e-6));
//!
//! // Errors name the problem:
//! let e = Forward::new().run(
//!     &Tensor::new(&q, [b, s, h, d])?,
//!     &Tensor::new(&k[..s * h * 32], [b, s, h, 32])?,
//!     &Tensor::new(&v[..s * h * 32], [b, s, h, 32])?,
//!     &mut TensorMut::new(&mut o, [b, s, h, d])?,
//! ).unwrap_err();
//! assert_eq!(e.kind(), flash::ErrorKind::BadShape);
//! assert_eq!(e.message(), "k.shape[3] is 32 but q.shape[3] is 64");
//! # Ok::<(), flash::Error>(())
//! ```
//!
//! Linking: `flash-sys` finds libflash through `LIBFLASH_DIR`, then pkg-config, then the standard
//! paths (see the workspace README).

#![warn(missing_debug_implementations)]

mod abi;
mod backward;
mod device;
mod error;
mod forward;
mod kvcache;
mod mask;
mod tensor;

pub use flash_sys as sys;
pub use half;

pub use backward::{Backward, Gradients};
pub use device::{
    build_info, compiled_algorithms, cuda_device_count, device_info, version, version_string, AlgorithmSet, DeviceInfo,
    Version, HEADER_VERSION,
};
pub use error::{status_name, Error, ErrorKind, Result};
pub use forward::{forward, Algorithm, Alignment, Forward, Varlen};
pub use kvcache::{combine, combine_raw, CacheIndex, KvcacheForward, KvcacheRun};
pub use mask::{num_blocks, BlockMask};
pub use tensor::{contiguous_strides, DType, Device, Element, RawTensor, Stream, Tensor, TensorMut};
