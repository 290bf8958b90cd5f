//! Attention over a key/value cache (`flash_fwd_kvcache`: inference decode and chunked prefill, with the new
//! tokens' keys and values appended to the cache in place), and the merge of partial attention results
//! (`flash_combine`). Since libflash 1.2.

use std::fmt;
use std::marker::PhantomData;
use std::os::raw::c_void;

use flash_sys as sys;

use crate::abi::LibSized;
use crate::error::{check, Error, Result};
use crate::forward::{window_to_raw, Algorithm};
use crate::tensor::{Device, Element, RawTensor, Stream, Tensor, TensorMut};

fn bad_shape(msg: String) -> Error {
    Error::new(sys::FLASH_ERROR_BAD_SHAPE, msg)
}

/// Where each sequence's keys live in the cache and how many it holds: the index arrays of a KV-cache call
/// (`cache_seqlens`, and `cache_batch_idx` or `block_table`). They live on the device of Q.
///
/// - [`CacheIndex::contiguous`]: the cache is `[batch_cache, max_len, heads_kv, head_dim]` and sequence `i`
///   lives in cache row `i` (then `batch_cache >= batch`);
/// - [`CacheIndex::with_batch_idx`]: sequence `i` lives in cache row `cache_batch_idx[i]`;
/// - [`CacheIndex::paged`]: the cache is `[num_pages, page_size, heads_kv, head_dim]` and key position `t` of
///   sequence `i` is row `t % page_size` of page `block_table[i * max_pages_per_seq + t / page_size]`.
///
/// `cache_seqlens[i]` is the number of keys in sequence `i`'s cache before the call. Host slices are checked
/// against the batch (`q.shape[0]`) when used; the library checks every value (positions inside the cache,
/// pages and rows in range, no two sequences appending to one slot) before anything is written.
///
/// ```
/// use flash::CacheIndex;
/// let seqlens = [5, 0, 17];
/// let table = [3, 1, 0, 2, 4, 5]; // 3 sequences x 2 pages
/// let index = CacheIndex::paged(&seqlens, &table, 2)?;
/// assert_eq!(index.batch(), Some(3));
/// assert!(CacheIndex::paged(&seqlens, &table[..5], 2).is_err()); // 5 entries for 3 x 2
/// # Ok::<(), flash::Error>(())
/// ```
#[derive(Clone, Copy)]
pub struct CacheIndex<'a> {
    device: Device,
    /// Entries of each host array: cache_seqlens (and cache_batch_idx); None for raw pointers.
    batch: Option<usize>,
    cache_seqlens: *const i32,
    cache_batch_idx: *const i32,
    block_table: *const i32,
    block_table_stride: i64,
    max_pages_per_seq: i32,
    _borrow: PhantomData<&'a [i32]>,
}

// Safety: the pointers are borrowed host slices (lifetime 'a) or memory whose validity the unsafe constructor's
// caller guaranteed for every call; nothing is ever written through them.
unsafe impl Send for CacheIndex<'_> {}
unsafe impl Sync for CacheIndex<'_> {}

impl fmt::Debug for CacheIndex<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CacheIndex")
            .field("device", &self.device)
            .field("batch", &self.batch)
            .field("cache_batch_idx", &!self.cache_batch_idx.is_null())
            .field("paged", &!self.block_table.is_null())
            .field("max_pages_per_seq", &self.max_pages_per_seq)
            .finish()
    }
}

impl<'a> CacheIndex<'a> {
    /// A contiguous cache whose row `i` holds sequence `i`, with `cache_seqlens[i]` keys in it.
    pub fn contiguous(cache_seqlens: &'a [i32]) -> Self {
        CacheIndex {
            device: Device::Cpu,
            batch: Some(cache_seqlens.len()),
            cache_seqlens: cache_seqlens.as_ptr(),
            cache_batch_idx: std::ptr::null(),
            block_table: std::ptr::null(),
            block_table_stride: 0,
            max_pages_per_seq: 0,
            _borrow: PhantomData,
        }
    }

    /// A contiguous cache whose row `cache_batch_idx[i]` holds sequence `i`; both slices have one entry per
    /// sequence.
    pub fn with_batch_idx(cache_seqlens: &'a [i32], cache_batch_idx: &'a [i32]) -> Result<Self> {
        if cache_batch_idx.len() != cache_seqlens.len() {
            return Err(bad_shape(format!(
                "cache_batch_idx has {} entries but cache_seqlens has {}",
                cache_batch_idx.len(),
                cache_seqlens.len()
            )));
        }
        Ok(CacheIndex { cache_batch_idx: cache_batch_idx.as_ptr(), ..Self::contiguous(cache_seqlens) })
    }

    /// A paged cache: `block_table` is `[batch, max_pages_per_seq]` row-major, its entries past the pages a
    /// sequence uses never read.
    pub fn paged(cache_seqlens: &'a [i32], block_table: &'a [i32], max_pages_per_seq: usize) -> Result<Self> {
        let max_pages = i32::try_from(max_pages_per_seq)
            .ok()
            .filter(|&m| m >= 1)
            .ok_or_else(|| bad_shape(format!("max_pages_per_seq is {max_pages_per_seq} but must be in [1, 2^31-1]")))?;
        if cache_seqlens.len().checked_mul(max_pages_per_seq) != Some(block_table.len()) {
            return Err(bad_shape(format!(
                "block_table has {} entries but {} sequences x max_pages_per_seq {max_pages_per_seq} needs {}",
                block_table.len(),
                cache_seqlens.len(),
                cache_seqlens.len().saturating_mul(max_pages_per_seq)
            )));
        }
        Ok(CacheIndex {
            block_table: block_table.as_ptr(),
            block_table_stride: max_pages as i64,
            max_pages_per_seq: max_pages,
            ..Self::contiguous(cache_seqlens)
        })
    }

    /// Index arrays given by raw pointers: device memory for CUDA tensors (the arrays live on the device of
    /// Q), or host memory the borrow checker cannot see. `cache_batch_idx` and `block_table` may be null (at
    /// most one of them set); `block_table_stride` is the distance in elements between rows of `block_table`
    /// (0: `max_pages_per_seq`).
    ///
    /// # Safety
    ///
    /// For every call the index is used in: `cache_seqlens` (and `cache_batch_idx` when not null) point to
    /// `batch` (`q.shape[0]`) int32 values on `device`; `block_table`, when not null, to `batch` rows of
    /// `max_pages_per_seq` int32 values `block_table_stride` apart; all 4-byte aligned, allocated and not
    /// written until the call's work has completed on its stream.
    pub unsafe fn from_raw_parts(
        device: Device,
        cache_seqlens: *const i32,
        cache_batch_idx: *const i32,
        block_table: *const i32,
        block_table_stride: i64,
        max_pages_per_seq: i32,
    ) -> Self {
        CacheIndex {
            device,
            batch: None,
            cache_seqlens,
            cache_batch_idx,
            block_table,
            block_table_stride,
            max_pages_per_seq,
            _borrow: PhantomData,
        }
    }

    /// The number of sequences of a host index (`None` for one made from raw pointers).
    pub fn batch(&self) -> Option<usize> {
        self.batch
    }

    /// Where the arrays live.
    pub fn device(&self) -> Device {
        self.device
    }

    /// Checks what the library cannot: the arrays live where Q does, and host arrays have Q's batch.
    fn apply(&self, a: &mut sys::flash_kvcache_args) -> Result<()> {
        let q = &a.q;
        let q_device = Device::from_raw(q.device_type, q.device_id);
        if q_device != Some(self.device) {
            return Err(Error::new(
                sys::FLASH_ERROR_DEVICE_MISMATCH,
                format!("the cache index arrays are on {:?} but q is on {:?}", self.device, q_device),
            ));
        }
        if let Some(batch) = self.batch {
            if q.ndim >= 1 && batch as i64 != q.shape[0] {
                return Err(bad_shape(format!(
                    "cache_seqlens has {batch} entries but q.shape[0] (batch) is {}",
                    q.shape[0]
                )));
            }
        }
        a.cache_seqlens = self.cache_seqlens;
        a.cache_batch_idx = self.cache_batch_idx;
        a.block_table = self.block_table;
        a.block_table_stride = self.block_table_stride;
        a.max_pages_per_seq = self.max_pages_per_seq;
        Ok(())
    }
}

/// What a KV-cache call did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvcacheRun {
    /// The algorithm that ran.
    pub algorithm: Algorithm,
    /// The splits of each sequence's keys it used (the chosen number when [`KvcacheForward::num_splits`] is 0).
    pub num_splits: u32,
}

/// Options of a KV-cache attention call (`flash_fwd_kvcache`, FlashAttention-2's `flash_attn_with_kvcache`),
/// and the calls themselves.
///
/// Q is `[batch, seqlen_new, heads_q, head_dim]`, the caches as [`CacheIndex`] describes (`heads_q` a multiple
/// of `heads_kv`), O like Q, the optional LSE fp32 `[batch, heads_q, seqlen_new]` (natural log). With
/// [`KvcacheForward::run_append`], K_new and V_new `[batch, seqlen_new, heads_kv, head_dim]` are first written
/// into the caches at positions `cache_seqlens[i] .. cache_seqlens[i] + seqlen_new - 1` (nothing else in the
/// caches is written; `cache_seqlens` is not updated). The queries of sequence `i` then attend to its first
/// `L_i = cache_seqlens[i]` (`+ seqlen_new` when appending) keys. Causal masking and the window are
/// bottom-right aligned per sequence: query row `r` sits at key position `L_i - seqlen_new + r`. A row that
/// sees no key gets O = 0 and LSE = -inf.
///
/// Devices: the cpu algorithm (fp32, fp16, bf16); CUDA tensors are validated and then refused with
/// `ALGORITHM_UNAVAILABLE` until libflash's GPU kernels for this call are built.
///
/// ```
/// use flash::{CacheIndex, KvcacheForward, Tensor, TensorMut};
/// // One sequence, 2 heads of 8; a cache of 6 positions holding 3 keys; one new token appended.
/// let (h, d, max_len) = (2, 8, 6);
/// let mut k_cache = vec![0.5f32; max_len * h * d];
/// let mut v_cache = vec![1.0f32; max_len * h * d];
/// let (q, k_new, v_new) = (vec![0.1f32; h * d], vec![0.5f32; h * d], vec![3.0f32; h * d]);
/// let mut o = vec![f32::NAN; h * d];
/// let seqlens = [3];
/// let run = KvcacheForward::new().causal(true).run_append(
///     &Tensor::new(&q, [1, 1, h, d])?,
///     &mut TensorMut::new(&mut k_cache, [1, max_len, h, d])?,
///     &mut TensorMut::new(&mut v_cache, [1, max_len, h, d])?,
///     &Tensor::new(&k_new, [1, 1, h, d])?,
///     &Tensor::new(&v_new, [1, 1, h, d])?,
///     &CacheIndex::contiguous(&seqlens),
///     &mut TensorMut::new(&mut o, [1, 1, h, d])?,
///     None,
/// )?;
/// assert_eq!(run.algorithm, flash::Algorithm::CPU);
/// assert_eq!(v_cache[3 * h * d], 3.0); // position 3 now holds the new token
/// // Four keys with equal scores: O averages V = (1 + 1 + 1 + 3) / 4.
/// assert!(o.iter().all(|x| (x - 1.5).abs() < 1e-6));
/// # Ok::<(), flash::Error>(())
/// ```
#[derive(Clone, Copy, Debug)]
pub struct KvcacheForward {
    softmax_scale: f32,
    causal: bool,
    window_left: Option<u32>,
    window_right: Option<u32>,
    num_splits: u32,
    algorithm: Algorithm,
    workspace: *mut c_void,
    workspace_size: usize,
}

// Safety: the workspace pointer is only an address; its unsafe setter's caller guaranteed the memory.
unsafe impl Send for KvcacheForward {}
unsafe impl Sync for KvcacheForward {}

impl Default for KvcacheForward {
    fn default() -> Self {
        KvcacheForward::new()
    }
}

impl KvcacheForward {
    /// The defaults: scale `1/sqrt(head_dim)`, no mask, the library's choice of splits, algorithm AUTO, the
    /// library allocating any scratch memory.
    pub fn new() -> Self {
        KvcacheForward {
            softmax_scale: 0.0,
            causal: false,
            window_left: None,
            window_right: None,
            num_splits: 0,
            algorithm: Algorithm::AUTO,
            workspace: std::ptr::null_mut(),
            workspace_size: 0,
        }
    }

    /// Softmax scale; 0 (the default) means `1/sqrt(head_dim)`. Must be finite.
    pub fn scale(mut self, softmax_scale: f32) -> Self {
        self.softmax_scale = softmax_scale;
        self
    }

    /// Causal masking, bottom-right aligned per sequence (the window `(left, 0)`).
    pub fn causal(mut self, causal: bool) -> Self {
        self.causal = causal;
        self
    }

    /// Sliding window: keys more than `left` before or `right` after a query's position are masked; `None`
    /// is unbounded.
    pub fn window(mut self, left: Option<u32>, right: Option<u32>) -> Self {
        self.window_left = left;
        self.window_right = right;
        self
    }

    /// Split each sequence's keys into this many chunks, computed apart and merged with [`combine`]'s
    /// arithmetic (split-KV, for long caches and small batches); 0 (the default) lets the library choose,
    /// 1 is no split, at most 256.
    pub fn num_splits(mut self, num_splits: u32) -> Self {
        self.num_splits = num_splits;
        self
    }

    /// [`Algorithm::AUTO`] (the default) or [`Algorithm::CPU`]; others are refused.
    pub fn algorithm(mut self, algorithm: Algorithm) -> Self {
        self.algorithm = algorithm;
        self
    }

    /// Scratch memory for the call on the device of Q, at least what [`KvcacheForward::workspace_size_raw`]
    /// says; without it the library allocates its own.
    ///
    /// # Safety
    ///
    /// `workspace` points to `bytes` writable bytes on the device of the tensors, 8-byte aligned, used by
    /// nothing else until the work of every call made with these options has completed on its stream.
    pub unsafe fn workspace(mut self, workspace: *mut c_void, bytes: usize) -> Self {
        self.workspace = workspace;
        self.workspace_size = bytes;
        self
    }

    #[allow(clippy::too_many_arguments)]
    fn args(
        &self,
        q: sys::flash_tensor,
        k_cache: sys::flash_tensor,
        v_cache: sys::flash_tensor,
        new_kv: Option<(sys::flash_tensor, sys::flash_tensor)>,
        index: &CacheIndex<'_>,
        o: sys::flash_tensor,
        lse: Option<sys::flash_tensor>,
        stream: Stream,
    ) -> Result<LibSized<sys::flash_kvcache_args>> {
        let mut buf = LibSized::<sys::flash_kvcache_args>::zeroed();
        // Safety: a buffer as large as the library's flash_kvcache_args (see abi.rs); our size is passed.
        check(unsafe {
            sys::flash_kvcache_args_init_sized(buf.as_mut_ptr(), std::mem::size_of::<sys::flash_kvcache_args>() as _)
        })?;
        let a = buf.get_mut();
        a.q = q;
        a.k_cache = k_cache;
        a.v_cache = v_cache;
        if let Some((k_new, v_new)) = new_kv {
            a.k_new = k_new;
            a.v_new = v_new;
        }
        a.o = o;
        if let Some(lse) = lse {
            a.lse = lse;
        }
        index.apply(a)?;
        a.softmax_scale = self.softmax_scale;
        a.causal = self.causal as i32;
        a.window_left = window_to_raw(self.window_left, "window_left")?;
        a.window_right = window_to_raw(self.window_right, "window_right")?;
        a.num_splits = i32::try_from(self.num_splits).map_err(|_| {
            Error::new(
                sys::FLASH_ERROR_INVALID_ARGUMENT,
                format!("num_splits is {}, larger than 2^31-1", self.num_splits),
            )
        })?;
        a.algorithm = self.algorithm.to_raw();
        a.stream = stream.as_raw();
        a.workspace = self.workspace;
        a.workspace_size = self.workspace_size;
        Ok(buf)
    }

    fn call(&self, mut a: LibSized<sys::flash_kvcache_args>) -> Result<KvcacheRun> {
        // Safety: every tensor and index array in `a` is a checked host view borrowed for this call (index
        // slices checked against the batch), or a RawTensor / raw CacheIndex / workspace whose unsafe
        // constructor's caller guaranteed the memory; the struct is library-sized (abi.rs).
        check(unsafe { sys::flash_fwd_kvcache(a.as_mut_ptr()) })?;
        let a = a.get();
        Ok(KvcacheRun { algorithm: Algorithm::from_raw(a.algorithm_used), num_splits: a.num_splits_used.max(0) as u32 })
    }

    /// Attention over the cache as it is (nothing is appended or written but O and the LSE); host tensors.
    #[allow(clippy::too_many_arguments)]
    pub fn run<T: Element>(
        &self,
        q: &Tensor<'_, T>,
        k_cache: &Tensor<'_, T>,
        v_cache: &Tensor<'_, T>,
        index: &CacheIndex<'_>,
        o: &mut TensorMut<'_, T>,
        lse: Option<&mut TensorMut<'_, f32, 3>>,
    ) -> Result<KvcacheRun> {
        let lse = lse.map(|l| l.raw());
        let a =
            self.args(q.raw(), k_cache.raw(), v_cache.raw(), None, index, o.raw(), lse, Stream::legacy_default())?;
        self.call(a)
    }

    /// Appends `k_new`, `v_new` to the caches in place, then attends over them; host tensors. A call refused
    /// with an error writes nothing.
    #[allow(clippy::too_many_arguments)]
    pub fn run_append<T: Element>(
        &self,
        q: &Tensor<'_, T>,
        k_cache: &mut TensorMut<'_, T>,
        v_cache: &mut TensorMut<'_, T>,
        k_new: &Tensor<'_, T>,
        v_new: &Tensor<'_, T>,
        index: &CacheIndex<'_>,
        o: &mut TensorMut<'_, T>,
        lse: Option<&mut TensorMut<'_, f32, 3>>,
    ) -> Result<KvcacheRun> {
        let lse = lse.map(|l| l.raw());
        let new_kv = Some((k_new.raw(), v_new.raw()));
        let a =
            self.args(q.raw(), k_cache.raw(), v_cache.raw(), new_kv, index, o.raw(), lse, Stream::legacy_default())?;
        self.call(a)
    }

    /// Runs on raw tensors: CUDA tensors (fp16/bf16, index arrays on the device), asynchronously on `stream`,
    /// or host tensors the borrow checker cannot see. `new_kv` = `Some((k_new, v_new))` appends them to the
    /// caches first (the caches are then written: the contract of their [`RawTensor`] constructor covers it).
    #[allow(clippy::too_many_arguments)]
    pub fn run_raw(
        &self,
        q: &RawTensor,
        k_cache: &RawTensor,
        v_cache: &RawTensor,
        new_kv: Option<(&RawTensor, &RawTensor)>,
        index: &CacheIndex<'_>,
        o: &RawTensor,
        lse: Option<&RawTensor>,
        stream: Stream,
    ) -> Result<KvcacheRun> {
        let a = self.args(
            *q.as_raw(),
            *k_cache.as_raw(),
            *v_cache.as_raw(),
            new_kv.map(|(k, v)| (*k.as_raw(), *v.as_raw())),
            index,
            *o.as_raw(),
            lse.map(|t| *t.as_raw()),
            stream,
        )?;
        self.call(a)
    }

    /// Bytes of workspace a call on these tensors would use (0 when none is needed). Host index arrays are
    /// read, as the call reads them; nothing is written.
    #[allow(clippy::too_many_arguments)]
    pub fn workspace_size_raw(
        &self,
        q: &RawTensor,
        k_cache: &RawTensor,
        v_cache: &RawTensor,
        new_kv: Option<(&RawTensor, &RawTensor)>,
        index: &CacheIndex<'_>,
        o: &RawTensor,
        lse: Option<&RawTensor>,
    ) -> Result<usize> {
        let a = self.args(
            *q.as_raw(),
            *k_cache.as_raw(),
            *v_cache.as_raw(),
            new_kv.map(|(k, v)| (*k.as_raw(), *v.as_raw())),
            index,
            *o.as_raw(),
            lse.map(|t| *t.as_raw()),
            Stream::legacy_default(),
        )?;
        let mut bytes = 0usize;
        // Safety: valid, library-sized pointers; the query reads the descriptors and host index arrays only.
        check(unsafe { sys::flash_fwd_kvcache_workspace_size(a.as_ptr(), &mut bytes) })?;
        Ok(bytes)
    }
}

fn combine_args(
    o_parts: &[sys::flash_tensor],
    lse_parts: &[sys::flash_tensor],
    o: sys::flash_tensor,
    lse: Option<sys::flash_tensor>,
    stream: Stream,
) -> Result<()> {
    if o_parts.len() != lse_parts.len() {
        return Err(Error::new(
            sys::FLASH_ERROR_INVALID_ARGUMENT,
            format!("o_parts has {} parts but lse_parts has {}", o_parts.len(), lse_parts.len()),
        ));
    }
    let num_parts = i32::try_from(o_parts.len()).map_err(|_| {
        Error::new(sys::FLASH_ERROR_INVALID_ARGUMENT, format!("{} parts, more than 2^31-1", o_parts.len()))
    })?;
    let mut buf = LibSized::<sys::flash_combine_args>::zeroed();
    // Safety: a buffer as large as the library's flash_combine_args (see abi.rs); our size is passed.
    check(unsafe {
        sys::flash_combine_args_init_sized(buf.as_mut_ptr(), std::mem::size_of::<sys::flash_combine_args>() as _)
    })?;
    let a = buf.get_mut();
    a.num_parts = num_parts;
    a.o_parts = o_parts.as_ptr();
    a.lse_parts = lse_parts.as_ptr();
    a.o = o;
    if let Some(lse) = lse {
        a.lse = lse;
    }
    a.stream = stream.as_raw();
    // Safety: the descriptor arrays hold num_parts entries and outlive the call; each descriptor is a checked
    // host view borrowed for this call or a RawTensor whose constructor's caller guaranteed the memory.
    check(unsafe { sys::flash_combine(buf.as_mut_ptr()) })
}

/// Merges partial attention results of the same queries over disjoint sets of keys into the result over all
/// of them (`flash_combine`; the merge step of split-KV attention), on host tensors:
///
/// `M = max_p LSE_p, w_p = exp(LSE_p - M), O = sum_p w_p O_p / sum_p w_p, LSE = M + log(sum_p w_p)`.
///
/// `o_parts[p]` is `[batch, seqlen, heads, head_dim]` (one dtype for all; fp32 partials keep the most
/// accuracy), `lse_parts[p]` fp32 `[batch, heads, seqlen]` in the natural log (as
/// [`Forward::run_with_lse`](crate::Forward::run_with_lse) writes it; FlashInfer's base-2 LSE times ln 2). A
/// part whose LSE is -inf for a row contributes nothing there; a row where every part is -inf gets O = 0 and
/// LSE = -inf. Computed in double, O rounded once to its dtype (any of the three).
///
/// ```
/// use flash::{combine, Tensor, TensorMut};
/// let (a, b) = (vec![1.0f32; 8], vec![4.0f32; 8]); // two parts, [1, 1, 1, 8]
/// let (la, lb) = ([0.0f32], [2f32.ln()]);           // part b saw twice the softmax mass
/// let mut o = vec![0.0f32; 8];
/// let mut lse = [0.0f32];
/// combine(
///     &[Tensor::new(&a, [1, 1, 1, 8])?, Tensor::new(&b, [1, 1, 1, 8])?],
///     &[Tensor::new(&la, [1, 1, 1])?, Tensor::new(&lb, [1, 1, 1])?],
///     &mut TensorMut::new(&mut o, [1, 1, 1, 8])?,
///     Some(&mut TensorMut::new(&mut lse, [1, 1, 1])?),
/// )?;
/// assert!(o.iter().all(|&x| (x - 3.0).abs() < 1e-6)); // (1 * 1 + 2 * 4) / 3
/// assert!((lse[0] - 3f32.ln()).abs() < 1e-6);
/// # Ok::<(), flash::Error>(())
/// ```
pub fn combine<P: Element, O: Element>(
    o_parts: &[Tensor<'_, P>],
    lse_parts: &[Tensor<'_, f32, 3>],
    o: &mut TensorMut<'_, O>,
    lse: Option<&mut TensorMut<'_, f32, 3>>,
) -> Result<()> {
    let o_raw: Vec<sys::flash_tensor> = o_parts.iter().map(|t| t.raw()).collect();
    let lse_raw: Vec<sys::flash_tensor> = lse_parts.iter().map(|t| t.raw()).collect();
    combine_args(&o_raw, &lse_raw, o.raw(), lse.map(|l| l.raw()), Stream::legacy_default())
}

/// [`combine`] on raw tensors: CUDA tensors, asynchronously on `stream` (refused with `ALGORITHM_UNAVAILABLE`
/// until libflash's GPU kernel for it is built), or host tensors the borrow checker cannot see.
pub fn combine_raw(
    o_parts: &[RawTensor],
    lse_parts: &[RawTensor],
    o: &RawTensor,
    lse: Option<&RawTensor>,
    stream: Stream,
) -> Result<()> {
    let o_raw: Vec<sys::flash_tensor> = o_parts.iter().map(|t| *t.as_raw()).collect();
    let lse_raw: Vec<sys::flash_tensor> = lse_parts.iter().map(|t| *t.as_raw()).collect();
    combine_args(&o_raw, &lse_raw, *o.as_raw(), lse.map(|t| *t.as_raw()), stream)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_index_lengths_are_checked() {
        let seqlens = [1, 2];
        assert_eq!(CacheIndex::contiguous(&seqlens).batch(), Some(2));
        let e = CacheIndex::with_batch_idx(&seqlens, &[0]).unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::BadShape);
        assert_eq!(e.message(), "cache_batch_idx has 1 entries but cache_seqlens has 2");
        let e = CacheIndex::paged(&seqlens, &[0, 1, 2], 2).unwrap_err();
        assert_eq!(e.message(), "block_table has 3 entries but 2 sequences x max_pages_per_seq 2 needs 4");
        let e = CacheIndex::paged(&seqlens, &[], 0).unwrap_err();
        assert_eq!(e.message(), "max_pages_per_seq is 0 but must be in [1, 2^31-1]");
        let p = CacheIndex::paged(&seqlens, &[0, 1, 2, 3], 2).unwrap();
        assert_eq!((p.block_table_stride, p.max_pages_per_seq), (2, 2));
    }

    #[test]
    fn kvcache_args_buffer_holds_the_library_struct() {
        let mut a = LibSized::<sys::flash_kvcache_args>::zeroed();
        let ours = std::mem::size_of::<sys::flash_kvcache_args>();
        assert_eq!(unsafe { sys::flash_kvcache_args_init_sized(a.as_mut_ptr(), ours as _) }, sys::FLASH_OK);
        assert_eq!(a.get().struct_size, ours);
        assert_eq!(
            (a.get().window_left, a.get().window_right, a.get().num_splits, a.get().algorithm_used),
            (-1, -1, 0, -1)
        );
        let mut c = LibSized::<sys::flash_combine_args>::zeroed();
        let ours = std::mem::size_of::<sys::flash_combine_args>();
        assert_eq!(unsafe { sys::flash_combine_args_init_sized(c.as_mut_ptr(), ours as _) }, sys::FLASH_OK);
        assert_eq!((c.get().struct_size, c.get().num_parts), (ours, 0));
    }
}
