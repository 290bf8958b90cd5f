"""CPU results against the numpy float64 reference (runs in CI: numpy + pytest only)."""

import numpy as np
import pytest

import libflash
from reference import attention_ref

try:
    import ml_dtypes
except ImportError:  # optional
    ml_dtypes = None

TOL = {"float32": (2e-5, 2e-5), "float16": (2e-3, 2e-3), "bfloat16": (1.6e-2, 1.6e-2)}
HEAD_DIMS = [8, 16, 32, 40, 64, 72, 96, 128, 256]


def randn(rng, shape, dtype="float32"):
    x = rng.standard_normal(shape).astype(np.float32)
    if dtype == "bfloat16":
        return x.astype(ml_dtypes.bfloat16)
    return x.astype(dtype)


def check(o, lse, q, k, v, dtype="float32", softmax_scale=None, **mask):
    ro, rlse = attention_ref(q.astype(np.float32), k.astype(np.float32), v.astype(np.float32),
                             softmax_scale=softmax_scale, **mask)
    atol, rtol = TOL[dtype]
    assert o.dtype == q.dtype and o.shape == q.shape
    o64 = o.astype(np.float32).astype(np.float64)
    assert np.all(np.isfinite(o64)), "NaN/inf in O"
    np.testing.assert_allclose(o64, ro, atol=atol, rtol=rtol)
    if lse is not None:
        assert lse.dtype == np.float32 and lse.shape == (q.shape[0], q.shape[2], q.shape[1])
        empty = np.isneginf(rlse)
        assert np.array_equal(np.isneginf(lse), empty), "LSE -inf rows differ"
        np.testing.assert_allclose(lse[~empty], rlse[~empty], atol=1e-4, rtol=1e-5)


def random_problem(rng, dtype="float32", max_s=200):
    b = int(rng.integers(1, 3))
    sq = int(rng.integers(1, max_s))
    sk = int(rng.integers(1, max_s))
    hkv = int(rng.choice([1, 2, 3]))
    hq = hkv * int(rng.choice([1, 2, 4]))
    d = int(rng.choice(HEAD_DIMS))
    return (randn(rng, (b, sq, hq, d), dtype), randn(rng, (b, sk, hkv, d), dtype), randn(rng, (b, sk, hkv, d), dtype))


DTYPES = ["float32", "float16"] + (["bfloat16"] if ml_dtypes is not None else [])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", range(8))
def test_random_dense(dtype, seed):
    rng = np.random.default_rng(seed)
    q, k, v = random_problem(rng, dtype)
    o, lse = libflash.attention(q, k, v, return_lse=True)
    check(o, lse, q, k, v, dtype)


@pytest.mark.skipif(ml_dtypes is not None, reason="ml_dtypes installed")
def test_bf16_needs_ml_dtypes():
    pytest.skip("bfloat16 numpy arrays need the optional ml_dtypes package")


@pytest.mark.parametrize("alignment", ["bottom_right", "top_left"])
@pytest.mark.parametrize("seed", range(6))
def test_random_causal(alignment, seed):
    rng = np.random.default_rng(100 + seed)
    q, k, v = random_problem(rng)
    o, lse = libflash.attention(q, k, v, causal=True, causal_alignment=alignment, return_lse=True)
    check(o, lse, q, k, v, causal=True, alignment=alignment)


@pytest.mark.parametrize("alignment", ["bottom_right", "top_left"])
@pytest.mark.parametrize("sq,sk", [(64, 64), (37, 150), (150, 37), (1, 129), (129, 1), (200, 200)])
def test_causal_lengths(alignment, sq, sk):
    rng = np.random.default_rng(sq * 1000 + sk)
    q, k, v = randn(rng, (2, sq, 4, 64)), randn(rng, (2, sk, 2, 64)), randn(rng, (2, sk, 2, 64))
    o, lse = libflash.attention(q, k, v, causal=True, causal_alignment=alignment, return_lse=True)
    check(o, lse, q, k, v, causal=True, alignment=alignment)


@pytest.mark.parametrize("alignment", ["bottom_right", "top_left"])
@pytest.mark.parametrize("window", [(0, 0), (5, -1), (-1, 3), (16, 16), (0, -1), (40, 7), (300, 300)])
@pytest.mark.parametrize("causal", [False, True])
def test_windows(alignment, window, causal):
    rng = np.random.default_rng(7)
    q, k, v = randn(rng, (1, 90, 2, 32)), randn(rng, (1, 170, 1, 32)), randn(rng, (1, 170, 1, 32))
    o, lse = libflash.attention(q, k, v, causal=causal, causal_alignment=alignment, window=window, return_lse=True)
    check(o, lse, q, k, v, causal=causal, alignment=alignment, window=window)


def test_empty_rows_give_zero_and_neg_inf():
    # top-left causal with a left window that excludes everything for early rows? Use seqlen_q > seqlen_k with
    # bottom-right causal: the first seqlen_q - seqlen_k rows see no key.
    rng = np.random.default_rng(3)
    q, k, v = randn(rng, (1, 100, 2, 64)), randn(rng, (1, 30, 2, 64)), randn(rng, (1, 30, 2, 64))
    o, lse = libflash.attention(q, k, v, causal=True, return_lse=True)
    assert np.all(o[:, :70] == 0) and np.all(np.isneginf(lse[:, :, :70]))
    check(o, lse, q, k, v, causal=True)


@pytest.mark.parametrize("algorithm", ["cpu", "naive", "auto"])
def test_algorithms(algorithm):
    rng = np.random.default_rng(11)
    q, k, v = random_problem(rng)
    o, lse = libflash.attention(q, k, v, causal=True, return_lse=True, algorithm=algorithm)
    check(o, lse, q, k, v, causal=True)
    assert libflash.last_algorithm_used() == ("cpu" if algorithm == "auto" else algorithm)


def test_softmax_scale():
    rng = np.random.default_rng(12)
    q, k, v = random_problem(rng)
    o, lse = libflash.attention(q, k, v, softmax_scale=0.37, return_lse=True)
    check(o, lse, q, k, v, softmax_scale=0.37)


# ---- Strided inputs and outputs ------------------------------------------------------------------------
def test_strided_views():
    rng = np.random.default_rng(20)
    big_q = randn(rng, (2, 160, 6, 64))
    q = big_q[:, ::2, 1:5]  # every other row, a slice of heads
    kv = randn(rng, (2, 77, 2, 2, 64))  # packed: [b, s, 2, h, d]
    k, v = kv[:, :, 0], kv[:, :, 1]
    assert not q.flags.c_contiguous and not k.flags.c_contiguous
    o, lse = libflash.attention(q, k, v, causal=True, return_lse=True)
    check(o, lse, q, k, v, causal=True)


def test_transposed_head_layout():
    rng = np.random.default_rng(21)
    # Stored [b, h, s, d] (the "BHSD" layout), viewed as [b, s, h, d] without a copy.
    qh, kh, vh = randn(rng, (2, 4, 50, 32)), randn(rng, (2, 2, 90, 32)), randn(rng, (2, 2, 90, 32))
    q, k, v = (x.transpose(0, 2, 1, 3) for x in (qh, kh, vh))
    o, lse = libflash.attention(q, k, v, return_lse=True, window=(10, 10), causal_alignment="top_left")
    check(o, lse, q, k, v, window=(10, 10), alignment="top_left")


def test_qkv_packed_and_broadcast_strides():
    rng = np.random.default_rng(22)
    qkv = randn(rng, (1, 64, 3, 4, 16))
    q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    o = libflash.attention(q, k, v)
    check(o, None, q, k, v)
    # A stride-0 (broadcast) batch dimension on an input is fine.
    kb = np.broadcast_to(k[:1], (3,) + k.shape[1:])
    qb = randn(rng, (3, 64, 4, 16))
    o = libflash.attention(qb, kb, kb)
    check(o, None, qb, kb, kb)


def test_out_and_strided_out():
    rng = np.random.default_rng(23)
    q, k, v = randn(rng, (2, 40, 4, 64)), randn(rng, (2, 60, 4, 64)), randn(rng, (2, 60, 4, 64))
    out = np.full((2, 40, 4, 64), np.nan, dtype=np.float32)
    r = libflash.attention(q, k, v, out=out)
    assert r is out
    check(out, None, q, k, v)
    big = np.full((2, 4, 40, 64), np.nan, dtype=np.float32)  # write O in the [b, h, s, d] layout
    view = big.transpose(0, 2, 1, 3)
    libflash.attention(q, k, v, out=view)
    check(view, None, q, k, v)


def test_dlpack_producer_on_cpu():
    """An unknown array type exposing only __dlpack__/__dlpack_device__ goes through the DLPack reader."""
    if not hasattr(np.ndarray, "__dlpack__"):
        pytest.skip("numpy without __dlpack__")

    class Wrapped:
        def __init__(self, a):
            self.a = a

        def __dlpack__(self, stream=None):
            return self.a.__dlpack__()

        def __dlpack_device__(self):
            return self.a.__dlpack_device__()

    rng = np.random.default_rng(24)
    k, v = randn(rng, (1, 65, 2, 32)), randn(rng, (1, 65, 2, 32))
    base = randn(rng, (1, 33, 4, 32))
    qs = base[:, :, ::2]  # strided view through DLPack
    o = libflash.attention(Wrapped(qs), Wrapped(k), Wrapped(v), causal=True)
    assert isinstance(o, np.ndarray)
    check(o, None, qs, k, v, causal=True)


# ---- Block-sparse masks --------------------------------------------------------------------------------
def _random_map(rng, shape, density):
    return rng.random(shape) < density


@pytest.mark.parametrize("block", [64, 128, (64, 128), (128, 64)])
@pytest.mark.parametrize("density", [0.0, 0.3, 0.7, 1.0])
@pytest.mark.parametrize("bcast", ["full", "batch", "heads", "both"])
def test_block_mask_dense(block, density, bcast):
    rng = np.random.default_rng(hash((str(block), density, bcast)) % 2**32)
    bm, bn = (block, block) if isinstance(block, int) else block
    b, hq, hkv, sq, sk = 2, 4, 2, 300, 260
    q, k, v = randn(rng, (b, sq, hq, 32)), randn(rng, (b, sk, hkv, 32)), randn(rng, (b, sk, hkv, 32))
    nq, nk = -(-sq // bm), -(-sk // bn)
    shape = {"full": (b, hq), "batch": (1, hq), "heads": (b, 1), "both": (1, 1)}[bcast] + (nq, nk)
    m = _random_map(rng, shape, density)
    o, lse = libflash.attention(q, k, v, block_mask=m, block_size=block, return_lse=True)
    check(o, lse, q, k, v, block_map=m, block=(bm, bn))


def test_block_mask_infers_block_size():
    rng = np.random.default_rng(30)
    q, k, v = randn(rng, (1, 300, 2, 32)), randn(rng, (1, 200, 2, 32)), randn(rng, (1, 200, 2, 32))
    for bm, bn in [(128, 128), (64, 64), (64, 128), (128, 64)]:
        m = _random_map(rng, (1, 2, -(-300 // bm), -(-200 // bn)), 0.5)
        o, lse = libflash.attention(q, k, v, block_mask=m, return_lse=True)
        check(o, lse, q, k, v, block_map=m, block=(bm, bn))


@pytest.mark.parametrize("alignment", ["bottom_right", "top_left"])
def test_block_mask_with_causal_and_window(alignment):
    rng = np.random.default_rng(31)
    q, k, v = randn(rng, (2, 257, 4, 64)), randn(rng, (2, 400, 4, 64)), randn(rng, (2, 400, 4, 64))
    m = _random_map(rng, (2, 4, 3, 4), 0.6)
    for kw in (dict(causal=True), dict(window=(100, 20)), dict(causal=True, window=(64, -1))):
        o, lse = libflash.attention(q, k, v, block_mask=m, block_size=128, causal_alignment=alignment,
                                    return_lse=True, **kw)
        check(o, lse, q, k, v, block_map=m, block=(128, 128), alignment=alignment, **kw)


def test_block_mask_compact_forms():
    rng = np.random.default_rng(32)
    b, hq, sq, sk = 2, 2, 200, 300
    q, k, v = randn(rng, (b, sq, hq, 64)), randn(rng, (b, sk, hq, 64)), randn(rng, (b, sk, hq, 64))
    nq, nk = 4, 3  # block_m 64, block_n 128
    dense = _random_map(rng, (b, 1, nq, nk), 0.5)
    dense[0, 0, 1] = False  # an empty query block
    counts = dense.sum(-1).astype(np.int32)
    idx = np.zeros((b, 1, nq, nk), np.int32)
    for bb in range(b):
        for qb in range(nq):
            kept = np.flatnonzero(dense[bb, 0, qb])[::-1]  # unsorted (descending) is allowed
            idx[bb, 0, qb, :len(kept)] = kept
    for bmask, kw in [((counts, idx), dict(block_size=(64, 128))),
                      ((counts, idx, (64, 128)), {}),
                      (libflash.BlockMask(counts, idx, block_size=(64, 128)), {}),
                      (libflash.BlockMask.from_dense(dense, block_size=(64, 128)), {})]:
        o, lse = libflash.attention(q, k, v, block_mask=bmask, return_lse=True, **kw)
        check(o, lse, q, k, v, block_map=dense, block=(64, 128))


class _FakeFlexMask:
    """Stands in for FlexAttention's BlockMask (torch.nn.attention.flex_attention) without torch: the same attributes,
    numpy arrays, and a type named as torch's, which is what libflash recognises it by."""

    def __init__(self, num, idx, full_num, full_idx, block_size, seq_lengths, mask_mod):
        self.kv_num_blocks, self.kv_indices = num, idx
        self.full_kv_num_blocks, self.full_kv_indices = full_num, full_idx
        self.BLOCK_SIZE, self.seq_lengths, self.mask_mod = block_size, seq_lengths, mask_mod


_FakeFlexMask.__name__ = "BlockMask"
_FakeFlexMask.__module__ = "torch.nn.attention.flex_attention"


def _fake_noop_mask(b, h, q_idx, kv_idx):
    return True


_fake_noop_mask.__name__ = "noop_mask"
_fake_noop_mask.__module__ = "torch.nn.attention.flex_attention"


def _flex_lists(rng, keep, width):
    """FlexAttention's form of a boolean block map: per query block a count and the kept indices (shuffled), padded
    to `width` with junk that must never be read."""
    num = keep.sum(-1).astype(np.int32)
    idx = rng.integers(0, 1000, keep.shape[:-1] + (width,)).astype(np.int32)
    for pos in np.ndindex(keep.shape[:-1]):
        kept = rng.permutation(np.flatnonzero(keep[pos]))
        idx[pos][:len(kept)] = kept
    return num, idx


@pytest.mark.parametrize("block", [(128, 128), (64, 128), (128, 64)])
def test_block_mask_flex_attention_form(block):
    """FlexAttention's BlockMask: its partial and full blocks become one list; partial blocks are taken whole only
    with a noop mask_mod, or with partial="keep"; BLOCK_SIZE's order is read from its shapes."""
    rng = np.random.default_rng(35)
    bm, bn = block
    b, h, sq, sk = 2, 2, 300, 330
    q, k, v = randn(rng, (b, sq, h, 32)), randn(rng, (b, sk, h, 32)), randn(rng, (b, sk, h, 32))
    nq, nk = -(-sq // bm), -(-sk // bn)
    kept = _random_map(rng, (b, 1, nq, nk), 0.6)
    kept[0, 0, 1] = False  # a query block that sees no key
    full = kept & (rng.random(kept.shape) < 0.5)
    part = kept & ~full
    num, idx = _flex_lists(rng, part, nk)
    fnum, fidx = _flex_lists(rng, full, nk)
    seq = (sq, sk)
    # Both orders of BLOCK_SIZE (torch's attribute has been (Q, KV); the shapes decide).
    for size in ({(128, 128): 128}.get(block, block), block[::-1]):
        fm = _FakeFlexMask(num, idx, fnum, fidx, size, seq, _fake_noop_mask)
        o, lse = libflash.attention(q, k, v, block_mask=fm, return_lse=True)
        check(o, lse, q, k, v, block_map=kept, block=block)
    # Full blocks only (no partial block), any mask_mod.
    none = np.zeros_like(num)
    fm = _FakeFlexMask(none, idx, fnum, fidx, block, seq, lambda b_, h_, i, j: i >= j)
    o, lse = libflash.attention(q, k, v, block_mask=fm, return_lse=True)
    check(o, lse, q, k, v, block_map=full, block=block)
    # Partial blocks under a mask_mod libflash cannot run: refused, unless kept whole and the element mask given.
    causal_mod = lambda b_, h_, i, j: i >= j  # noqa: E731
    fm = _FakeFlexMask(num, idx, fnum, fidx, block, seq, causal_mod)
    with pytest.raises(libflash.FlashError) as e:
        libflash.attention(q, k, v, block_mask=fm)
    assert e.value.status == libflash.capi.FLASH_ERROR_BAD_MASK and "partial" in str(e.value)
    o, lse = libflash.attention(q, k, v, block_mask=libflash.BlockMask.from_flex(fm, partial="keep"), causal=True,
                                causal_alignment="top_left", return_lse=True)
    check(o, lse, q, k, v, block_map=kept, block=block, causal=True, alignment="top_left")
    # No full blocks at all (full_kv_* None), as a mask made without them.
    fm = _FakeFlexMask(num, idx, None, None, block, seq, _fake_noop_mask)
    o, lse = libflash.attention(q, k, v, block_mask=fm, return_lse=True)
    check(o, lse, q, k, v, block_map=part, block=block)
    with pytest.raises(ValueError):
        libflash.BlockMask.from_flex(fm, partial="drop")


def test_block_mask_all_empty_and_all_dense():
    rng = np.random.default_rng(33)
    q, k, v = randn(rng, (1, 130, 2, 32)), randn(rng, (1, 130, 2, 32)), randn(rng, (1, 130, 2, 32))
    o, lse = libflash.attention(q, k, v, block_mask=np.zeros((1, 1, 2, 2), bool), return_lse=True)
    assert np.all(o == 0) and np.all(np.isneginf(lse))
    o2, lse2 = libflash.attention(q, k, v, block_mask=np.ones((2, 2), bool), return_lse=True)
    o3, lse3 = libflash.attention(q, k, v, return_lse=True)
    np.testing.assert_allclose(o2, o3, atol=1e-6)
    np.testing.assert_allclose(lse2, lse3, atol=1e-6)


# ---- Misc ----------------------------------------------------------------------------------------------
def test_devices_and_version():
    v = libflash.version()
    assert v.split(".")[0] == "1"
    assert libflash.version_info()[0] == 1
    devs = libflash.devices()
    assert devs[0].device_type == "cpu" and "cpu" in devs[0].algorithms
    assert "cpu" in libflash.compiled_algorithms()
    assert libflash.device_count("cpu") == 1
    assert "libflash" in libflash.build_info()


def test_threads():
    """Concurrent calls from several threads (the GIL is released during the call)."""
    from concurrent.futures import ThreadPoolExecutor

    rng = np.random.default_rng(40)
    probs = [random_problem(rng, max_s=100) for _ in range(8)]
    with ThreadPoolExecutor(4) as ex:
        outs = list(ex.map(lambda p: libflash.attention(*p, causal=True), probs))
    for (q, k, v), o in zip(probs, outs):
        check(o, None, q, k, v, causal=True)
