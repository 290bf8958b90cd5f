//! Tensor views: borrowed host slices ([`Tensor`], [`TensorMut`]) checked against their shape and
//! strides, and raw (device) pointers ([`RawTensor`]) behind an `unsafe` constructor.

use std::os::raw::c_void;

use flash_sys as sys;

use crate::error::{Error, Result};

/// Element type of a tensor (`FLASH_DTYPE_*`).
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    /// IEEE binary32; CPU only.
    Fp32,
    /// IEEE binary16 ([`half::f16`]).
    Fp16,
    /// bfloat16 ([`half::bf16`]).
    Bf16,
}

impl DType {
    /// The `FLASH_DTYPE_*` value.
    pub fn to_raw(self) -> i32 {
        match self {
            DType::Fp32 => sys::FLASH_DTYPE_FP32,
            DType::Fp16 => sys::FLASH_DTYPE_FP16,
            DType::Bf16 => sys::FLASH_DTYPE_BF16,
        }
    }

    /// The dtype for a `FLASH_DTYPE_*` value, `None` for an unknown one.
    pub fn from_raw(raw: i32) -> Option<Self> {
        match raw {
            sys::FLASH_DTYPE_FP32 => Some(DType::Fp32),
            sys::FLASH_DTYPE_FP16 => Some(DType::Fp16),
            sys::FLASH_DTYPE_BF16 => Some(DType::Bf16),
            _ => None,
        }
    }

    /// Bytes per element.
    pub fn size_bytes(self) -> usize {
        match self {
            DType::Fp32 => 4,
            DType::Fp16 | DType::Bf16 => 2,
        }
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for half::f16 {}
    impl Sealed for half::bf16 {}
}

/// A Rust element type libflash computes on: `f32`, [`half::f16`], [`half::bf16`].
pub trait Element: Copy + Send + Sync + 'static + sealed::Sealed {
    /// The matching libflash dtype.
    const DTYPE: DType;
}
impl Element for f32 {
    const DTYPE: DType = DType::Fp32;
}
impl Element for half::f16 {
    const DTYPE: DType = DType::Fp16;
}
impl Element for half::bf16 {
    const DTYPE: DType = DType::Bf16;
}

/// Where a tensor lives (`FLASH_DEVICE_*` plus the CUDA ordinal).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Device {
    /// Host memory.
    Cpu,
    /// CUDA device with this ordinal.
    Cuda(i32),
}

impl Device {
    pub(crate) fn raw_type_and_id(self) -> (i32, i32) {
        match self {
            Device::Cpu => (sys::FLASH_DEVICE_CPU, 0),
            Device::Cuda(id) => (sys::FLASH_DEVICE_CUDA, id),
        }
    }

    pub(crate) fn from_raw(device_type: i32, device_id: i32) -> Option<Self> {
        match device_type {
            sys::FLASH_DEVICE_CPU => Some(Device::Cpu),
            sys::FLASH_DEVICE_CUDA => Some(Device::Cuda(device_id)),
            _ => None,
        }
    }
}

fn bad_shape(what: &str, msg: String) -> Error {
    Error::new(sys::FLASH_ERROR_BAD_SHAPE, format!("{what}{msg}"))
}
fn bad_stride(what: &str, msg: String) -> Error {
    Error::new(sys::FLASH_ERROR_BAD_STRIDE, format!("{what}{msg}"))
}

/// Row-major strides (in elements) of a densely packed tensor.
pub fn contiguous_strides<const N: usize>(shape: [usize; N]) -> [usize; N] {
    let mut strides = [0; N];
    let mut s = 1usize;
    for i in (0..N).rev() {
        strides[i] = s;
        s = s.saturating_mul(shape[i]);
    }
    strides
}

/// Checks shape and strides against a slice of `len` elements: rank 1..=4, every extent in
/// [1, 2^31 - 1], and the farthest element addressed inside the slice. Returns the span in elements.
fn check_layout<const N: usize>(len: usize, shape: &[usize; N], strides: &[usize; N]) -> Result<usize> {
    if N == 0 || N > 4 {
        return Err(Error::new(sys::FLASH_ERROR_BAD_SHAPE, format!("a tensor has rank 1 to 4, not {N}")));
    }
    let mut last = 0usize; // largest element offset addressed
    for i in 0..N {
        if shape[i] == 0 {
            return Err(bad_shape("", format!("shape[{i}] is 0 but must be positive (shape {shape:?})")));
        }
        if shape[i] > i32::MAX as usize {
            return Err(bad_shape("", format!("shape[{i}] is {}, larger than 2^31-1", shape[i])));
        }
        if strides[i] > i64::MAX as usize {
            return Err(bad_stride("", format!("strides[{i}] is {}, larger than 2^63-1", strides[i])));
        }
        last = (shape[i] - 1)
            .checked_mul(strides[i])
            .and_then(|x| x.checked_add(last))
            .ok_or_else(|| bad_stride("", format!("shape {shape:?} with strides {strides:?} overflows")))?;
    }
    let span = last + 1;
    if span > len {
        return Err(bad_stride(
            "",
            format!(
                "shape {shape:?} with strides {strides:?} addresses element {last} but the slice has {len} elements"
            ),
        ));
    }
    Ok(span)
}

/// Strides of a densely packed view of a slice of `len` elements, which must be exactly `shape`'s.
fn check_contiguous<const N: usize>(len: usize, shape: &[usize; N]) -> Result<[usize; N]> {
    let strides = contiguous_strides(*shape);
    let span = check_layout(usize::MAX, shape, &strides)?; // extents; span = product of shape
    if span != len {
        return Err(bad_shape("", format!("shape {shape:?} has {span} elements but the slice has {len}")));
    }
    Ok(strides)
}

/// An output must not have two indices that reach one element (a stride of 0, or overlapping
/// dimensions): sort the dimensions by stride; each must step past everything inside it.
fn check_no_self_overlap<const N: usize>(shape: &[usize; N], strides: &[usize; N]) -> Result<()> {
    let mut dims: Vec<usize> = (0..N).filter(|&i| shape[i] > 1).collect();
    dims.sort_by_key(|&i| strides[i]);
    let mut inner_span = 1usize;
    for d in dims {
        if strides[d] < inner_span {
            return Err(bad_stride(
                "",
                format!(
                    "strides[{d}] is {}, so distinct output elements would share memory (needs >= {inner_span})",
                    strides[d]
                ),
            ));
        }
        inner_span += strides[d] * (shape[d] - 1); // cannot overflow: bounded by the checked span
    }
    Ok(())
}

fn raw_descriptor<const N: usize>(
    data: *mut c_void,
    dtype: DType,
    device: Device,
    shape: &[usize; N],
    strides: &[usize; N],
) -> sys::flash_tensor {
    let (device_type, device_id) = device.raw_type_and_id();
    let mut t = sys::flash_tensor {
        data,
        dtype: dtype.to_raw(),
        device_type,
        device_id,
        ndim: N as i32,
        shape: [0; 4],
        strides: [0; 4],
    };
    for i in 0..N.min(4) {
        t.shape[i] = shape[i] as i64;
        t.strides[i] = strides[i] as i64;
    }
    t
}

/// A read-only view of host memory as an N-dimensional tensor (N = 4 for Q, K, V; strides in
/// elements, any non-negative value, so broadcasting and packed QKV layouts work).
///
/// The shape and strides are checked against the slice when the view is made: every element the
/// library can address lies inside the slice.
///
/// ```
/// use flash::Tensor;
/// let data = vec![0.5f32; 2 * 16 * 4 * 64];
/// let q = Tensor::new(&data, [2, 16, 4, 64])?; // [batch, seqlen, heads, head_dim]
/// assert_eq!(q.strides(), [16 * 4 * 64, 4 * 64, 64, 1]);
/// assert!(Tensor::new(&data[1..], [2, 16, 4, 64]).is_err()); // one element short
/// # Ok::<(), flash::Error>(())
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Tensor<'a, T: Element, const N: usize = 4> {
    data: &'a [T],
    shape: [usize; N],
    strides: [usize; N],
}

impl<'a, T: Element, const N: usize> Tensor<'a, T, N> {
    /// A densely packed (row-major) view; `data.len()` must be the product of `shape`.
    pub fn new(data: &'a [T], shape: [usize; N]) -> Result<Self> {
        let strides = check_contiguous(data.len(), &shape)?;
        Ok(Tensor { data, shape, strides })
    }

    /// A strided view: element `[i0, i1, ...]` is `data[i0 * strides[0] + i1 * strides[1] + ...]`.
    pub fn with_strides(data: &'a [T], shape: [usize; N], strides: [usize; N]) -> Result<Self> {
        check_layout(data.len(), &shape, &strides)?;
        Ok(Tensor { data, shape, strides })
    }

    pub fn shape(&self) -> [usize; N] {
        self.shape
    }
    pub fn strides(&self) -> [usize; N] {
        self.strides
    }
    pub fn data(&self) -> &'a [T] {
        self.data
    }

    pub(crate) fn raw(&self) -> sys::flash_tensor {
        // The library never writes through an input, so handing it a *mut derived from & is sound.
        raw_descriptor(self.data.as_ptr() as *mut c_void, T::DTYPE, Device::Cpu, &self.shape, &self.strides)
    }
}

/// A writable view of host memory as an N-dimensional tensor: an output (O, or the LSE with N = 3).
///
/// Besides the checks of [`Tensor`], no two elements of the view may share memory.
///
/// ```
/// use flash::TensorMut;
/// let mut out = vec![0.0f32; 1 * 8 * 2 * 16];
/// let o = TensorMut::new(&mut out, [1, 8, 2, 16])?;
/// assert_eq!(o.shape(), [1, 8, 2, 16]);
/// // A stride of 0 would make several outputs one element:
/// let mut out = vec![0.0f32; 16];
/// let e = TensorMut::with_strides(&mut out, [1, 8, 1, 16], [0, 0, 0, 1]).unwrap_err();
/// assert_eq!(e.kind(), flash::ErrorKind::BadStride);
/// # Ok::<(), flash::Error>(())
/// ```
#[derive(Debug)]
pub struct TensorMut<'a, T: Element, const N: usize = 4> {
    data: &'a mut [T],
    shape: [usize; N],
    strides: [usize; N],
}

impl<'a, T: Element, const N: usize> TensorMut<'a, T, N> {
    /// A densely packed (row-major) view; `data.len()` must be the product of `shape`.
    pub fn new(data: &'a mut [T], shape: [usize; N]) -> Result<Self> {
        let strides = check_contiguous(data.len(), &shape)?;
        Ok(TensorMut { data, shape, strides })
    }

    /// A strided view; the elements addressed must lie inside `data` and be distinct.
    pub fn with_strides(data: &'a mut [T], shape: [usize; N], strides: [usize; N]) -> Result<Self> {
        check_layout(data.len(), &shape, &strides)?;
        check_no_self_overlap(&shape, &strides)?;
        Ok(TensorMut { data, shape, strides })
    }

    pub fn shape(&self) -> [usize; N] {
        self.shape
    }
    pub fn strides(&self) -> [usize; N] {
        self.strides
    }
    pub fn data(&self) -> &[T] {
        self.data
    }
    pub fn data_mut(&mut self) -> &mut [T] {
        self.data
    }

    pub(crate) fn raw(&mut self) -> sys::flash_tensor {
        raw_descriptor(self.data.as_mut_ptr() as *mut c_void, T::DTYPE, Device::Cpu, &self.shape, &self.strides)
    }
}

/// A tensor given by raw pointer: CUDA device memory (or host memory the borrow checker cannot see).
///
/// Nothing about the memory can be checked from Rust, so making one is `unsafe`; the library still
/// checks everything it can (shape, strides, dtype and device agreement, overlaps) when it is used.
#[derive(Clone, Copy, Debug)]
pub struct RawTensor {
    raw: sys::flash_tensor,
}

// Safety: a RawTensor is an address plus a layout; the contract of its constructor makes the memory
// valid for the calls it is used in, whichever thread makes them (libflash entry points are thread-safe).
unsafe impl Send for RawTensor {}
unsafe impl Sync for RawTensor {}

impl RawTensor {
    /// A tensor at `data` on `device`, with element `shape` and `strides` (ranks 1 to 4: 4 for Q, K, V,
    /// O; 3 for the LSE).
    ///
    /// Fails (BAD_SHAPE / BAD_STRIDE) only on what can be checked without the memory: rank, zero or
    /// oversized extents, and a span that overflows.
    ///
    /// # Safety
    ///
    /// For as long as this value (or a copy) is used, and until every operation enqueued with it has
    /// completed on its stream:
    /// - `data` points to memory on `device` (a CUDA device pointer valid in the current context for
    ///   `Device::Cuda(id)`, a host pointer for `Device::Cpu`), aligned for `dtype`, and every element
    ///   `sum_i idx_i * strides[i]` (in elements of `dtype`, `idx_i < shape[i]`) lies inside one live
    ///   allocation;
    /// - the memory is not freed or reused;
    /// - used as an input, nothing writes it meanwhile; used as an output (O, LSE), nothing else reads
    ///   or writes it meanwhile except in stream order after the call's work.
    pub unsafe fn from_raw_parts<const N: usize>(
        data: *mut c_void,
        dtype: DType,
        device: Device,
        shape: [usize; N],
        strides: [usize; N],
    ) -> Result<Self> {
        check_layout(usize::MAX, &shape, &strides)?;
        Ok(RawTensor { raw: raw_descriptor(data, dtype, device, &shape, &strides) })
    }

    /// A densely packed (row-major) CUDA tensor on device `device_id`.
    ///
    /// # Safety
    ///
    /// As [`RawTensor::from_raw_parts`]: `data` is a device pointer to at least
    /// `shape.iter().product()` elements of `dtype` on device `device_id`, live (and, for an output, not
    /// used by anything else) until every operation enqueued with this tensor has completed.
    pub unsafe fn cuda<const N: usize>(
        data: *mut c_void,
        dtype: DType,
        device_id: i32,
        shape: [usize; N],
    ) -> Result<Self> {
        // Safety: the caller's contract is the one from_raw_parts needs.
        unsafe { Self::from_raw_parts(data, dtype, Device::Cuda(device_id), shape, contiguous_strides(shape)) }
    }

    /// The descriptor handed to the library.
    pub fn as_raw(&self) -> &sys::flash_tensor {
        &self.raw
    }

    pub fn dtype(&self) -> Option<DType> {
        DType::from_raw(self.raw.dtype)
    }

    pub fn device(&self) -> Option<Device> {
        Device::from_raw(self.raw.device_type, self.raw.device_id)
    }
}

impl<'a, T: Element, const N: usize> From<&Tensor<'a, T, N>> for RawTensor {
    fn from(t: &Tensor<'a, T, N>) -> Self {
        RawTensor { raw: t.raw() }
    }
}

/// A CUDA stream (`cudaStream_t`), passed explicitly to every GPU call; the call is asynchronous on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stream {
    raw: *mut c_void,
}

// Safety: a stream handle may be used from any host thread (CUDA streams are not thread-affine).
unsafe impl Send for Stream {}
unsafe impl Sync for Stream {}

impl Stream {
    /// The legacy default stream (`NULL`); also what a CPU call takes (it ignores the stream).
    pub const fn legacy_default() -> Self {
        Stream { raw: std::ptr::null_mut() }
    }

    /// Wraps a `cudaStream_t` made elsewhere (cudarc, the CUDA runtime, a framework).
    ///
    /// # Safety
    ///
    /// `stream` is NULL or a valid `cudaStream_t` created on the device of the tensors it is used with,
    /// and it is not destroyed before the work enqueued on it through libflash has completed.
    pub const unsafe fn from_raw(stream: *mut c_void) -> Self {
        Stream { raw: stream }
    }

    pub fn as_raw(self) -> *mut c_void {
        self.raw
    }
}

impl Default for Stream {
    fn default() -> Self {
        Stream::legacy_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_checks() {
        let v = vec![0f32; 24];
        assert!(Tensor::new(&v, [2, 3, 1, 4]).is_ok());
        assert_eq!(Tensor::new(&v, [2, 3, 1, 5]).unwrap_err().kind(), crate::ErrorKind::BadShape);
        assert_eq!(Tensor::new(&v, [2, 0, 1, 4]).unwrap_err().kind(), crate::ErrorKind::BadShape);
        // Broadcasting an input is fine; addressing past the slice is not.
        assert!(Tensor::with_strides(&v, [5, 3, 1, 4], [0, 4, 4, 1]).is_ok());
        let e = Tensor::with_strides(&v, [2, 3, 1, 4], [13, 4, 4, 1]).unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::BadStride);
        assert!(e.message().contains("addresses element 24"), "{e}");
        let e = Tensor::with_strides(&v, [2, 3, 1, 4], [usize::MAX / 2, 4, 4, 1]).unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::BadStride);
    }

    #[test]
    fn outputs_must_not_self_overlap() {
        let mut v = vec![0f32; 24];
        assert!(TensorMut::with_strides(&mut v, [2, 3, 1, 4], [12, 4, 1, 1]).is_ok()); // extent-1 dim: any stride
        let e = TensorMut::with_strides(&mut v, [2, 3, 1, 4], [12, 2, 1, 1]).unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::BadStride);
        assert!(e.message().contains("share memory"), "{e}");
    }
}
