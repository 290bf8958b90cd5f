//! The forward pass, `O = softmax(scale * Q K^T + mask) V`, and its options.

use std::ffi::CString;
use std::fmt;
use std::os::raw::c_void;

use flash_sys as sys;

use crate::abi::LibSized;
use crate::error::{check, static_str, Error, Result};
use crate::mask::BlockMask;
use crate::tensor::{Element, RawTensor, Stream, Tensor, TensorMut};

/// Where the causal diagonal (and the window) sits when `seqlen_q != seqlen_k`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Alignment {
    /// FlashAttention-2's: query `i` sees key `j` iff `j <= i + seqlen_k - seqlen_q`. The default.
    #[default]
    BottomRight,
    /// PyTorch's `is_causal`: query `i` sees key `j` iff `j <= i`.
    TopLeft,
}

impl Alignment {
    pub(crate) fn to_raw(self) -> i32 {
        match self {
            Alignment::BottomRight => sys::FLASH_ALIGN_BOTTOM_RIGHT,
            Alignment::TopLeft => sys::FLASH_ALIGN_TOP_LEFT,
        }
    }
}

/// An attention algorithm (`FLASH_ALGO_*`). A plain integer, not a closed enum, so that an algorithm
/// added by a newer library (reported back as the one that ran) is still representable.
///
/// ```
/// use flash::Algorithm;
/// assert_eq!(Algorithm::from_name("sm80"), Some(Algorithm::SM80));
/// assert_eq!(Algorithm::CPU.name(), Some("cpu"));
/// assert_eq!(Algorithm::from_name("nope"), None);
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Algorithm(i32);

impl Algorithm {
    /// The fastest available for the device and options.
    pub const AUTO: Algorithm = Algorithm(sys::FLASH_ALGO_AUTO);
    /// FlashAttention (Algorithm 1) on the host, fp32 accumulation, threaded.
    pub const CPU: Algorithm = Algorithm(sys::FLASH_ALGO_CPU);
    /// Materialised S and P; the baseline, O(N^2) memory.
    pub const NAIVE: Algorithm = Algorithm(sys::FLASH_ALGO_NAIVE);
    /// Fused mma.sync tensor-core kernel, sm_80 and newer.
    pub const SM80: Algorithm = Algorithm(sys::FLASH_ALGO_SM80);
    /// Warp-specialised wgmma + TMA kernel, sm_90a.
    pub const SM90: Algorithm = Algorithm(sys::FLASH_ALGO_SM90);

    /// Any `FLASH_ALGO_*` value (the library rejects unknown ones with INVALID_ARGUMENT).
    pub const fn from_raw(raw: i32) -> Self {
        Algorithm(raw)
    }
    pub const fn to_raw(self) -> i32 {
        self.0
    }

    /// The library's name for it (`"sm80"`), `None` if the library does not know the value.
    pub fn name(self) -> Option<&'static str> {
        // Safety: flash_algorithm_name returns NULL or a static NUL-terminated string.
        unsafe { static_str(sys::flash_algorithm_name(self.0)) }
    }

    /// The algorithm the library calls `name` (`"auto"`, `"cpu"`, `"naive"`, `"sm80"`, `"sm90"`).
    pub fn from_name(name: &str) -> Option<Self> {
        let c = CString::new(name).ok()?;
        // Safety: c is a valid NUL-terminated string for the duration of the call.
        let raw = unsafe { sys::flash_algorithm_from_name(c.as_ptr()) };
        (raw >= 0).then_some(Algorithm(raw))
    }
}

impl Default for Algorithm {
    fn default() -> Self {
        Algorithm::AUTO
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => f.write_str(n),
            None => write!(f, "algorithm({})", self.0),
        }
    }
}

impl fmt::Debug for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Algorithm({self})")
    }
}

pub(crate) fn window_to_raw(w: Option<u32>, what: &str) -> Result<i32> {
    match w {
        None => Ok(-1),
        Some(x) => i32::try_from(x)
            .map_err(|_| Error::new(sys::FLASH_ERROR_BAD_MASK, format!("{what} is {x}, larger than 2^31-1"))),
    }
}

/// Sets the option fields that flash_fwd_args and flash_bwd_args share (same names, same meaning) from a
/// [`Forward`]'s options; `a.q` must already be set (the block mask is checked against it). Used in
/// functions returning [`Result`].
macro_rules! apply_options {
    ($opts:expr, $a:expr, $stream:expr) => {{
        let opts = $opts;
        let a = $a;
        if let Some(mask) = opts.block_mask {
            mask.check_against(&a.q)?;
            a.block_mask = mask.as_ptr();
        }
        a.softmax_scale = opts.softmax_scale;
        a.causal = opts.causal as i32;
        a.causal_alignment = opts.alignment.to_raw();
        a.window_left = $crate::forward::window_to_raw(opts.window_left, "window_left")?;
        a.window_right = $crate::forward::window_to_raw(opts.window_right, "window_right")?;
        a.algorithm = opts.algorithm.to_raw();
        a.flags = if opts.deterministic { sys::FLASH_FLAG_DETERMINISTIC } else { 0 };
        a.stream = $stream.as_raw();
        a.workspace = opts.workspace;
        a.workspace_size = opts.workspace_size;
    }};
}
pub(crate) use apply_options;

/// Options of a forward call, and the calls themselves.
///
/// Tensors are `[batch, seqlen, heads, head_dim]`: Q `[b, sq, hq, d]`, K and V `[b, sk, hkv, d]` with
/// `hq % hkv == 0` (GQA/MQA), O like Q; the optional LSE is fp32 `[b, hq, sq]`. `head_dim` is a
/// multiple of 8 in [8, 256].
///
/// ```
/// use flash::{Alignment, Forward, Tensor, TensorMut};
/// let (b, sq, sk, h, d) = (1, 3, 5, 2, 8);
/// let q = vec![0.1f32; b * sq * h * d];
/// let kv = vec![0.2f32; b * sk * h * d];
/// let mut o = vec![f32::NAN; b * sq * h * d];
/// let mut lse = vec![f32::NAN; b * h * sq];
/// let used = Forward::new()
///     .causal(true)
///     .alignment(Alignment::TopLeft) // query i sees keys 0..=i
///     .run_with_lse(
///         &Tensor::new(&q, [b, sq, h, d])?,
///         &Tensor::new(&kv, [b, sk, h, d])?,
///         &Tensor::new(&kv, [b, sk, h, d])?,
///         &mut TensorMut::new(&mut o, [b, sq, h, d])?,
///         &mut TensorMut::new(&mut lse, [b, h, sq])?,
///     )?;
/// assert_eq!(used, flash::Algorithm::CPU);
/// // All values are equal, so each output is 0.2; query 0 sees one key: lse = scale * q.k = 0.16/sqrt(8).
/// assert!(o.iter().all(|x| (x - 0.2).abs() < 1e-6));
/// assert!((lse[0] - 8.0 * 0.02 / 8f32.sqrt()).abs() < 1e-6);
/// # Ok::<(), flash::Error>(())
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Forward<'m> {
    pub(crate) softmax_scale: f32,
    pub(crate) causal: bool,
    pub(crate) alignment: Alignment,
    pub(crate) window_left: Option<u32>,
    pub(crate) window_right: Option<u32>,
    pub(crate) algorithm: Algorithm,
    pub(crate) deterministic: bool,
    pub(crate) block_mask: Option<&'m BlockMask>,
    pub(crate) workspace: *mut c_void,
    pub(crate) workspace_size: usize,
}

impl Default for Forward<'_> {
    fn default() -> Self {
        Forward::new()
    }
}

impl<'m> Forward<'m> {
    /// The defaults: scale `1/sqrt(head_dim)`, no mask, bottom-right alignment, algorithm AUTO.
    pub fn new() -> Self {
        Forward {
            softmax_scale: 0.0,
            causal: false,
            alignment: Alignment::BottomRight,
            window_left: None,
            window_right: None,
            algorithm: Algorithm::AUTO,
            deterministic: false,
            block_mask: None,
            workspace: std::ptr::null_mut(),
            workspace_size: 0,
        }
    }

    /// Softmax scale; 0 (the default) means `1/sqrt(head_dim)`. Must be finite.
    pub fn scale(mut self, softmax_scale: f32) -> Self {
        self.softmax_scale = softmax_scale;
        self
    }

    /// Causal masking (the window `(left, 0)`), placed by [`Forward::alignment`].
    pub fn causal(mut self, causal: bool) -> Self {
        self.causal = causal;
        self
    }

    /// Where the causal diagonal and the window sit when `seqlen_q != seqlen_k`.
    pub fn alignment(mut self, alignment: Alignment) -> Self {
        self.alignment = alignment;
        self
    }

    /// Sliding window (FlashAttention-2's `window_size`): keys more than `left` before or `right` after
    /// the diagonal are masked; `None` is unbounded. Causal is `(None, Some(0))`.
    pub fn window(mut self, left: Option<u32>, right: Option<u32>) -> Self {
        self.window_left = left;
        self.window_right = right;
        self
    }

    /// The algorithm to run ([`Algorithm::AUTO`] by default).
    pub fn algorithm(mut self, algorithm: Algorithm) -> Self {
        self.algorithm = algorithm;
        self
    }

    /// Bitwise-reproducible results run to run (`FLASH_FLAG_DETERMINISTIC`; the forward always is, so
    /// this matters for a [`Backward`](crate::Backward) made from these options).
    pub fn deterministic(mut self, deterministic: bool) -> Self {
        self.deterministic = deterministic;
        self
    }

    /// A block-sparse mask; it must live on the device of Q.
    pub fn block_mask(mut self, mask: &'m BlockMask) -> Self {
        self.block_mask = Some(mask);
        self
    }

    /// Scratch memory for the call (device memory for CUDA tensors, host memory for CPU ones), at least
    /// what [`Forward::workspace_size_raw`] says; without it the library allocates its own.
    ///
    /// # Safety
    ///
    /// `workspace` points to `bytes` writable bytes on the device of the tensors, aligned to 256 bytes,
    /// used by nothing else until the work of every call made with these options has completed on its
    /// stream.
    pub unsafe fn workspace(mut self, workspace: *mut c_void, bytes: usize) -> Self {
        self.workspace = workspace;
        self.workspace_size = bytes;
        self
    }

    fn args(
        &self,
        q: sys::flash_tensor,
        k: sys::flash_tensor,
        v: sys::flash_tensor,
        o: sys::flash_tensor,
        lse: Option<sys::flash_tensor>,
        stream: Stream,
    ) -> Result<LibSized<sys::flash_fwd_args>> {
        let mut buf = LibSized::<sys::flash_fwd_args>::zeroed();
        // Safety: a buffer as large as the library's flash_fwd_args (see abi.rs).
        check(unsafe { sys::flash_fwd_args_init_sized(buf.as_mut_ptr(), std::mem::size_of::<sys::flash_fwd_args>() as _) })?;
        let a = buf.get_mut();
        a.q = q;
        a.k = k;
        a.v = v;
        a.o = o;
        if let Some(lse) = lse {
            a.lse = lse;
        }
        apply_options!(self, a, stream);
        Ok(buf)
    }

    fn call(&self, mut a: LibSized<sys::flash_fwd_args>) -> Result<Algorithm> {
        // Safety: every tensor in `a` is a checked host view borrowed for this call, or a RawTensor /
        // BlockMask / workspace whose unsafe constructor's caller guaranteed the memory; the struct is
        // library-sized (abi.rs).
        check(unsafe { sys::flash_fwd(a.as_mut_ptr()) })?;
        Ok(Algorithm(a.get().algorithm_used))
    }

    /// Runs on host tensors; returns the algorithm that ran.
    pub fn run<T: Element>(
        &self,
        q: &Tensor<'_, T>,
        k: &Tensor<'_, T>,
        v: &Tensor<'_, T>,
        o: &mut TensorMut<'_, T>,
    ) -> Result<Algorithm> {
        let a = self.args(q.raw(), k.raw(), v.raw(), o.raw(), None, Stream::legacy_default())?;
        self.call(a)
    }

    /// Runs on host tensors and also writes the log-sum-exp of each query row (natural log of the scaled,
    /// masked scores; `-inf` for a row that sees no key) into `lse` `[batch, heads_q, seqlen_q]`.
    pub fn run_with_lse<T: Element>(
        &self,
        q: &Tensor<'_, T>,
        k: &Tensor<'_, T>,
        v: &Tensor<'_, T>,
        o: &mut TensorMut<'_, T>,
        lse: &mut TensorMut<'_, f32, 3>,
    ) -> Result<Algorithm> {
        let a = self.args(q.raw(), k.raw(), v.raw(), o.raw(), Some(lse.raw()), Stream::legacy_default())?;
        self.call(a)
    }

    /// Runs on raw tensors: CUDA tensors (fp16/bf16), asynchronously on `stream`, or host tensors the
    /// borrow checker cannot see. The call returns once the work is enqueued.
    pub fn run_raw(
        &self,
        q: &RawTensor,
        k: &RawTensor,
        v: &RawTensor,
        o: &RawTensor,
        lse: Option<&RawTensor>,
        stream: Stream,
    ) -> Result<Algorithm> {
        let a = self.args(*q.as_raw(), *k.as_raw(), *v.as_raw(), *o.as_raw(), lse.map(|t| *t.as_raw()), stream)?;
        self.call(a)
    }

    /// Bytes of workspace a call on these host tensors would use (0 when none is needed).
    pub fn workspace_size<T: Element>(
        &self,
        q: &Tensor<'_, T>,
        k: &Tensor<'_, T>,
        v: &Tensor<'_, T>,
        o: &mut TensorMut<'_, T>,
    ) -> Result<usize> {
        let a = self.args(q.raw(), k.raw(), v.raw(), o.raw(), None, Stream::legacy_default())?;
        workspace_size(&a)
    }

    /// Bytes of workspace a call on these raw tensors would use (0 when none is needed).
    pub fn workspace_size_raw(
        &self,
        q: &RawTensor,
        k: &RawTensor,
        v: &RawTensor,
        o: &RawTensor,
        lse: Option<&RawTensor>,
    ) -> Result<usize> {
        let a = self.args(
            *q.as_raw(),
            *k.as_raw(),
            *v.as_raw(),
            *o.as_raw(),
            lse.map(|t| *t.as_raw()),
            Stream::legacy_default(),
        )?;
        workspace_size(&a)
    }
}

fn workspace_size(a: &LibSized<sys::flash_fwd_args>) -> Result<usize> {
    let mut bytes = 0usize;
    // Safety: valid, library-sized pointers; the query reads the descriptors only, never tensor data.
    check(unsafe { sys::flash_fwd_workspace_size(a.as_ptr(), &mut bytes) })?;
    Ok(bytes)
}

/// `O = softmax(Q K^T / sqrt(head_dim)) V` on host tensors with default options; returns the
/// algorithm that ran. See [`Forward`] for masks and the other options.
///
/// ```
/// let (b, s, h, d) = (2, 4, 1, 16);
/// let q = vec![0.25f32; b * s * h * d];
/// let mut o = vec![0.0f32; b * s * h * d];
/// let t = flash::Tensor::new(&q, [b, s, h, d])?;
/// flash::forward(&t, &t, &t, &mut flash::TensorMut::new(&mut o, [b, s, h, d])?)?;
/// assert!(o.iter().all(|&x| (x - 0.25).abs() < 1e-6));
/// # Ok::<(), flash::Error>(())
/// ```
pub fn forward<T: Element>(
    q: &Tensor<'_, T>,
    k: &Tensor<'_, T>,
    v: &Tensor<'_, T>,
    o: &mut TensorMut<'_, T>,
) -> Result<Algorithm> {
    Forward::new().run(q, k, v, o)
}
