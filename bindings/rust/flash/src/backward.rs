//! The backward pass: dQ, dK, dV of `O = softmax(scale * Q K^T + mask) V` given dO, the forward's O and
//! its log-sum-exp, by recomputation (nothing N x N is stored).

use std::fmt;
use std::os::raw::c_void;

use flash_sys as sys;

use crate::abi::LibSized;
use crate::error::{check, Result};
use crate::forward::{apply_options, apply_varlen, Algorithm, Alignment, Forward, Varlen};
use crate::mask::BlockMask;
use crate::tensor::{Element, RawTensor, Stream, Tensor, TensorMut};

/// Options of a backward call, and the calls themselves.
///
/// The mask options (scale, causal, alignment, window, block mask) must be those of the forward that
/// produced O and LSE: build the backward from the forward's options with [`Backward::from`] (or
/// [`Forward::backward`]), or set them again with the same builder methods. Tensors: Q, O, dO, dQ
/// `[b, sq, hq, d]`; K, V, dK, dV `[b, sk, hkv, d]` with `hq % hkv == 0` (GQA/MQA: dK and dV are summed
/// over the query heads sharing a key/value head); LSE fp32 `[b, hq, sq]`, as
/// [`Forward::run_with_lse`] wrote it. A query row that sees no key gets dQ = 0; keys no query sees
/// get dK = dV = 0.
///
/// ```
/// use flash::{Backward, Forward, Tensor, TensorMut};
/// let (b, s, h, d) = (1, 4, 1, 8);
/// let q: Vec<f32> = (0..b * s * h * d).map(|i| (i % 5) as f32 / 5.0).collect();
/// let (k, v) = (q.clone(), q.iter().map(|x| 1.0 - x).collect::<Vec<_>>());
/// let (mut o, mut lse) = (vec![0f32; q.len()], vec![0f32; b * h * s]);
/// let fwd = Forward::new().causal(true);
/// let t = |x| Tensor::new(x, [b, s, h, d]);
/// fwd.run_with_lse(&t(&q)?, &t(&k)?, &t(&v)?, &mut TensorMut::new(&mut o, [b, s, h, d])?,
///                  &mut TensorMut::new(&mut lse, [b, h, s])?)?;
///
/// let d_o = vec![1f32; q.len()]; // dL/dO for L = sum(O)
/// let g = Backward::from(fwd).deterministic(true).compute(
///     &t(&q)?, &t(&k)?, &t(&v)?, &t(&o)?, &t(&d_o)?, &Tensor::new(&lse, [b, h, s])?)?;
/// // With dO = 1, each V row's gradient is the attention weight it receives, and every query's weights
/// // sum to 1; each row of dS sums to 0, so the dK rows sum to 0.
/// let total: f32 = g.dv.iter().step_by(d).sum();
/// assert!((total - s as f32).abs() < 1e-4);
/// assert!((0..d).all(|x| g.dk.iter().skip(x).step_by(d).sum::<f32>().abs() < 1e-5));
/// # Ok::<(), flash::Error>(())
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct Backward<'m> {
    opts: Forward<'m>,
}

/// dQ, dK, dV as owned, densely packed buffers (from [`Backward::compute`] or [`Backward::compute_varlen`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Gradients<T: Element> {
    /// `[batch, seqlen_q, heads_q, head_dim]` (varlen: `[total_q, heads_q, head_dim]`)
    pub dq: Vec<T>,
    /// `[batch, seqlen_k, heads_kv, head_dim]` (varlen: `[total_k, heads_kv, head_dim]`)
    pub dk: Vec<T>,
    /// `[batch, seqlen_k, heads_kv, head_dim]` (varlen: `[total_k, heads_kv, head_dim]`)
    pub dv: Vec<T>,
    /// The algorithm that ran.
    pub algorithm: Algorithm,
}

impl<'m> From<Forward<'m>> for Backward<'m> {
    /// The backward of a forward with these options (scale, masks, algorithm, deterministic, and the
    /// workspace, if one was given).
    fn from(f: Forward<'m>) -> Self {
        Backward { opts: f }
    }
}

impl<'m> Forward<'m> {
    /// The backward with these options (the same as `Backward::from(self)`).
    pub fn backward(self) -> Backward<'m> {
        Backward::from(self)
    }
}

impl<'m> Backward<'m> {
    /// The defaults: scale `1/sqrt(head_dim)`, no mask, bottom-right alignment, algorithm AUTO, not
    /// deterministic.
    pub fn new() -> Self {
        Backward { opts: Forward::new() }
    }

    /// Softmax scale, as the forward's; 0 (the default) means `1/sqrt(head_dim)`.
    pub fn scale(mut self, softmax_scale: f32) -> Self {
        self.opts = self.opts.scale(softmax_scale);
        self
    }

    /// Causal masking, as the forward's.
    pub fn causal(mut self, causal: bool) -> Self {
        self.opts = self.opts.causal(causal);
        self
    }

    /// Where the causal diagonal and the window sit, as the forward's.
    pub fn alignment(mut self, alignment: Alignment) -> Self {
        self.opts = self.opts.alignment(alignment);
        self
    }

    /// Sliding window, as the forward's (`None` unbounded).
    pub fn window(mut self, left: Option<u32>, right: Option<u32>) -> Self {
        self.opts = self.opts.window(left, right);
        self
    }

    /// The algorithm to run ([`Algorithm::AUTO`]: the first available one with a backward).
    pub fn algorithm(mut self, algorithm: Algorithm) -> Self {
        self.opts = self.opts.algorithm(algorithm);
        self
    }

    /// dQ, dK, dV bitwise identical run to run (`FLASH_FLAG_DETERMINISTIC`); without it the GPU kernels
    /// may accumulate dQ with atomics.
    pub fn deterministic(mut self, deterministic: bool) -> Self {
        self.opts = self.opts.deterministic(deterministic);
        self
    }

    /// The forward's block-sparse mask; it must live on the device of Q.
    pub fn block_mask(mut self, mask: &'m BlockMask) -> Self {
        self.opts = self.opts.block_mask(mask);
        self
    }

    /// Scratch memory for the call, at least what [`Backward::workspace_size_raw`] says; without it the
    /// library allocates its own.
    ///
    /// # Safety
    ///
    /// As [`Forward::workspace`]: `bytes` writable bytes on the tensors' device, aligned to 256 bytes,
    /// used by nothing else until the work of every call made with these options has completed.
    pub unsafe fn workspace(mut self, workspace: *mut c_void, bytes: usize) -> Self {
        self.opts = self.opts.workspace(workspace, bytes);
        self
    }

    /// The options as forward options (what a [`Forward`] with the same masks would be).
    pub fn options(&self) -> Forward<'m> {
        self.opts
    }

    #[allow(clippy::too_many_arguments)]
    fn args(
        &self,
        q: sys::flash_tensor,
        k: sys::flash_tensor,
        v: sys::flash_tensor,
        o: sys::flash_tensor,
        d_o: sys::flash_tensor,
        lse: sys::flash_tensor,
        dq: sys::flash_tensor,
        dk: sys::flash_tensor,
        dv: sys::flash_tensor,
        varlen: Option<&Varlen<'_>>,
        stream: Stream,
    ) -> Result<LibSized<sys::flash_bwd_args>> {
        let mut buf = LibSized::<sys::flash_bwd_args>::zeroed();
        // Safety: a buffer as large as the library's flash_bwd_args (see abi.rs); our size is passed.
        check(unsafe {
            sys::flash_bwd_args_init_sized(buf.as_mut_ptr(), std::mem::size_of::<sys::flash_bwd_args>() as _)
        })?;
        let a = buf.get_mut();
        a.q = q;
        a.k = k;
        a.v = v;
        a.o = o;
        a.d_o = d_o;
        a.lse = lse;
        a.dq = dq;
        a.dk = dk;
        a.dv = dv;
        apply_varlen!(varlen, &self.opts, a);
        apply_options!(&self.opts, a, stream);
        Ok(buf)
    }

    fn call(&self, mut a: LibSized<sys::flash_bwd_args>) -> Result<Algorithm> {
        // Safety: every tensor in `a` is a checked host view borrowed for this call, or a RawTensor /
        // BlockMask / workspace whose unsafe constructor's caller guaranteed the memory; the struct is
        // library-sized (abi.rs).
        check(unsafe { sys::flash_bwd(a.as_mut_ptr()) })?;
        Ok(Algorithm::from_raw(a.get().algorithm_used))
    }

    /// Runs on host tensors, writing dQ, dK, dV (any strides with a contiguous last dimension); returns
    /// the algorithm that ran.
    #[allow(clippy::too_many_arguments)]
    pub fn run<T: Element>(
        &self,
        q: &Tensor<'_, T>,
        k: &Tensor<'_, T>,
        v: &Tensor<'_, T>,
        o: &Tensor<'_, T>,
        d_o: &Tensor<'_, T>,
        lse: &Tensor<'_, f32, 3>,
        dq: &mut TensorMut<'_, T>,
        dk: &mut TensorMut<'_, T>,
        dv: &mut TensorMut<'_, T>,
    ) -> Result<Algorithm> {
        let a = self.args(
            q.raw(),
            k.raw(),
            v.raw(),
            o.raw(),
            d_o.raw(),
            lse.raw(),
            dq.raw(),
            dk.raw(),
            dv.raw(),
            None,
            Stream::legacy_default(),
        )?;
        self.call(a)
    }

    /// Runs on host tensors and returns dQ, dK, dV as new densely packed buffers shaped like Q, K, V.
    pub fn compute<T: Element>(
        &self,
        q: &Tensor<'_, T>,
        k: &Tensor<'_, T>,
        v: &Tensor<'_, T>,
        o: &Tensor<'_, T>,
        d_o: &Tensor<'_, T>,
        lse: &Tensor<'_, f32, 3>,
    ) -> Result<Gradients<T>> {
        let (qs, ks) = (q.shape(), k.shape());
        let zero = || -> T {
            // Safety: f32, f16 and bf16 (the only Element types) are plain bits; all zero is 0.0.
            unsafe { std::mem::zeroed() }
        };
        let mut dq = vec![zero(); qs.iter().product()];
        let mut dk = vec![zero(); ks.iter().product()];
        let mut dv = vec![zero(); ks.iter().product()];
        let algorithm = self.run(
            q,
            k,
            v,
            o,
            d_o,
            lse,
            &mut TensorMut::new(&mut dq, qs)?,
            &mut TensorMut::new(&mut dk, ks)?,
            &mut TensorMut::new(&mut dv, ks)?,
        )?;
        Ok(Gradients { dq, dk, dv, algorithm })
    }

    /// Runs on raw tensors: CUDA tensors (fp16/bf16), asynchronously on `stream`, or host tensors the
    /// borrow checker cannot see. The call returns once the work is enqueued. (Making a [`RawTensor`] is
    /// the `unsafe` step: its constructor's contract covers the memory.)
    #[allow(clippy::too_many_arguments)]
    pub fn run_raw(
        &self,
        q: &RawTensor,
        k: &RawTensor,
        v: &RawTensor,
        o: &RawTensor,
        d_o: &RawTensor,
        lse: &RawTensor,
        dq: &RawTensor,
        dk: &RawTensor,
        dv: &RawTensor,
        stream: Stream,
    ) -> Result<Algorithm> {
        let a = self.args(
            *q.as_raw(),
            *k.as_raw(),
            *v.as_raw(),
            *o.as_raw(),
            *d_o.as_raw(),
            *lse.as_raw(),
            *dq.as_raw(),
            *dk.as_raw(),
            *dv.as_raw(),
            None,
            stream,
        )?;
        self.call(a)
    }

    /// Bytes of workspace a call on these raw tensors would use (0 when none is needed).
    #[allow(clippy::too_many_arguments)]
    pub fn workspace_size_raw(
        &self,
        q: &RawTensor,
        k: &RawTensor,
        v: &RawTensor,
        o: &RawTensor,
        d_o: &RawTensor,
        lse: &RawTensor,
        dq: &RawTensor,
        dk: &RawTensor,
        dv: &RawTensor,
    ) -> Result<usize> {
        let a = self.args(
            *q.as_raw(),
            *k.as_raw(),
            *v.as_raw(),
            *o.as_raw(),
            *d_o.as_raw(),
            *lse.as_raw(),
            *dq.as_raw(),
            *dk.as_raw(),
            *dv.as_raw(),
            None,
            Stream::legacy_default(),
        )?;
        let mut bytes = 0usize;
        // Safety: valid, library-sized pointers; the query reads the descriptors only, never tensor data.
        check(unsafe { sys::flash_bwd_workspace_size(a.as_ptr(), &mut bytes) })?;
        Ok(bytes)
    }
}

impl<'m> Backward<'m> {
    /// Runs on a packed variable-length batch of host tensors (see [`Varlen`], the forward's): Q, O, dO, dQ
    /// `[total_q, heads_q, head_dim]`; K, V, dK, dV `[total_k, heads_kv, head_dim]`; the forward's LSE fp32
    /// `[heads_q, total_q]`. Each sequence's gradients are those of a dense call on it alone; a slot's keys past
    /// `seqused_k` get dK = dV = 0; rows outside every sequence are not written. Returns the algorithm that ran.
    #[allow(clippy::too_many_arguments)]
    pub fn run_varlen<T: Element>(
        &self,
        q: &Tensor<'_, T, 3>,
        k: &Tensor<'_, T, 3>,
        v: &Tensor<'_, T, 3>,
        o: &Tensor<'_, T, 3>,
        d_o: &Tensor<'_, T, 3>,
        lse: &Tensor<'_, f32, 2>,
        seqlens: &Varlen<'_>,
        dq: &mut TensorMut<'_, T, 3>,
        dk: &mut TensorMut<'_, T, 3>,
        dv: &mut TensorMut<'_, T, 3>,
    ) -> Result<Algorithm> {
        let a = self.args(
            q.raw(),
            k.raw(),
            v.raw(),
            o.raw(),
            d_o.raw(),
            lse.raw(),
            dq.raw(),
            dk.raw(),
            dv.raw(),
            Some(seqlens),
            Stream::legacy_default(),
        )?;
        self.call(a)
    }

    /// [`Backward::run_varlen`] into new zero-filled buffers shaped like Q, K, V (so rows outside every sequence hold
    /// 0).
    pub fn compute_varlen<T: Element>(
        &self,
        q: &Tensor<'_, T, 3>,
        k: &Tensor<'_, T, 3>,
        v: &Tensor<'_, T, 3>,
        o: &Tensor<'_, T, 3>,
        d_o: &Tensor<'_, T, 3>,
        lse: &Tensor<'_, f32, 2>,
        seqlens: &Varlen<'_>,
    ) -> Result<Gradients<T>> {
        let (qs, ks) = (q.shape(), k.shape());
        let zero = || -> T {
            // Safety: f32, f16 and bf16 (the only Element types) are plain bits; all zero is 0.0.
            unsafe { std::mem::zeroed() }
        };
        let mut dq = vec![zero(); qs.iter().product()];
        let mut dk = vec![zero(); ks.iter().product()];
        let mut dv = vec![zero(); ks.iter().product()];
        let algorithm = self.run_varlen(
            q,
            k,
            v,
            o,
            d_o,
            lse,
            seqlens,
            &mut TensorMut::new(&mut dq, qs)?,
            &mut TensorMut::new(&mut dk, ks)?,
            &mut TensorMut::new(&mut dv, ks)?,
        )?;
        Ok(Gradients { dq, dk, dv, algorithm })
    }

    /// [`Backward::run_varlen`] on raw tensors and a [`Varlen`] on their device: CUDA tensors asynchronously on
    /// `stream`, or host tensors the borrow checker cannot see.
    #[allow(clippy::too_many_arguments)]
    pub fn run_varlen_raw(
        &self,
        q: &RawTensor,
        k: &RawTensor,
        v: &RawTensor,
        o: &RawTensor,
        d_o: &RawTensor,
        lse: &RawTensor,
        seqlens: &Varlen<'_>,
        dq: &RawTensor,
        dk: &RawTensor,
        dv: &RawTensor,
        stream: Stream,
    ) -> Result<Algorithm> {
        let a = self.args(
            *q.as_raw(),
            *k.as_raw(),
            *v.as_raw(),
            *o.as_raw(),
            *d_o.as_raw(),
            *lse.as_raw(),
            *dq.as_raw(),
            *dk.as_raw(),
            *dv.as_raw(),
            Some(seqlens),
            stream,
        )?;
        self.call(a)
    }
}

impl<T: Element> fmt::Display for Gradients<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Gradients(dq: {}, dk: {}, dv: {} elements, by {})",
            self.dq.len(),
            self.dk.len(),
            self.dv.len(),
            self.algorithm
        )
    }
}
