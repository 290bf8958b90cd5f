//! The forward pass, `O = softmax(scale * Q K^T + mask) V`, and its options.

use std::ffi::CString;
use std::fmt;
use std::marker::PhantomData;
use std::os::raw::c_void;

use flash_sys as sys;

use crate::abi::LibSized;
use crate::error::{check, static_str, Error, Result};
use crate::mask::BlockMask;
use crate::tensor::{Device, Element, RawTensor, Stream, Tensor, TensorMut};

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

/// The sequences of a packed variable-length batch (flash.h 1.3, "Packed variable-length batches";
/// FlashAttention's `flash_attn_varlen_func` layout): sequences of different lengths packed end to end, without
/// padding, Q and O `[total_q, heads_q, head_dim]`, K and V `[total_k, heads_kv, head_dim]`, the LSE fp32
/// `[heads_q, total_q]`.
///
/// Sequence `i` owns query rows `cu_seqlens_q[i] .. cu_seqlens_q[i+1]` and the key slot
/// `cu_seqlens_k[i] .. cu_seqlens_k[i+1]`, of which it uses the first `seqused_k[i]` keys when
/// [`Varlen::seqused_k`] is given (a key buffer with room to grow). Each sequence is its own attention problem:
/// causal (both alignments) and windows follow its own lengths, exactly as a dense call of batch 1 on it; zero-length
/// sequences are allowed (no keys: O = 0, LSE = -inf, dQ = 0). Rows past the last offsets are neither read nor
/// written (the backward writes dK = dV = 0 for a slot's keys past `seqused_k`). The arrays live on the device of Q;
/// host slices are checked here for their lengths, and by the library element by element (offsets start at 0, do not
/// decrease, end inside the tensors; `seqused_k` within its slot; the maximum lengths at least the longest) before
/// anything is written. Not with a [`BlockMask`].
///
/// ```
/// use flash::{Forward, Tensor, TensorMut, Varlen};
/// let (h, d) = (2, 8);
/// let (cu_q, cu_k) = ([0, 3, 3, 4], [0, 5, 7, 9]); // 3 sequences: 3, 0 and 1 queries; 5, 2 and 2 keys
/// let seqlens = Varlen::new(&cu_q, &cu_k)?;
/// assert_eq!((seqlens.batch(), seqlens.max_seqlen_q(), seqlens.max_seqlen_k()), (3, 3, 5));
/// let q = vec![0.1f32; 4 * h * d];
/// let kv = vec![0.2f32; 9 * h * d];
/// let (mut o, mut lse) = (vec![f32::NAN; 4 * h * d], vec![f32::NAN; h * 4]);
/// Forward::new().causal(true).run_varlen(
///     &Tensor::new(&q, [4, h, d])?,
///     &Tensor::new(&kv, [9, h, d])?,
///     &Tensor::new(&kv, [9, h, d])?,
///     &seqlens,
///     &mut TensorMut::new(&mut o, [4, h, d])?,
///     Some(&mut TensorMut::new(&mut lse, [h, 4])?),
/// )?;
/// assert!(o.iter().all(|x| (x - 0.2).abs() < 1e-6));
/// # Ok::<(), flash::Error>(())
/// ```
#[derive(Clone, Copy)]
pub struct Varlen<'a> {
    pub(crate) device: Device,
    pub(crate) batch: usize,
    pub(crate) cu_seqlens_q: *const i32,
    pub(crate) cu_seqlens_k: *const i32,
    pub(crate) seqused_k: *const i32,
    pub(crate) max_seqlen_q: i32,
    pub(crate) max_seqlen_k: i32,
    max_given: bool,
    _borrow: PhantomData<&'a [i32]>,
}

// Safety: the pointers are borrowed host slices (lifetime 'a) or memory whose validity the unsafe constructor's
// caller guaranteed for every call; nothing is ever written through them.
unsafe impl Send for Varlen<'_> {}
unsafe impl Sync for Varlen<'_> {}

impl fmt::Debug for Varlen<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Varlen")
            .field("device", &self.device)
            .field("batch", &self.batch)
            .field("max_seqlen_q", &self.max_seqlen_q)
            .field("max_seqlen_k", &self.max_seqlen_k)
            .field("seqused_k", &!self.seqused_k.is_null())
            .finish()
    }
}

fn varlen_error(status: i32, msg: String) -> Error {
    Error::new(status, msg)
}

/// The longest sequence the offsets describe, kept inside [0, 2^31-1] (offsets that decrease are the library's to
/// name: this is only the bound handed to it).
fn longest(cu: &[i32]) -> i32 {
    let m = cu.windows(2).map(|w| w[1] as i64 - w[0] as i64).max().unwrap_or(0);
    m.clamp(0, i32::MAX as i64) as i32
}

fn length_to_i32(x: usize, what: &str) -> Result<i32> {
    i32::try_from(x)
        .map_err(|_| varlen_error(sys::FLASH_ERROR_INVALID_ARGUMENT, format!("{what} is {x}, larger than 2^31-1")))
}

impl<'a> Varlen<'a> {
    /// Host offsets: `cu_seqlens_q` and `cu_seqlens_k` hold `batch + 1` entries each. `max_seqlen_q` and
    /// `max_seqlen_k` are the longest sequences they describe (see [`Varlen::max_seqlen`]).
    pub fn new(cu_seqlens_q: &'a [i32], cu_seqlens_k: &'a [i32]) -> Result<Self> {
        if cu_seqlens_q.len() < 2 {
            return Err(varlen_error(
                sys::FLASH_ERROR_BAD_SHAPE,
                format!("cu_seqlens_q has {} entries but must hold batch + 1 >= 2 offsets", cu_seqlens_q.len()),
            ));
        }
        if cu_seqlens_k.len() != cu_seqlens_q.len() {
            return Err(varlen_error(
                sys::FLASH_ERROR_BAD_SHAPE,
                format!(
                    "cu_seqlens_k has {} entries but cu_seqlens_q has {} (each holds batch + 1 offsets)",
                    cu_seqlens_k.len(),
                    cu_seqlens_q.len()
                ),
            ));
        }
        let batch = cu_seqlens_q.len() - 1;
        length_to_i32(batch, "the batch (cu_seqlens_q.len() - 1)")?;
        Ok(Varlen {
            device: Device::Cpu,
            batch,
            cu_seqlens_q: cu_seqlens_q.as_ptr(),
            cu_seqlens_k: cu_seqlens_k.as_ptr(),
            seqused_k: std::ptr::null(),
            max_seqlen_q: longest(cu_seqlens_q),
            max_seqlen_k: longest(cu_seqlens_k),
            max_given: false,
            _borrow: PhantomData,
        })
    }

    /// Host `seqused_k` (`batch` entries): sequence `i` uses the first `seqused_k[i]` keys of its slot. Unless
    /// [`Varlen::max_seqlen`] set it, `max_seqlen_k` becomes the largest entry.
    pub fn seqused_k(mut self, seqused_k: &'a [i32]) -> Result<Self> {
        if self.device != Device::Cpu {
            return Err(varlen_error(
                sys::FLASH_ERROR_DEVICE_MISMATCH,
                "seqused_k is a host slice but the offsets are on the device; use Varlen::from_raw_parts".into(),
            ));
        }
        if seqused_k.len() != self.batch {
            return Err(varlen_error(
                sys::FLASH_ERROR_BAD_SHAPE,
                format!(
                    "seqused_k has {} entries but must have one per sequence, {} (cu_seqlens_q.len() - 1)",
                    seqused_k.len(),
                    self.batch
                ),
            ));
        }
        self.seqused_k = seqused_k.as_ptr();
        if !self.max_given {
            self.max_seqlen_k = seqused_k.iter().copied().max().unwrap_or(0).max(0);
        }
        Ok(self)
    }

    /// Bounds on the longest sequence's queries and keys (they size the GPU grids; a larger bound is allowed, and
    /// costs scratch memory in the naive algorithm). Each at most 2^31-1.
    pub fn max_seqlen(mut self, max_seqlen_q: usize, max_seqlen_k: usize) -> Result<Self> {
        self.max_seqlen_q = length_to_i32(max_seqlen_q, "max_seqlen_q")?;
        self.max_seqlen_k = length_to_i32(max_seqlen_k, "max_seqlen_k")?;
        self.max_given = true;
        Ok(self)
    }

    /// Offsets given by raw pointers: device memory for CUDA tensors (the arrays live on the device of Q), or host
    /// memory the borrow checker cannot see. `seqused_k` may be null. Their contents cannot be read here, so the
    /// maximum lengths are given (a GPU call's grids are sized by them; the library never reads or writes outside
    /// the tensors, whatever the arrays hold).
    ///
    /// # Safety
    ///
    /// For every call this value is used in: `cu_seqlens_q` and `cu_seqlens_k` point to `batch + 1` int32 values
    /// on `device`, `seqused_k` (when not null) to `batch`; all 4-byte aligned, allocated and not written until
    /// the call's work has completed on its stream.
    pub unsafe fn from_raw_parts(
        device: Device,
        batch: usize,
        cu_seqlens_q: *const i32,
        cu_seqlens_k: *const i32,
        seqused_k: *const i32,
        max_seqlen_q: usize,
        max_seqlen_k: usize,
    ) -> Result<Self> {
        if batch == 0 {
            return Err(varlen_error(
                sys::FLASH_ERROR_INVALID_ARGUMENT,
                "the batch is 0 but a packed variable-length batch has at least one sequence".into(),
            ));
        }
        length_to_i32(batch, "the batch")?;
        Ok(Varlen {
            device,
            batch,
            cu_seqlens_q,
            cu_seqlens_k,
            seqused_k,
            max_seqlen_q: length_to_i32(max_seqlen_q, "max_seqlen_q")?,
            max_seqlen_k: length_to_i32(max_seqlen_k, "max_seqlen_k")?,
            max_given: true,
            _borrow: PhantomData,
        })
    }

    /// The number of sequences.
    pub fn batch(&self) -> usize {
        self.batch
    }
    /// The bound on each sequence's queries handed to the library.
    pub fn max_seqlen_q(&self) -> usize {
        self.max_seqlen_q as usize
    }
    /// The bound on each sequence's keys handed to the library.
    pub fn max_seqlen_k(&self) -> usize {
        self.max_seqlen_k as usize
    }
    /// Where the arrays live.
    pub fn device(&self) -> Device {
        self.device
    }
}

/// Sets the varlen fields of flash_fwd_args / flash_bwd_args from an `Option<&Varlen>` (after `a.q` is set), checking
/// what the library cannot: the arrays live where Q does. Used in functions returning [`Result`].
macro_rules! apply_varlen {
    ($varlen:expr, $opts:expr, $a:expr) => {{
        if let Some(vl) = $varlen {
            let vl: &$crate::forward::Varlen<'_> = vl;
            let a = &mut *$a;
            if $opts.block_mask.is_some() {
                return Err($crate::error::Error::new(
                    sys::FLASH_ERROR_UNSUPPORTED,
                    "block_mask is set with cu_seqlens_q: block-sparse masks are not supported with packed \
                     variable-length batches (flash.h)"
                        .to_string(),
                ));
            }
            vl.apply(a.q.device_type, a.q.device_id)?;
            a.cu_seqlens_q = vl.cu_seqlens_q;
            a.cu_seqlens_k = vl.cu_seqlens_k;
            a.seqused_k = vl.seqused_k;
            a.max_seqlen_q = vl.max_seqlen_q;
            a.max_seqlen_k = vl.max_seqlen_k;
            a.varlen_batch = vl.batch as i32;
        }
    }};
}
pub(crate) use apply_varlen;

impl Varlen<'_> {
    pub(crate) fn apply(&self, q_device_type: i32, q_device_id: i32) -> Result<()> {
        let q_device = Device::from_raw(q_device_type, q_device_id);
        if q_device != Some(self.device) {
            return Err(varlen_error(
                sys::FLASH_ERROR_DEVICE_MISMATCH,
                format!("the varlen offsets are on {:?} but q is on {:?}", self.device, q_device),
            ));
        }
        Ok(())
    }
}

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

    #[allow(clippy::too_many_arguments)]
    fn args(
        &self,
        q: sys::flash_tensor,
        k: sys::flash_tensor,
        v: sys::flash_tensor,
        o: sys::flash_tensor,
        lse: Option<sys::flash_tensor>,
        varlen: Option<&Varlen<'_>>,
        stream: Stream,
    ) -> Result<LibSized<sys::flash_fwd_args>> {
        let mut buf = LibSized::<sys::flash_fwd_args>::zeroed();
        // Safety: a buffer as large as the library's flash_fwd_args (see abi.rs).
        check(unsafe {
            sys::flash_fwd_args_init_sized(buf.as_mut_ptr(), std::mem::size_of::<sys::flash_fwd_args>() as _)
        })?;
        let a = buf.get_mut();
        a.q = q;
        a.k = k;
        a.v = v;
        a.o = o;
        if let Some(lse) = lse {
            a.lse = lse;
        }
        apply_varlen!(varlen, self, a);
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
        let a = self.args(q.raw(), k.raw(), v.raw(), o.raw(), None, None, Stream::legacy_default())?;
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
        let a = self.args(q.raw(), k.raw(), v.raw(), o.raw(), Some(lse.raw()), None, Stream::legacy_default())?;
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
        let a =
            self.args(*q.as_raw(), *k.as_raw(), *v.as_raw(), *o.as_raw(), lse.map(|t| *t.as_raw()), None, stream)?;
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
        let a = self.args(q.raw(), k.raw(), v.raw(), o.raw(), None, None, Stream::legacy_default())?;
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
            None,
            Stream::legacy_default(),
        )?;
        workspace_size(&a)
    }

    /// Runs on a packed variable-length batch of host tensors (see [`Varlen`]): Q, O `[total_q, heads_q, head_dim]`,
    /// K, V `[total_k, heads_kv, head_dim]`, and optionally the LSE fp32 `[heads_q, total_q]`. Rows of O and the LSE
    /// outside every sequence are not written. Returns the algorithm that ran.
    pub fn run_varlen<T: Element>(
        &self,
        q: &Tensor<'_, T, 3>,
        k: &Tensor<'_, T, 3>,
        v: &Tensor<'_, T, 3>,
        seqlens: &Varlen<'_>,
        o: &mut TensorMut<'_, T, 3>,
        lse: Option<&mut TensorMut<'_, f32, 2>>,
    ) -> Result<Algorithm> {
        let lse = lse.map(|l| l.raw());
        let a = self.args(q.raw(), k.raw(), v.raw(), o.raw(), lse, Some(seqlens), Stream::legacy_default())?;
        self.call(a)
    }

    /// [`Forward::run_varlen`] on raw tensors (`[total, heads, head_dim]`; the LSE `[heads_q, total_q]`) and a
    /// [`Varlen`] on their device: CUDA tensors asynchronously on `stream`, or host tensors the borrow checker
    /// cannot see.
    pub fn run_varlen_raw(
        &self,
        q: &RawTensor,
        k: &RawTensor,
        v: &RawTensor,
        seqlens: &Varlen<'_>,
        o: &RawTensor,
        lse: Option<&RawTensor>,
        stream: Stream,
    ) -> Result<Algorithm> {
        let a = self.args(
            *q.as_raw(),
            *k.as_raw(),
            *v.as_raw(),
            *o.as_raw(),
            lse.map(|t| *t.as_raw()),
            Some(seqlens),
            stream,
        )?;
        self.call(a)
    }

    /// Bytes of workspace [`Forward::run_varlen_raw`] would use (0 when none is needed).
    pub fn workspace_size_varlen_raw(
        &self,
        q: &RawTensor,
        k: &RawTensor,
        v: &RawTensor,
        seqlens: &Varlen<'_>,
        o: &RawTensor,
        lse: Option<&RawTensor>,
    ) -> Result<usize> {
        let a = self.args(
            *q.as_raw(),
            *k.as_raw(),
            *v.as_raw(),
            *o.as_raw(),
            lse.map(|t| *t.as_raw()),
            Some(seqlens),
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
