//! Block-sparse masks (`flash_block_mask`): which key blocks each query block attends to.

use flash_sys as sys;

use crate::abi::LibSized;
use crate::error::{check, Error, Result};
use crate::tensor::Device;

fn bad_mask(msg: String) -> Error {
    Error::new(sys::FLASH_ERROR_BAD_MASK, msg)
}

fn to_i32(value: usize, what: &str) -> Result<i32> {
    i32::try_from(value).map_err(|_| bad_mask(format!("{what} is {value}, larger than 2^31-1")))
}

/// Number of blocks of `block` rows that cover `seqlen` rows: `ceil(seqlen / block)`.
pub fn num_blocks(seqlen: usize, block: usize) -> usize {
    (seqlen + block - 1) / block
}

/// A block-sparse attention mask in the compact form the ABI takes (FlexAttention's `BlockMask`):
/// for batch `b`, head `h` and query block `qb` (query rows `[qb*block_m, (qb+1)*block_m)`), the key
/// blocks kept are `kv_indices[b, h, qb, 0 .. kv_num_blocks[b, h, qb]]` (key rows
/// `[kb*block_n, (kb+1)*block_n)`). A batch or head extent of 1 broadcasts over that dimension.
///
/// Block sizes are those the kernels tile by: 64 or 128 (the library checks). The mask composes with
/// causal and window masking: the keys visible are those every mask allows. A query row that sees no key
/// gets O = 0 and LSE = -inf.
///
/// ```
/// use flash::BlockMask;
/// // One batch and head (broadcast), 2 query blocks x 3 key blocks of 64 rows, a band:
/// #[rustfmt::skip]
/// let map = [true, true,  false,
///            false, true, true];
/// let mask = BlockMask::from_dense(64, 64, [1, 1, 2, 3], &map)?;
/// assert_eq!(mask.max_kv_blocks(), 2);
/// # Ok::<(), flash::Error>(())
/// ```
#[derive(Debug)]
pub struct BlockMask {
    raw: LibSized<sys::flash_block_mask>,
    device: Device,
    /// Batch and head extents of the arrays (1 = broadcast); None for a mask made from raw pointers.
    extents: Option<(usize, usize)>,
    // The arrays `raw` points into (host masks). Their heap buffers do not move with the struct.
    _kv_num_blocks: Vec<i32>,
    _kv_indices: Vec<i32>,
}

// Safety: the pointers in `raw` are into the Vecs this value owns (never written after construction),
// or device memory whose validity the unsafe constructor's caller guaranteed for every call.
unsafe impl Send for BlockMask {}
unsafe impl Sync for BlockMask {}

fn initialised() -> Result<LibSized<sys::flash_block_mask>> {
    let mut raw = LibSized::<sys::flash_block_mask>::zeroed();
    // Safety: a buffer as large as the library's flash_block_mask (see abi.rs).
    check(unsafe { sys::flash_block_mask_init_sized(raw.as_mut_ptr(), std::mem::size_of::<sys::flash_block_mask>() as _) })?;
    Ok(raw)
}

impl BlockMask {
    /// Builds the compact form from a dense boolean block map `map[b, h, qb, kb]` (row-major) of shape
    /// `[batch, heads, num_q_blocks, num_k_blocks]`; `batch` and `heads` may be 1 to broadcast.
    /// `num_q_blocks` must be `ceil(seqlen_q / block_m)` and `num_k_blocks` `ceil(seqlen_k / block_n)`
    /// for the call it is used in (see [`num_blocks`]).
    pub fn from_dense(block_m: usize, block_n: usize, shape: [usize; 4], map: &[bool]) -> Result<Self> {
        let [batch, heads, nq, nk] = shape;
        if shape.contains(&0) {
            return Err(bad_mask(format!("block map shape {shape:?} has a zero extent")));
        }
        let total = shape.iter().try_fold(1usize, |a, &x| a.checked_mul(x));
        if total != Some(map.len()) {
            return Err(bad_mask(format!("block map shape {shape:?} does not match its {} entries", map.len())));
        }
        to_i32(nk, "num_k_blocks")?;
        let rows = batch * heads * nq;
        let counts: Vec<i32> = map.chunks(nk).map(|row| row.iter().filter(|&&x| x).count() as i32).collect();
        let max_kv = counts.iter().copied().max().unwrap_or(0) as usize;
        let mut indices = vec![0i32; rows * max_kv];
        for (r, row) in map.chunks(nk).enumerate() {
            let kept = row.iter().enumerate().filter(|(_, &x)| x).map(|(kb, _)| kb as i32);
            for (slot, kb) in indices[r * max_kv..].iter_mut().zip(kept) {
                *slot = kb;
            }
        }
        Self::from_compact(block_m, block_n, [batch, heads, nq], max_kv, counts, indices)
    }

    /// Takes the compact form directly: `kv_num_blocks` is `[batch, heads, num_q_blocks]` and
    /// `kv_indices` `[batch, heads, num_q_blocks, max_kv_blocks]`, both row-major; `batch` and `heads`
    /// may be 1 to broadcast. Counts and indices are checked by the library on each call (each count in
    /// `[0, max_kv_blocks]`, each index a key block, no index twice in a row).
    pub fn from_compact(
        block_m: usize,
        block_n: usize,
        shape: [usize; 3],
        max_kv_blocks: usize,
        kv_num_blocks: Vec<i32>,
        kv_indices: Vec<i32>,
    ) -> Result<Self> {
        let [batch, heads, nq] = shape;
        if shape.contains(&0) {
            return Err(bad_mask(format!("block mask shape {shape:?} has a zero extent")));
        }
        let rows = shape.iter().try_fold(1usize, |a, &x| a.checked_mul(x));
        if rows != Some(kv_num_blocks.len()) {
            return Err(bad_mask(format!(
                "kv_num_blocks has {} entries but shape {shape:?} needs {}",
                kv_num_blocks.len(),
                rows.map_or("more than 2^64".to_string(), |r| r.to_string())
            )));
        }
        let rows = kv_num_blocks.len();
        if rows.checked_mul(max_kv_blocks) != Some(kv_indices.len()) {
            return Err(bad_mask(format!(
                "kv_indices has {} entries but shape {shape:?} with max_kv_blocks {max_kv_blocks} needs {}",
                kv_indices.len(),
                rows.saturating_mul(max_kv_blocks)
            )));
        }
        let mut buf = initialised()?;
        let raw = buf.get_mut();
        raw.block_m = to_i32(block_m, "block_m")?;
        raw.block_n = to_i32(block_n, "block_n")?;
        raw.num_q_blocks = to_i32(nq, "num_q_blocks")?;
        raw.max_kv_blocks = to_i32(max_kv_blocks, "max_kv_blocks")?;
        let bcast = |extent: usize, stride: usize| if extent == 1 { 0 } else { stride as i64 };
        raw.kv_num_blocks_strides = [bcast(batch, heads * nq), bcast(heads, nq), 1];
        raw.kv_indices_strides =
            [bcast(batch, heads * nq * max_kv_blocks), bcast(heads, nq * max_kv_blocks), max_kv_blocks as i64, 1];
        raw.kv_num_blocks = kv_num_blocks.as_ptr();
        raw.kv_indices = kv_indices.as_ptr();
        Ok(BlockMask {
            raw: buf,
            device: Device::Cpu,
            extents: Some((batch, heads)),
            _kv_num_blocks: kv_num_blocks,
            _kv_indices: kv_indices,
        })
    }

    /// A mask whose arrays live elsewhere: device memory for CUDA tensors (a mask must live on the
    /// device of Q).
    ///
    /// # Safety
    ///
    /// `kv_num_blocks` and `kv_indices` are int32 arrays on `device`, indexed with the given element
    /// strides (0 broadcasts), covering every batch `b < batch`, head `h < heads_q` and query block of
    /// each call the mask is used in (`kv_indices` up to `max_kv_blocks` entries per row); they stay
    /// allocated and unmodified until the work of every such call has completed on its stream.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn from_raw_parts(
        device: Device,
        block_m: i32,
        block_n: i32,
        num_q_blocks: i32,
        max_kv_blocks: i32,
        kv_num_blocks: *const i32,
        kv_num_blocks_strides: [i64; 3],
        kv_indices: *const i32,
        kv_indices_strides: [i64; 4],
    ) -> Result<Self> {
        let mut buf = initialised()?;
        let raw = buf.get_mut();
        raw.block_m = block_m;
        raw.block_n = block_n;
        raw.num_q_blocks = num_q_blocks;
        raw.max_kv_blocks = max_kv_blocks;
        raw.kv_num_blocks = kv_num_blocks;
        raw.kv_num_blocks_strides = kv_num_blocks_strides;
        raw.kv_indices = kv_indices;
        raw.kv_indices_strides = kv_indices_strides;
        Ok(BlockMask { raw: buf, device, extents: None, _kv_num_blocks: Vec::new(), _kv_indices: Vec::new() })
    }

    pub fn block_m(&self) -> i32 {
        self.raw.get().block_m
    }
    pub fn block_n(&self) -> i32 {
        self.raw.get().block_n
    }
    pub fn num_q_blocks(&self) -> i32 {
        self.raw.get().num_q_blocks
    }
    pub fn max_kv_blocks(&self) -> i32 {
        self.raw.get().max_kv_blocks
    }
    pub fn device(&self) -> Device {
        self.device
    }

    /// The descriptor handed to the library.
    pub fn as_raw(&self) -> &sys::flash_block_mask {
        self.raw.get()
    }

    /// Checks what the library cannot: the arrays live where Q does, and cover Q's batch and heads
    /// (the library reads `kv_num_blocks[b, h, ...]` for every `b < batch`, `h < heads_q`).
    pub(crate) fn check_against(&self, q: &sys::flash_tensor) -> Result<()> {
        let q_device = Device::from_raw(q.device_type, q.device_id);
        if q_device != Some(self.device) {
            return Err(Error::new(
                sys::FLASH_ERROR_DEVICE_MISMATCH,
                format!("block_mask is on {:?} but q is on {:?}", self.device, q_device),
            ));
        }
        if let Some((batch, heads)) = self.extents {
            let (qb, qh) = (q.shape[0], q.shape[2]);
            if batch != 1 && batch as i64 != qb {
                return Err(bad_mask(format!("block_mask has batch {batch} but q.shape[0] is {qb} (1 broadcasts)")));
            }
            if heads != 1 && heads as i64 != qh {
                return Err(bad_mask(format!("block_mask has heads {heads} but q.shape[2] is {qh} (1 broadcasts)")));
            }
        }
        Ok(())
    }

    pub(crate) fn as_ptr(&self) -> *const sys::flash_block_mask {
        self.raw.as_ptr()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dense_map_becomes_compact_form() {
        #[rustfmt::skip]
        let map = [
            true, false, true,   // b0 qb0
            false, false, false, // b0 qb1
            true, true, true,    // b1 qb0
            false, true, false,  // b1 qb1
        ];
        let m = BlockMask::from_dense(128, 64, [2, 1, 2, 3], &map).unwrap();
        assert_eq!(m.max_kv_blocks(), 3);
        assert_eq!(m._kv_num_blocks, vec![2, 0, 3, 1]);
        assert_eq!(&m._kv_indices[0..2], &[0, 2]);
        assert_eq!(&m._kv_indices[6..9], &[0, 1, 2]);
        assert_eq!(m._kv_indices[9], 1);
        assert_eq!(m.as_raw().kv_num_blocks_strides, [2, 0, 1]);
        assert_eq!(m.as_raw().kv_indices_strides, [6, 0, 3, 1]);
    }

    #[test]
    fn shape_mismatch_is_bad_mask() {
        let e = BlockMask::from_dense(64, 64, [1, 1, 2, 2], &[true; 3]).unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::BadMask);
        let e = BlockMask::from_compact(64, 64, [1, 1, 2], 1, vec![1, 1], vec![0]).unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::BadMask);
    }
}
