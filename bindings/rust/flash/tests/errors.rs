//! Each error path maps to the right status code, name and message: the library's own checks (the
//! message is flash_last_error_message's) and this crate's checks made before a call.

use std::os::raw::c_void;

use flash::{
    Algorithm, BlockMask, DType, Device, Error, ErrorKind, Forward, RawTensor, Stream, Tensor, TensorMut, Varlen,
};
use flash_sys as sys;

fn assert_error(e: Error, kind: ErrorKind, code: i32, message: &str) {
    assert_eq!(e.kind(), kind, "{e}");
    assert_eq!(e.code(), code, "{e}");
    assert_eq!(e.name(), flash::status_name(code));
    assert!(e.message().contains(message), "message {:?} lacks {message:?}", e.message());
    assert_eq!(e.to_string(), format!("{} ({}): {}", e.name(), code, e.message()));
}

/// Runs a host forward with q [1, sq, hq, d] and k, v [1, sk, hkv, dk].
fn host_forward(
    f: Forward<'_>,
    sq: usize,
    sk: usize,
    hq: usize,
    hkv: usize,
    d: usize,
    dk: usize,
) -> flash::Result<Algorithm> {
    let q = vec![0.5f32; sq * hq * d];
    let kv = vec![0.5f32; sk * hkv * dk];
    let mut o = vec![0f32; q.len()];
    f.run(
        &Tensor::new(&q, [1, sq, hq, d])?,
        &Tensor::new(&kv, [1, sk, hkv, dk])?,
        &Tensor::new(&kv, [1, sk, hkv, dk])?,
        &mut TensorMut::new(&mut o, [1, sq, hq, d])?,
    )
}

// ---- From the library ----------------------------------------------------------------------------

#[test]
fn head_dim_not_a_multiple_of_8() {
    let e = host_forward(Forward::new(), 4, 4, 1, 1, 12, 12).unwrap_err();
    assert_error(
        e,
        ErrorKind::UnsupportedHeadDim,
        sys::FLASH_ERROR_UNSUPPORTED_HEAD_DIM,
        "head_dim (q.shape[3]) is 12 but must be a multiple of 8 in [8, 256]",
    );
}

#[test]
fn head_dims_disagree() {
    let e = host_forward(Forward::new(), 4, 4, 1, 1, 16, 8).unwrap_err();
    assert_error(e, ErrorKind::BadShape, sys::FLASH_ERROR_BAD_SHAPE, "k.shape[3] is 8 but q.shape[3] is 16");
}

#[test]
fn heads_q_not_a_multiple_of_heads_kv() {
    let e = host_forward(Forward::new(), 4, 4, 3, 2, 8, 8).unwrap_err();
    assert_error(e, ErrorKind::BadShape, sys::FLASH_ERROR_BAD_SHAPE, "not a multiple of k.shape[2] (heads_kv) 2");
}

#[test]
fn last_dimension_not_contiguous() {
    let q = vec![0f32; 4 * 16];
    let mut o = vec![0f32; 4 * 8];
    let qv = Tensor::with_strides(&q, [1, 4, 1, 8], [64, 16, 16, 2]).unwrap();
    let e = Forward::new().run(&qv, &qv, &qv, &mut TensorMut::new(&mut o, [1, 4, 1, 8]).unwrap()).unwrap_err();
    assert_error(
        e,
        ErrorKind::BadStride,
        sys::FLASH_ERROR_BAD_STRIDE,
        "q.strides[3] is 2 but the last dimension must be contiguous",
    );
}

#[test]
fn lse_shape_must_match_q() {
    let q = vec![0f32; 4 * 8];
    let mut o = vec![0f32; 4 * 8];
    let mut lse = vec![0f32; 5];
    let t = Tensor::new(&q, [1, 4, 1, 8]).unwrap();
    let e = Forward::new()
        .run_with_lse(
            &t,
            &t,
            &t,
            &mut TensorMut::new(&mut o, [1, 4, 1, 8]).unwrap(),
            &mut TensorMut::new(&mut lse, [1, 1, 5]).unwrap(),
        )
        .unwrap_err();
    assert_error(e, ErrorKind::BadShape, sys::FLASH_ERROR_BAD_SHAPE, "lse.shape[2] is 5 but q.shape[1] is 4");
}

#[test]
fn scale_must_be_finite() {
    let e = host_forward(Forward::new().scale(f32::NAN), 4, 4, 1, 1, 8, 8).unwrap_err();
    assert_error(e, ErrorKind::InvalidArgument, sys::FLASH_ERROR_INVALID_ARGUMENT, "softmax_scale is not finite");
}

#[test]
fn unknown_algorithm_value() {
    let e = host_forward(Forward::new().algorithm(Algorithm::from_raw(77)), 4, 4, 1, 1, 8, 8).unwrap_err();
    assert_error(
        e,
        ErrorKind::InvalidArgument,
        sys::FLASH_ERROR_INVALID_ARGUMENT,
        "algorithm is 77, not a FLASH_ALGO_* value",
    );
}

#[test]
fn gpu_algorithm_on_host_tensors() {
    let e = host_forward(Forward::new().algorithm(Algorithm::SM80), 4, 4, 1, 1, 8, 8).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::AlgorithmUnavailable, "{e}");
    assert!(e.message().starts_with("algorithm sm80 "), "{e}");
}

#[test]
fn block_size_not_64_or_128() {
    let mask = BlockMask::from_dense(32, 64, [1, 1, 1, 1], &[true]).unwrap();
    let e = host_forward(Forward::new().block_mask(&mask), 32, 32, 1, 1, 8, 8).unwrap_err();
    assert_error(e, ErrorKind::BadMask, sys::FLASH_ERROR_BAD_MASK, "block_mask block size is 32 but must be 64 or 128");
}

#[test]
fn block_mask_with_the_wrong_number_of_query_blocks() {
    let mask = BlockMask::from_dense(64, 64, [1, 1, 1, 2], &[true, true]).unwrap();
    let e = host_forward(Forward::new().block_mask(&mask), 100, 100, 1, 1, 8, 8).unwrap_err();
    assert_error(
        e,
        ErrorKind::BadMask,
        sys::FLASH_ERROR_BAD_MASK,
        "block_mask->num_q_blocks is 1 but seqlen_q 100 with block_m 64 needs 2",
    );
}

#[test]
fn block_mask_index_repeated_or_out_of_range() {
    let mask = BlockMask::from_compact(64, 64, [1, 1, 1], 2, vec![2], vec![0, 0]).unwrap();
    let e = host_forward(Forward::new().block_mask(&mask), 64, 128, 1, 1, 8, 8).unwrap_err();
    assert_error(e, ErrorKind::BadMask, sys::FLASH_ERROR_BAD_MASK, "lists key block 0 twice");
    let mask = BlockMask::from_compact(64, 64, [1, 1, 1], 2, vec![1], vec![5, 0]).unwrap();
    let e = host_forward(Forward::new().block_mask(&mask), 64, 128, 1, 1, 8, 8).unwrap_err();
    assert_error(
        e,
        ErrorKind::BadMask,
        sys::FLASH_ERROR_BAD_MASK,
        "block_mask->kv_indices[0,0,0,0] is 5 but must be in [0, 2)",
    );
    let mask = BlockMask::from_compact(64, 64, [1, 1, 1], 2, vec![3], vec![0, 1]).unwrap();
    let e = host_forward(Forward::new().block_mask(&mask), 64, 128, 1, 1, 8, 8).unwrap_err();
    assert_error(
        e,
        ErrorKind::BadMask,
        sys::FLASH_ERROR_BAD_MASK,
        "block_mask->kv_num_blocks[0,0,0] is 3 but must be in [0, 2]",
    );
}

// Raw tensors over host memory reach the library's dtype/device checks that typed views rule out.
fn raw_host<T>(data: &mut [T], dtype: DType, shape: [usize; 4]) -> RawTensor {
    // Safety: `data` is a live host allocation holding the whole (contiguous) shape for the duration of
    // each test's call, and no call writes through an input.
    unsafe {
        RawTensor::from_raw_parts(
            data.as_mut_ptr() as *mut c_void,
            dtype,
            Device::Cpu,
            shape,
            flash::contiguous_strides(shape),
        )
    }
    .unwrap()
}

#[test]
fn dtypes_disagree() {
    let mut q = vec![0f32; 32];
    let mut k = vec![0u16; 32];
    let mut v = vec![0f32; 32];
    let mut o = vec![0f32; 32];
    let s = [1, 4, 1, 8];
    let e = Forward::new()
        .run_raw(
            &raw_host(&mut q, DType::Fp32, s),
            &raw_host(&mut k, DType::Fp16, s),
            &raw_host(&mut v, DType::Fp32, s),
            &raw_host(&mut o, DType::Fp32, s),
            None,
            Stream::default(),
        )
        .unwrap_err();
    assert_error(e, ErrorKind::DtypeMismatch, sys::FLASH_ERROR_DTYPE_MISMATCH, "k.dtype is fp16 but q.dtype is fp32");
}

#[test]
fn output_overlapping_an_input() {
    let mut buf = vec![0f32; 64];
    let s = [1, 4, 1, 8];
    let q = raw_host(&mut buf[..32], DType::Fp32, s);
    let o = raw_host(&mut buf[16..48], DType::Fp32, s);
    let e = Forward::new().run_raw(&q, &q, &q, &o, None, Stream::default()).unwrap_err();
    assert_error(e, ErrorKind::InvalidArgument, sys::FLASH_ERROR_INVALID_ARGUMENT, "o overlaps q in memory");
}

// Descriptors for CUDA memory are never dereferenced on the host; the library rejects these calls in
// validation, before any CUDA call, so dummy addresses are enough here.
fn fake_cuda(addr: usize, dtype: DType, shape: [usize; 4]) -> RawTensor {
    // Safety: not upheld on purpose, and not needed: each call below fails validation before any
    // device memory is touched (no CUDA device / dtype / device mismatch).
    unsafe { RawTensor::cuda(addr as *mut c_void, dtype, 0, shape) }.unwrap()
}

#[test]
fn host_and_device_tensors_mixed() {
    let mut q = vec![0u16; 32];
    let s = [1, 4, 1, 8];
    let k = fake_cuda(0x10_0000, DType::Fp16, s);
    let e = Forward::new().run_raw(&raw_host(&mut q, DType::Fp16, s), &k, &k, &k, None, Stream::default()).unwrap_err();
    assert_error(e, ErrorKind::DeviceMismatch, sys::FLASH_ERROR_DEVICE_MISMATCH, "k is on cuda:0 but q is on cpu");
}

#[test]
fn fp32_on_a_gpu() {
    let s = [1, 4, 1, 8];
    let t = |a| fake_cuda(a, DType::Fp32, s);
    let e = Forward::new()
        .run_raw(&t(0x10_0000), &t(0x20_0000), &t(0x30_0000), &t(0x40_0000), None, Stream::default())
        .unwrap_err();
    assert_error(
        e,
        ErrorKind::UnsupportedDtype,
        sys::FLASH_ERROR_UNSUPPORTED_DTYPE,
        "q.dtype is fp32 but CUDA tensors must be fp16 or bf16",
    );
}

#[test]
fn cuda_tensors_without_a_cuda_device() {
    if flash::cuda_device_count().unwrap() > 0 {
        return; // a GPU machine: this path is for CPU-only builds and machines
    }
    let s = [1, 4, 1, 8];
    let t = |a| fake_cuda(a, DType::Bf16, s);
    let e = Forward::new()
        .run_raw(&t(0x10_0000), &t(0x20_0000), &t(0x30_0000), &t(0x40_0000), None, Stream::default())
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NoCudaDevice, "{e}");
    assert!(e.message().starts_with("no CUDA device"), "{e}");
}

#[test]
fn host_block_mask_with_device_tensors() {
    let s = [1, 64, 1, 8];
    let t = |a| fake_cuda(a, DType::Bf16, s);
    let mask = BlockMask::from_dense(64, 64, [1, 1, 1, 1], &[true]).unwrap();
    let e = Forward::new()
        .block_mask(&mask)
        .run_raw(&t(0x10_0000), &t(0x20_0000), &t(0x30_0000), &t(0x40_0000), None, Stream::default())
        .unwrap_err();
    assert_error(
        e,
        ErrorKind::DeviceMismatch,
        sys::FLASH_ERROR_DEVICE_MISMATCH,
        "block_mask is on Cpu but q is on Some(Cuda(0))",
    );
}

#[test]
fn workspace_smaller_than_the_query_says() {
    let q = vec![0.5f32; 256 * 2 * 64];
    let mut o = vec![0f32; q.len()];
    let t = Tensor::new(&q, [1, 256, 2, 64]).unwrap();
    let mut ot = TensorMut::new(&mut o, [1, 256, 2, 64]).unwrap();
    let mut tested = false;
    for alg in [Algorithm::CPU, Algorithm::NAIVE] {
        let need = Forward::new().algorithm(alg).workspace_size(&t, &t, &t, &mut ot).unwrap();
        if need <= 8 {
            continue; // nothing to be too small
        }
        let mut scratch = vec![0u64; 1];
        // Safety: 8 writable, 8-aligned host bytes used by nothing else during the call (the library
        // must reject them as too small without writing).
        let f = unsafe { Forward::new().algorithm(alg).workspace(scratch.as_mut_ptr() as *mut c_void, 8) };
        let e = f.run(&t, &t, &t, &mut ot).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::WorkspaceTooSmall, "{e}");
        assert!(e.message().contains("workspace_size is 8 bytes"), "{e}");
        tested = true;
    }
    assert!(tested, "no CPU algorithm asks for a workspace any more: this test needs another way in");
}

// ---- From this crate's own checks, before any call --------------------------------------------------

#[test]
fn slice_too_short_for_the_shape() {
    let q = vec![0f32; 31];
    let e = Tensor::new(&q, [1, 4, 1, 8]).unwrap_err();
    assert_error(
        e,
        ErrorKind::BadShape,
        sys::FLASH_ERROR_BAD_SHAPE,
        "shape [1, 4, 1, 8] has 32 elements but the slice has 31",
    );
}

#[test]
fn zero_extent() {
    let e = Tensor::<f32>::new(&[], [1, 0, 1, 8]).unwrap_err();
    assert_error(e, ErrorKind::BadShape, sys::FLASH_ERROR_BAD_SHAPE, "shape[1] is 0 but must be positive");
}

#[test]
fn strides_past_the_slice() {
    let q = vec![0f32; 64];
    assert!(Tensor::with_strides(&q, [1, 4, 1, 8], [0, 16, 8, 1]).is_ok()); // reaches element 55
    let e = Tensor::with_strides(&q, [1, 4, 1, 8], [0, 20, 8, 1]).unwrap_err();
    assert_error(e, ErrorKind::BadStride, sys::FLASH_ERROR_BAD_STRIDE, "addresses element 67 but the slice has 64");
    let e = Tensor::with_strides(&q, [1, 5, 1, 8], [0, 16, 8, 1]).unwrap_err();
    assert_error(e, ErrorKind::BadStride, sys::FLASH_ERROR_BAD_STRIDE, "addresses element 71 but the slice has 64");
}

#[test]
fn output_elements_sharing_memory() {
    let mut o = vec![0f32; 64];
    let e = TensorMut::with_strides(&mut o, [2, 4, 1, 8], [0, 8, 8, 1]).unwrap_err();
    assert_error(
        e,
        ErrorKind::BadStride,
        sys::FLASH_ERROR_BAD_STRIDE,
        "strides[0] is 0, so distinct output elements would share memory",
    );
}

#[test]
fn window_beyond_int32() {
    let e = host_forward(Forward::new().window(Some(u32::MAX), None), 4, 4, 1, 1, 8, 8).unwrap_err();
    assert_error(e, ErrorKind::BadMask, sys::FLASH_ERROR_BAD_MASK, "window_left is 4294967295, larger than 2^31-1");
}

#[test]
fn block_mask_batch_or_heads_not_covering_q() {
    let mask = BlockMask::from_dense(64, 64, [1, 2, 1, 1], &[true, true]).unwrap();
    let e = host_forward(Forward::new().block_mask(&mask), 64, 64, 3, 1, 8, 8).unwrap_err();
    assert_error(
        e,
        ErrorKind::BadMask,
        sys::FLASH_ERROR_BAD_MASK,
        "block_mask has heads 2 but q.shape[2] is 3 (1 broadcasts)",
    );
}

#[test]
fn block_map_shape_and_entries_disagree() {
    let e = BlockMask::from_dense(64, 64, [1, 1, 2, 2], &[true; 3]).unwrap_err();
    assert_error(e, ErrorKind::BadMask, sys::FLASH_ERROR_BAD_MASK, "does not match its 3 entries");
}

#[test]
fn errors_are_per_thread_and_do_not_leak_into_later_calls() {
    let e = host_forward(Forward::new(), 4, 4, 1, 1, 12, 12).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::UnsupportedHeadDim);
    host_forward(Forward::new(), 4, 4, 1, 1, 8, 8).unwrap();
    // Another thread's failure does not touch this one's error.
    std::thread::spawn(|| host_forward(Forward::new(), 4, 4, 1, 1, 16, 8).unwrap_err()).join().unwrap();
    let e2 = host_forward(Forward::new(), 4, 4, 1, 1, 12, 12).unwrap_err();
    assert_eq!(e, e2);
}

// ---- Packed variable-length batches (Varlen) ------------------------------------------------------------------

/// A varlen forward on host tensors q [tq, 2, 16], k, v [tk, 1, 16] (tq, tk: 8 and 12 unless the offsets say more);
/// O is poisoned with 7.0 and must be untouched when the call is refused.
fn host_varlen(f: Forward<'_>, seqlens: flash::Result<Varlen<'_>>) -> flash::Result<Algorithm> {
    let seqlens = seqlens?;
    let (tq, tk) = (8usize, 12usize);
    let q = vec![0.5f32; tq * 2 * 16];
    let kv = vec![0.25f32; tk * 16];
    let mut o = vec![7f32; q.len()];
    let r = f.run_varlen(
        &Tensor::new(&q, [tq, 2, 16])?,
        &Tensor::new(&kv, [tk, 1, 16])?,
        &Tensor::new(&kv, [tk, 1, 16])?,
        &seqlens,
        &mut TensorMut::new(&mut o, [tq, 2, 16])?,
        None,
    );
    if r.is_err() {
        assert!(o.iter().all(|&x| x == 7.0), "a refused call wrote its output");
    }
    r
}

const CU_Q: [i32; 4] = [0, 3, 3, 8];
const CU_K: [i32; 4] = [0, 4, 6, 12];

#[test]
fn varlen_offsets_refused_by_the_library() {
    for (cu_q, cu_k, message) in [
        ([1, 3, 3, 8], CU_K, "cu_seqlens_q[0] is 1 but must be 0"),
        ([0, 3, 2, 8], CU_K, "cu_seqlens_q[2] is 2, less than cu_seqlens_q[1] = 3: the offsets must not decrease"),
        ([0, 3, 3, 9], CU_K, "cu_seqlens_q[3] is 9 but q has 8 rows (q.shape[0])"),
        (CU_Q, [0, 4, 6, 13], "cu_seqlens_k[3] is 13 but k has 12 rows (k.shape[0])"),
    ] {
        let e = host_varlen(Forward::new(), Varlen::new(&cu_q, &cu_k)).unwrap_err();
        assert_error(e, ErrorKind::InvalidArgument, sys::FLASH_ERROR_INVALID_ARGUMENT, message);
    }
    let e = host_varlen(Forward::new(), Varlen::new(&CU_Q, &CU_K).and_then(|v| v.seqused_k(&[4, 3, 1]))).unwrap_err();
    assert_error(
        e,
        ErrorKind::InvalidArgument,
        sys::FLASH_ERROR_INVALID_ARGUMENT,
        "seqused_k[1] is 3 but sequence 1's slot holds 2 keys (cu_seqlens_k[2] - cu_seqlens_k[1]): must be in [0, 2]",
    );
    let e = host_varlen(Forward::new(), Varlen::new(&CU_Q, &CU_K).and_then(|v| v.max_seqlen(4, 6))).unwrap_err();
    assert_error(
        e,
        ErrorKind::InvalidArgument,
        sys::FLASH_ERROR_INVALID_ARGUMENT,
        "max_seqlen_q is 4 but a sequence has 5 queries",
    );
    let e = host_varlen(Forward::new(), Varlen::new(&CU_Q, &CU_K).and_then(|v| v.max_seqlen(5, 5))).unwrap_err();
    assert_error(
        e,
        ErrorKind::InvalidArgument,
        sys::FLASH_ERROR_INVALID_ARGUMENT,
        "max_seqlen_k is 5 but a sequence has 6 keys",
    );
    // The same arrays, valid: the call runs.
    assert_eq!(host_varlen(Forward::new(), Varlen::new(&CU_Q, &CU_K)).unwrap(), Algorithm::CPU);
}

#[test]
fn varlen_lengths_and_options_refused_by_this_crate() {
    let e = Varlen::new(&[0], &[0]).unwrap_err();
    assert_error(
        e,
        ErrorKind::BadShape,
        sys::FLASH_ERROR_BAD_SHAPE,
        "cu_seqlens_q has 1 entries but must hold batch + 1 >= 2",
    );
    let e = Varlen::new(&CU_Q, &CU_K[..3]).unwrap_err();
    assert_error(
        e,
        ErrorKind::BadShape,
        sys::FLASH_ERROR_BAD_SHAPE,
        "cu_seqlens_k has 3 entries but cu_seqlens_q has 4",
    );
    let e = Varlen::new(&CU_Q, &CU_K).unwrap().seqused_k(&[1, 1]).unwrap_err();
    assert_error(
        e,
        ErrorKind::BadShape,
        sys::FLASH_ERROR_BAD_SHAPE,
        "seqused_k has 2 entries but must have one per sequence, 3",
    );
    let e = Varlen::new(&CU_Q, &CU_K).unwrap().max_seqlen(1 << 31, 4).unwrap_err();
    assert_error(
        e,
        ErrorKind::InvalidArgument,
        sys::FLASH_ERROR_INVALID_ARGUMENT,
        "max_seqlen_q is 2147483648, larger than 2^31-1",
    );
    // Safety: never used in a call (refused first).
    let e = unsafe { Varlen::from_raw_parts(Device::Cpu, 0, CU_Q.as_ptr(), CU_K.as_ptr(), std::ptr::null(), 1, 1) }
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    let mask = BlockMask::from_dense(64, 64, [1, 1, 1, 1], &[true]).unwrap();
    let e = host_varlen(Forward::new().block_mask(&mask), Varlen::new(&CU_Q, &CU_K)).unwrap_err();
    assert_error(
        e,
        ErrorKind::Unsupported,
        sys::FLASH_ERROR_UNSUPPORTED,
        "block-sparse masks are not supported with packed",
    );
}

#[test]
fn varlen_offsets_on_another_device_and_raw_ndim() {
    // Device offsets with host tensors (never read: refused before the call).
    // Safety: the pointers are never dereferenced (the device check fails first).
    let on_gpu = unsafe {
        Varlen::from_raw_parts(Device::Cuda(0), 3, 0x1000 as *const i32, 0x2000 as *const i32, std::ptr::null(), 5, 6)
    };
    let e = host_varlen(Forward::new(), on_gpu).unwrap_err();
    assert_error(
        e,
        ErrorKind::DeviceMismatch,
        sys::FLASH_ERROR_DEVICE_MISMATCH,
        "the varlen offsets are on Cuda(0) but q is on Some(Cpu)",
    );
    // 4-d raw tensors with offsets: the library names the tensor.
    let (mut q, mut kv, mut o) = (vec![0.5f32; 8 * 2 * 16], vec![0.5f32; 12 * 16], vec![0f32; 8 * 2 * 16]);
    let (rq, rkv, ro) = (
        raw_host(&mut q, DType::Fp32, [1, 8, 2, 16]),
        raw_host(&mut kv, DType::Fp32, [1, 12, 1, 16]),
        raw_host(&mut o, DType::Fp32, [1, 8, 2, 16]),
    );
    let vl = Varlen::new(&CU_Q, &CU_K).unwrap();
    let e = Forward::new().run_varlen_raw(&rq, &rkv, &rkv, &vl, &ro, None, Stream::legacy_default()).unwrap_err();
    assert_error(e, ErrorKind::BadShape, sys::FLASH_ERROR_BAD_SHAPE, "q.ndim is 4 but must be 3");
}
