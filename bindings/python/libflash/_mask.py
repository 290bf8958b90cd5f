"""Block-sparse masks: the compact form the ABI takes, and the dense boolean block map bindings accept.

Compact form (as FlexAttention's BlockMask): for query block qb of batch b and head h the key blocks kept
are kv_indices[b, h, qb, :kv_num_blocks[b, h, qb]]. Arrays are int32, [B|1, H|1, num_q_blocks] and
[B|1, H|1, num_q_blocks, max_kv_blocks]; a dimension of 1 broadcasts over batch or heads (stride 0).
Dense form: a boolean [B|1, H|1, num_q_blocks, num_kv_blocks] map, True = the block is kept.
FlexAttention's own BlockMask (torch.nn.attention.flex_attention) is taken too: its partial and full blocks become one
list per query block (BlockMask.from_flex).
Heads are the query heads (heads_q).
"""

import ctypes

import numpy as np

from . import _capi
from ._arrays import describe, kind_of, to_host
from ._errors import c_int, error

BLOCK_SIZES = (64, 128)


def _pair(block_size):
    if block_size is None:
        return None
    if isinstance(block_size, (tuple, list)):
        if len(block_size) != 2:
            raise ValueError("libflash: block_size must be an int or a (block_m, block_n) pair")
        m = c_int(block_size[0], "block_size[0] (block_m)", _capi.FLASH_ERROR_BAD_MASK)
        n = c_int(block_size[1], "block_size[1] (block_n)", _capi.FLASH_ERROR_BAD_MASK)
    else:
        m = n = c_int(block_size, "block_size", _capi.FLASH_ERROR_BAD_MASK)
    return m, n


def _cdiv(a, b):
    return -(-a // b)


def dense_to_compact(dense):
    """(kv_num_blocks, kv_indices) int32 numpy arrays from a dense boolean block map [..., nq, nk].

    Kept key blocks are listed in ascending order; entries past the count are padding (never read).
    """
    m = np.asarray(dense)
    if m.dtype != np.bool_:
        m = m != 0
    while m.ndim < 4:
        m = m[np.newaxis]
    counts = m.sum(axis=-1, dtype=np.int32)
    width = max(int(counts.max()) if counts.size else 0, 1)
    # A stable sort of ~m puts the kept blocks first, in ascending index order.
    order = np.argsort(~m, axis=-1, kind="stable")[..., :width].astype(np.int32)
    return np.ascontiguousarray(counts), np.ascontiguousarray(order), int(counts.max()) if counts.size else 0


def is_flex_block_mask(obj):
    """Whether obj is FlexAttention's BlockMask (checked by its type's name, so that torch is never imported here)."""
    t = type(obj)
    return t.__name__ == "BlockMask" and t.__module__.startswith("torch.nn.attention")


def _is_noop(mask_mod):
    """FlexAttention's noop_mask (every element of a partial block visible), or no mask_mod at all."""
    return mask_mod is None or (getattr(mask_mod, "__name__", "") == "noop_mask"
                                and getattr(mask_mod, "__module__", "").startswith("torch.nn.attention"))


def _flex_block_sizes(fm, nq, nk):
    """(block_m, block_n) of a FlexAttention BlockMask: its BLOCK_SIZE pair in the order its block counts and
    seq_lengths agree with (torch has named the pair's order differently over versions)."""
    size = fm.BLOCK_SIZE
    pair = (int(size), int(size)) if isinstance(size, int) else (int(size[0]), int(size[1]))
    seq = getattr(fm, "seq_lengths", None)
    for bm, bn in (pair, pair[::-1]):
        if seq is None or (_cdiv(int(seq[0]), bm) == nq and _cdiv(int(seq[1]), bn) == nk):
            return bm, bn
    raise error(_capi.FLASH_ERROR_BAD_MASK, "FlexAttention BlockMask: BLOCK_SIZE %s does not match its %d x %d blocks "
                "for seq_lengths %s" % (tuple(pair), nq, nk, tuple(seq)))


def _union_lists(num_a, idx_a, num_b, idx_b):
    """One compact list per query block: the first num_a entries of idx_a, then the first num_b of idx_b. numpy
    arrays or torch tensors (on their device). FlexAttention's two sets are disjoint, so a list is no longer than the
    key blocks, the wider array's width, to which the result is cut (a longer count is left for the ABI to refuse)."""
    width = max(idx_a.shape[-1], idx_b.shape[-1])
    if isinstance(num_a, np.ndarray):
        idx = np.concatenate([idx_a, idx_b], axis=-1)
        valid = np.concatenate([np.arange(idx_a.shape[-1]) < num_a[..., None],
                                np.arange(idx_b.shape[-1]) < num_b[..., None]], axis=-1)
        order = np.argsort(~valid, axis=-1, kind="stable")[..., :width]
        return (num_a + num_b).astype(np.int32), np.take_along_axis(idx, order, -1).astype(np.int32)
    import torch  # a FlexAttention mask of torch tensors: torch is there

    idx = torch.cat([idx_a, idx_b], dim=-1)
    ar_a = torch.arange(idx_a.shape[-1], device=idx.device)
    ar_b = torch.arange(idx_b.shape[-1], device=idx.device)
    valid = torch.cat([ar_a < num_a[..., None], ar_b < num_b[..., None]], dim=-1)
    order = torch.argsort((~valid).to(torch.int8), dim=-1, stable=True)[..., :width]
    return (num_a + num_b).to(torch.int32), torch.gather(idx, -1, order).to(torch.int32).contiguous()


class BlockMask:
    """A block-sparse mask in the compact form, reusable across calls.

    BlockMask(kv_num_blocks, kv_indices, block_size=128): int32 arrays [B|1, H|1, num_q_blocks] and
        [B|1, H|1, num_q_blocks, max_kv_blocks] (numpy, or device arrays of the inputs' framework).
    BlockMask.from_dense(block_map, block_size=128): from a boolean [B|1, H|1, num_q_blocks, num_kv_blocks]
        map (any array kind; device maps are copied to the host once, here).
    BlockMask.from_flex(flex_block_mask, partial="error"): from FlexAttention's BlockMask, on its device.
    block_size: 64 or 128, or a (block_m, block_n) pair.
    """

    def __init__(self, kv_num_blocks, kv_indices, block_size=128, max_kv_blocks=None):
        bm, bn = _pair(block_size) or (128, 128)
        self.block_m, self.block_n = bm, bn
        self.kv_num_blocks = kv_num_blocks
        self.kv_indices = kv_indices
        self.max_kv_blocks = max_kv_blocks  # None: kv_indices.shape[-1]

    @classmethod
    def from_dense(cls, block_map, block_size=128):
        counts, indices, maxk = dense_to_compact(to_host(block_map, "block_mask"))
        return cls(counts, indices, block_size, max_kv_blocks=maxk)

    @classmethod
    def from_flex(cls, flex_mask, partial="error"):
        """From FlexAttention's BlockMask (torch.nn.attention.flex_attention.BlockMask), without a copy to the host.

        Each query block keeps its full blocks and its partial ones, as one list. libflash keeps or drops whole
        blocks and cannot run a mask_mod, so partial blocks are taken only where they mean whole blocks:
          partial="error" (default): only when the mask's mask_mod is noop_mask (BlockMask.from_kv_blocks without
              one); otherwise FlashError (FLASH_ERROR_BAD_MASK) says so;
          partial="keep": partial blocks are kept whole, whatever the mask_mod. Give the element mask as causal= /
              window= (they compose with the blocks: the visible set is the intersection), as for a mask made by
              create_block_mask from a causal or sliding-window mask_mod.
        The block sizes are the mask's BLOCK_SIZE; they must be ones libflash tiles by (64 or 128)."""
        if partial not in ("error", "keep"):
            raise ValueError("libflash: partial must be 'error' or 'keep', not %r" % (partial,))
        num, idx = flex_mask.kv_num_blocks, flex_mask.kv_indices
        full_num, full_idx = getattr(flex_mask, "full_kv_num_blocks", None), getattr(flex_mask, "full_kv_indices", None)
        if partial == "error" and not _is_noop(getattr(flex_mask, "mask_mod", None)) and bool((num > 0).any()):
            raise error(_capi.FLASH_ERROR_BAD_MASK,
                        "this FlexAttention BlockMask has partial blocks, where its mask_mod %s decides element by "
                        "element; libflash keeps or drops whole blocks. Build the mask from full blocks only, or take "
                        "it with libflash.BlockMask.from_flex(mask, partial='keep') and give the element mask as "
                        "causal= / window=" % getattr(flex_mask.mask_mod, "__name__", "?"))
        bm, bn = _flex_block_sizes(flex_mask, int(num.shape[-1]), int(idx.shape[-1]))
        if full_num is not None:
            num, idx = _union_lists(num, idx, full_num, full_idx)
        return cls(num, idx, (bm, bn))

    def __repr__(self):
        return "BlockMask(block_size=(%d, %d), kv_num_blocks shape %s, kv_indices shape %s)" % (
            self.block_m, self.block_n, tuple(self.kv_num_blocks.shape), tuple(self.kv_indices.shape))


def _infer_block(n_blocks, seqlen, name):
    """Block size whose block count for `seqlen` is n_blocks (128 first). Unambiguous in effect: if both
    64 and 128 give the same count, seqlen <= 64 and one block covers every row either way."""
    for bs in (128, 64):
        if _cdiv(seqlen, bs) == n_blocks:
            return bs
    raise error(_capi.FLASH_ERROR_BAD_MASK,
                "block_mask has %d %s blocks, but seqlen %d gives %d blocks of 128 or %d blocks of 64"
                % (n_blocks, name, seqlen, _cdiv(seqlen, 128), _cdiv(seqlen, 64)))


def build(block_mask, block_size, q, batch, heads_q, seqlen_q, seqlen_k, alloc):
    """A (flash_block_mask, keepalive) pair for attention(), or (None, None) when block_mask is None.

    block_mask: a BlockMask; FlexAttention's BlockMask (BlockMask.from_flex's rule for partial blocks); a
    (kv_num_blocks, kv_indices) or (kv_num_blocks, kv_indices, block_size) tuple; or a dense boolean block map.
    q: the Desc of q (device and framework for uploads).
    """
    if block_mask is None:
        return None, None
    bs = _pair(block_size)
    maxk = None
    if is_flex_block_mask(block_mask):
        block_mask = BlockMask.from_flex(block_mask)
    if isinstance(block_mask, BlockMask):
        if bs is None:
            bs = (block_mask.block_m, block_mask.block_n)
        counts, indices, maxk = block_mask.kv_num_blocks, block_mask.kv_indices, block_mask.max_kv_blocks
    elif isinstance(block_mask, (tuple, list)):
        if len(block_mask) == 3:
            if bs is None:
                bs = _pair(block_mask[2])
        elif len(block_mask) != 2:
            raise ValueError("libflash: a compact block_mask is (kv_num_blocks, kv_indices[, block_size])")
        counts, indices = block_mask[0], block_mask[1]
        if bs is None:
            bs = (_infer_block(int(counts.shape[-1]), seqlen_q, "query"), 128)
    else:
        dense = to_host(block_mask, "block_mask")
        if dense.ndim < 2 or dense.ndim > 4:
            raise error(_capi.FLASH_ERROR_BAD_MASK, "a dense block_mask must be [B|1, H|1, num_q_blocks, "
                        "num_kv_blocks] (got %d dimensions)" % dense.ndim)
        if bs is None:
            bs = (_infer_block(dense.shape[-2], seqlen_q, "query"), _infer_block(dense.shape[-1], seqlen_k, "key"))
        nk = _cdiv(seqlen_k, bs[1])
        if dense.shape[-1] != nk:
            raise error(_capi.FLASH_ERROR_BAD_MASK, "block_mask.shape[-1] is %d but seqlen_k %d with block_n %d "
                        "needs %d key blocks" % (dense.shape[-1], seqlen_k, bs[1], nk))
        counts, indices, maxk = dense_to_compact(dense)

    bm, bn = bs
    # Host arrays go where q lives (numpy int32 for the CPU, the input's framework for the GPU).
    keep = []

    def place(a, name, ndim):
        if kind_of(a) is None or kind_of(a) == "numpy":
            a = np.asarray(a)
            if a.dtype != np.int32:
                if a.dtype.kind not in "iu":
                    raise error(_capi.FLASH_ERROR_BAD_MASK, "block_mask %s has dtype %s; it must be int32" % (name, a.dtype))
                # astype would wrap: an int64 index 2**32 + 1 would become key block 1.
                if a.size:
                    lo, hi = int(a.min()), int(a.max())
                    bad = lo if lo < -2 ** 31 else hi if hi > 2 ** 31 - 1 else None
                    if bad is not None:
                        raise error(_capi.FLASH_ERROR_BAD_MASK, "block_mask %s holds %d, which does not fit int32"
                                    % (name, bad))
                a = a.astype(np.int32)
            while a.ndim < ndim:
                a = a[np.newaxis]
            a = alloc.upload_int32(a)
        d = describe(a, "block_mask " + name)
        if d.dtype != "int32":
            raise error(_capi.FLASH_ERROR_BAD_MASK, "block_mask %s has dtype %s; it must be int32" % (name, d.dtype))
        if len(d.shape) != ndim:
            raise error(_capi.FLASH_ERROR_BAD_MASK, "block_mask %s must have %d dimensions, not %d"
                        % (name, ndim, len(d.shape)))
        if d.device_type != q.device_type or (q.is_cuda and d.device_id != q.device_id):
            raise error(_capi.FLASH_ERROR_DEVICE_MISMATCH, "block_mask %s is not on the device of q" % name)
        keep.append(d)
        return d

    dc = place(counts, "kv_num_blocks", 3)
    di = place(indices, "kv_indices", 4)

    def bstrides(d, what):
        st = list(d.strides)
        for axis, (extent, full, label) in enumerate(((d.shape[0], batch, "batch"), (d.shape[1], heads_q, "heads"))):
            if extent == 1:
                st[axis] = 0
            elif extent != full:
                raise error(_capi.FLASH_ERROR_BAD_MASK, "block_mask %s.shape[%d] is %d but must be 1 or %s %d"
                            % (what, axis, extent, label, full))
        return st

    nq = _cdiv(seqlen_q, bm)
    if dc.shape[2] != nq or di.shape[2] != nq:
        raise error(_capi.FLASH_ERROR_BAD_MASK, "block_mask has %d query blocks but seqlen_q %d with block_m %d "
                    "needs %d" % (dc.shape[2], seqlen_q, bm, nq))
    cs, is_ = bstrides(dc, "kv_num_blocks"), bstrides(di, "kv_indices")

    m = _capi.flash_block_mask()
    _capi.flash_block_mask_init(ctypes.byref(m))
    m.block_m = c_int(bm, "block_m", _capi.FLASH_ERROR_BAD_MASK)
    m.block_n = c_int(bn, "block_n", _capi.FLASH_ERROR_BAD_MASK)
    m.num_q_blocks = c_int(nq, "block_mask num_q_blocks", _capi.FLASH_ERROR_BAD_MASK)
    m.max_kv_blocks = c_int(di.shape[3] if maxk is None else maxk, "block_mask max_kv_blocks", _capi.FLASH_ERROR_BAD_MASK)
    m.kv_num_blocks = dc.ptr
    m.kv_indices = di.ptr
    for i in range(3):
        m.kv_num_blocks_strides[i] = c_int(cs[i], "block_mask kv_num_blocks stride %d" % i, _capi.FLASH_ERROR_BAD_MASK, 64)
    for i in range(4):
        m.kv_indices_strides[i] = c_int(is_[i], "block_mask kv_indices stride %d" % i, _capi.FLASH_ERROR_BAD_MASK, 64)
    return m, keep
