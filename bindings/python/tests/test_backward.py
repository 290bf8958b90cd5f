"""attention_backward() on the CPU against an independent numpy float64 reference gradient
(tests/reference.py: attention_grad_ref), plus determinism and every error path (numpy + pytest only)."""

import numpy as np
import pytest

import libflash
from libflash import FlashError, capi
from reference import attention_grad_ref, attention_ref

try:
    import ml_dtypes
except ImportError:  # optional
    ml_dtypes = None

# Error bound on each gradient, relative to the largest reference entry (floored at 1): fp32 accumulation in
# the library; for fp16/bf16 also the rounding of O, dO and the gradients themselves.
TOL = {"float32": 5e-5, "float16": 6e-3, "bfloat16": 5e-2}
HEAD_DIMS = [8, 16, 32, 40, 64, 72, 96, 128, 256]


def randn(rng, shape, dtype="float32"):
    x = rng.standard_normal(shape).astype(np.float32)
    if dtype == "bfloat16":
        return x.astype(ml_dtypes.bfloat16)
    return x.astype(dtype)


def mask_kw(kw):
    """attention()'s keywords -> reference.visible()'s."""
    r = dict(kw)
    if "causal_alignment" in r:
        r["alignment"] = r.pop("causal_alignment")
    if "block_mask" in r:  # the reference takes the dense map (ref_block_map when block_mask is compact)
        dense = r.pop("block_mask")
        r["block_map"] = r.pop("ref_block_map", dense)
        r["block"] = r.pop("block")
    r.pop("block_size", None)
    return r


def run_and_check(q, k, v, dtype="float32", algorithm="auto", softmax_scale=None, do=None, outs=None, **kw):
    """Forward with LSE, backward, and a check of dq, dk, dv against the float64 reference from the same
    (rounded) inputs. Returns the gradients."""
    rng = np.random.default_rng(q.size)
    if do is None:
        do = randn(rng, q.shape, dtype)
    lib_kw = {k_: v_ for k_, v_ in kw.items() if k_ not in ("block", "ref_block_map")}
    o, lse = libflash.attention(q, k, v, return_lse=True, softmax_scale=softmax_scale, **lib_kw)
    dq, dk, dv = outs or (None, None, None)
    grads = libflash.attention_backward(q, k, v, o, do, lse, softmax_scale=softmax_scale, algorithm=algorithm,
                                        dq=dq, dk=dk, dv=dv, **lib_kw)
    f32 = lambda x: np.asarray(x).astype(np.float32)  # noqa: E731
    refs = attention_grad_ref(f32(q), f32(k), f32(v), f32(do), softmax_scale=softmax_scale, **mask_kw(kw))
    for name, g, r, x in zip(("dq", "dk", "dv"), grads, refs, (q, k, v)):
        assert isinstance(g, np.ndarray) and g.dtype == x.dtype and g.shape == x.shape, name
        g64 = g.astype(np.float32).astype(np.float64)
        assert np.all(np.isfinite(g64)), "NaN/inf in " + name
        bound = TOL[dtype] * max(1.0, float(np.abs(r).max()))
        err = float(np.abs(g64 - r).max())
        assert err <= bound, "%s: max |%s - ref| = %.3g > %.3g" % (kw, name, err, bound)
    if outs is not None:
        assert all(g is w for g, w in zip(grads, outs))
    return grads


def random_problem(rng, dtype="float32", max_s=160):
    b = int(rng.integers(1, 3))
    sq = int(rng.integers(1, max_s))
    sk = int(rng.integers(1, max_s))
    hkv = int(rng.choice([1, 2, 3]))
    hq = hkv * int(rng.choice([1, 2, 4]))
    d = int(rng.choice(HEAD_DIMS))
    return (randn(rng, (b, sq, hq, d), dtype), randn(rng, (b, sk, hkv, d), dtype), randn(rng, (b, sk, hkv, d), dtype))


DTYPES = ["float32", "float16"] + (["bfloat16"] if ml_dtypes is not None else [])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", range(6))
def test_random_dense_gqa(dtype, seed):
    rng = np.random.default_rng(500 + seed)
    q, k, v = random_problem(rng, dtype)
    run_and_check(q, k, v, dtype)


@pytest.mark.parametrize("algorithm", ["cpu", "naive", "auto"])
def test_algorithms(algorithm):
    rng = np.random.default_rng(510)
    q, k, v = randn(rng, (2, 77, 4, 64)), randn(rng, (2, 93, 2, 64)), randn(rng, (2, 93, 2, 64))
    run_and_check(q, k, v, algorithm=algorithm, causal=True)
    assert libflash.last_algorithm_used() == ("cpu" if algorithm == "auto" else algorithm)


@pytest.mark.parametrize("alignment", ["bottom_right", "top_left"])
@pytest.mark.parametrize("sq,sk", [(64, 64), (37, 150), (150, 37), (1, 129), (129, 1)])
def test_causal_both_alignments(alignment, sq, sk):
    rng = np.random.default_rng(sq * 1000 + sk)
    q, k, v = randn(rng, (2, sq, 4, 32)), randn(rng, (2, sk, 2, 32)), randn(rng, (2, sk, 2, 32))
    run_and_check(q, k, v, causal=True, causal_alignment=alignment)


@pytest.mark.parametrize("alignment", ["bottom_right", "top_left"])
@pytest.mark.parametrize("window", [(0, 0), (5, -1), (-1, 3), (16, 16), (40, 7), (300, 300)])
@pytest.mark.parametrize("causal", [False, True])
def test_windows(alignment, window, causal):
    rng = np.random.default_rng(520)
    q, k, v = randn(rng, (1, 90, 2, 32)), randn(rng, (1, 170, 1, 32)), randn(rng, (1, 170, 1, 32))
    run_and_check(q, k, v, causal=causal, causal_alignment=alignment, window=window)


def test_softmax_scale():
    rng = np.random.default_rng(521)
    q, k, v = random_problem(rng)
    run_and_check(q, k, v, softmax_scale=0.37)


def test_rows_without_keys_and_keys_without_queries_get_zero():
    # Bottom-right causal with seqlen_q > seqlen_k: the first 70 query rows see no key (dq = 0 there).
    rng = np.random.default_rng(522)
    q, k, v = randn(rng, (1, 100, 2, 64)), randn(rng, (1, 30, 2, 64)), randn(rng, (1, 30, 2, 64))
    dq, dk, dv = run_and_check(q, k, v, causal=True)
    assert np.all(dq[:, :70] == 0)
    # Top-left causal with seqlen_k > seqlen_q: keys past seqlen_q are seen by no query (dk = dv = 0).
    q, k, v = randn(rng, (1, 30, 2, 64)), randn(rng, (1, 100, 2, 64)), randn(rng, (1, 100, 2, 64))
    dq, dk, dv = run_and_check(q, k, v, causal=True, causal_alignment="top_left")
    assert np.all(dk[:, 30:] == 0) and np.all(dv[:, 30:] == 0)


# ---- Block masks ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("block", [64, 128, (64, 128), (128, 64)])
@pytest.mark.parametrize("density", [0.0, 0.4, 1.0])
@pytest.mark.parametrize("bcast", ["full", "batch", "both"])
def test_block_mask_dense(block, density, bcast):
    rng = np.random.default_rng(hash((str(block), density, bcast)) % 2**32)
    bm, bn = (block, block) if isinstance(block, int) else block
    b, hq, hkv, sq, sk = 2, 4, 2, 200, 260
    q, k, v = randn(rng, (b, sq, hq, 32)), randn(rng, (b, sk, hkv, 32)), randn(rng, (b, sk, hkv, 32))
    nq, nk = -(-sq // bm), -(-sk // bn)
    shape = {"full": (b, hq), "batch": (1, hq), "both": (1, 1)}[bcast] + (nq, nk)
    m = rng.random(shape) < density
    run_and_check(q, k, v, block_mask=m, block_size=block, block=(bm, bn))


@pytest.mark.parametrize("alignment", ["bottom_right", "top_left"])
def test_block_mask_with_causal_and_window(alignment):
    rng = np.random.default_rng(530)
    q, k, v = randn(rng, (1, 257, 4, 64)), randn(rng, (1, 300, 2, 64)), randn(rng, (1, 300, 2, 64))
    m = rng.random((1, 4, 3, 3)) < 0.6
    for kw in (dict(causal=True), dict(window=(100, 20))):
        run_and_check(q, k, v, block_mask=m, block_size=128, block=(128, 128), causal_alignment=alignment, **kw)


def test_block_mask_compact_form():
    rng = np.random.default_rng(531)
    q, k, v = randn(rng, (2, 200, 2, 64)), randn(rng, (2, 300, 2, 64)), randn(rng, (2, 300, 2, 64))
    dense = rng.random((2, 1, 4, 3)) < 0.5
    dense[0, 0, 1] = False  # an empty query block
    bmask = libflash.BlockMask.from_dense(dense, block_size=(64, 128))
    run_and_check(q, k, v, block_mask=bmask, block=(64, 128), ref_block_map=dense)
    counts = dense.sum(-1).astype(np.int32)
    idx = np.zeros(dense.shape, np.int32)
    for bb in range(2):
        for qb in range(4):
            kept = np.flatnonzero(dense[bb, 0, qb])[::-1]  # unsorted (descending) is allowed
            idx[bb, 0, qb, :len(kept)] = kept
    run_and_check(q, k, v, block_mask=(counts, idx, (64, 128)), block=(64, 128), ref_block_map=dense)


# ---- Strided inputs and outputs ------------------------------------------------------------------------
def test_strided_inputs():
    rng = np.random.default_rng(540)
    q = randn(rng, (2, 160, 6, 64))[:, ::2, 1:5]  # every other row, a slice of heads
    kv = randn(rng, (2, 77, 2, 2, 64))  # packed [b, s, 2, h, d]
    k, v = kv[:, :, 0], kv[:, :, 1]
    do = randn(rng, (2, 4, 80, 64)).transpose(0, 2, 1, 3)  # [b, h, s, d] storage
    assert not q.flags.c_contiguous and not k.flags.c_contiguous and not do.flags.c_contiguous
    run_and_check(q, k, v, do=do, causal=True)


def test_strided_outputs():
    rng = np.random.default_rng(541)
    q, k, v = randn(rng, (2, 40, 4, 64)), randn(rng, (2, 60, 2, 64)), randn(rng, (2, 60, 2, 64))
    dq = np.full((2, 4, 40, 64), np.nan, np.float32).transpose(0, 2, 1, 3)
    dk = np.full((2, 60, 2, 128), np.nan, np.float32)[..., :64]
    dv = np.full((2, 120, 2, 64), np.nan, np.float32)[:, ::2]
    run_and_check(q, k, v, outs=(dq, dk, dv), window=(10, 10))


def test_partial_outputs_are_allocated():
    rng = np.random.default_rng(542)
    q, k, v = randn(rng, (1, 33, 2, 32)), randn(rng, (1, 45, 1, 32)), randn(rng, (1, 45, 1, 32))
    o, lse = libflash.attention(q, k, v, return_lse=True)
    do = randn(rng, q.shape)
    dk = np.empty_like(k)
    g = libflash.attention_backward(q, k, v, o, do, lse, dk=dk)
    assert g[1] is dk
    ref = libflash.attention_backward(q, k, v, o, do, lse)
    for a, b in zip(g, ref):
        np.testing.assert_array_equal(a, b)


# ---- Determinism -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("algorithm", ["auto", "cpu", "naive"])
def test_deterministic_bitwise_equal_across_runs(algorithm):
    rng = np.random.default_rng(550)
    q, k, v = randn(rng, (2, 300, 8, 64)), randn(rng, (2, 333, 2, 64)), randn(rng, (2, 333, 2, 64))
    o, lse = libflash.attention(q, k, v, return_lse=True, causal=True)
    do = randn(rng, q.shape)
    runs = [libflash.attention_backward(q, k, v, o, do, lse, causal=True, algorithm=algorithm, deterministic=True)
            for _ in range(3)]
    for r in runs[1:]:
        for a, b in zip(runs[0], r):
            assert a.tobytes() == b.tobytes()


def test_threads():
    from concurrent.futures import ThreadPoolExecutor

    rng = np.random.default_rng(551)
    probs = [random_problem(rng, max_s=90) for _ in range(6)]
    with ThreadPoolExecutor(3) as ex:
        list(ex.map(lambda p: run_and_check(*p, causal=True), probs))


# ---- Errors ------------------------------------------------------------------------------------------------
def arrays(b=1, sq=16, sk=16, hq=2, hkv=2, d=32, dtype=np.float32):
    rng = np.random.default_rng(0)
    q = rng.standard_normal((b, sq, hq, d)).astype(dtype)
    k = rng.standard_normal((b, sk, hkv, d)).astype(dtype)
    v = rng.standard_normal((b, sk, hkv, d)).astype(dtype)
    o = np.zeros_like(q)
    lse = np.zeros((b, hq, sq), np.float32)
    return q, k, v, o, rng.standard_normal(q.shape).astype(dtype), lse


def raises(code, *a, **kw):
    with pytest.raises(FlashError) as ei:
        libflash.attention_backward(*a, **kw)
    e = ei.value
    assert e.status == code, str(e)
    assert e.status_name == capi.flash_status_string(code).decode() and e.message
    return e


def test_error_dtype_mismatch():
    q, k, v, o, do, lse = arrays()
    e = raises(capi.FLASH_ERROR_DTYPE_MISMATCH, q, k, v, o, do.astype(np.float16), lse)
    assert "d_o" in e.message
    raises(capi.FLASH_ERROR_DTYPE_MISMATCH, q, k, v, o.astype(np.float16), do, lse)
    e = raises(capi.FLASH_ERROR_DTYPE_MISMATCH, q, k, v, o, do, lse.astype(np.float16))
    assert "lse" in e.message
    raises(capi.FLASH_ERROR_DTYPE_MISMATCH, q, k, v, o, do, lse, dk=np.empty(k.shape, np.float16))


def test_error_unsupported_dtype():
    q, k, v, o, do, lse = arrays(dtype=np.float64)
    raises(capi.FLASH_ERROR_UNSUPPORTED_DTYPE, q, k, v, o, do, lse.astype(np.float32))


def test_error_shapes():
    q, k, v, o, do, lse = arrays(hq=4, hkv=2)
    e = raises(capi.FLASH_ERROR_BAD_SHAPE, q, k, v, o, do[:, :8], lse)
    assert "d_o" in e.message
    raises(capi.FLASH_ERROR_BAD_SHAPE, q, k, v, o, do, lse[:, :2])
    raises(capi.FLASH_ERROR_BAD_SHAPE, q, k, v, o, do, lse[0])
    raises(capi.FLASH_ERROR_BAD_SHAPE, q, k, v[:, :8], o, do, lse)
    raises(capi.FLASH_ERROR_BAD_SHAPE, q, k, v, o, do, lse, dv=np.empty((1, 16, 4, 32), np.float32))
    raises(capi.FLASH_ERROR_BAD_SHAPE, q[0], k, v, o, do, lse)
    q3, k3, v3, o3, do3, lse3 = arrays(hq=3, hkv=2)
    e = raises(capi.FLASH_ERROR_BAD_SHAPE, q3, k3, v3, o3, do3, lse3)
    assert "heads" in e.message


def test_error_head_dim_and_strides():
    q, k, v, o, do, lse = arrays(d=12)
    raises(capi.FLASH_ERROR_UNSUPPORTED_HEAD_DIM, q, k, v, o, do, lse)
    q, k, v, o, do, lse = arrays(d=32)
    big = np.repeat(do, 2, axis=-1)
    e = raises(capi.FLASH_ERROR_BAD_STRIDE, q, k, v, o, big[..., ::2], lse)
    assert "contiguous" in e.message
    raises(capi.FLASH_ERROR_BAD_STRIDE, q, k, v, o, do, lse, dq=np.empty(q.shape[:-1] + (64,), np.float32)[..., ::2])


def test_error_outputs_overlapping_inputs_or_read_only():
    q, k, v, o, do, lse = arrays()
    e = raises(capi.FLASH_ERROR_INVALID_ARGUMENT, q, k, v, o, do, lse, dq=q)
    assert "overlaps" in e.message
    dkv = np.empty((1, 16, 2, 2, 32), np.float32)
    raises(capi.FLASH_ERROR_INVALID_ARGUMENT, q, k, v, o, do, lse, dk=dkv[:, :, 0], dv=dkv[:, :, 1])
    ro = np.empty_like(q)
    ro.flags.writeable = False
    e = raises(capi.FLASH_ERROR_INVALID_ARGUMENT, q, k, v, o, do, lse, dq=ro)
    assert "read-only" in e.message


def test_error_options():
    q, k, v, o, do, lse = arrays()
    raises(capi.FLASH_ERROR_BAD_MASK, q, k, v, o, do, lse, window=(-2, 0))
    raises(capi.FLASH_ERROR_INVALID_ARGUMENT, q, k, v, o, do, lse, softmax_scale=0.0)
    raises(capi.FLASH_ERROR_INVALID_ARGUMENT, q, k, v, o, do, lse, softmax_scale=float("inf"))
    raises(capi.FLASH_ERROR_INVALID_ARGUMENT, q, k, v, o, do, lse, algorithm="nope")
    raises(capi.FLASH_ERROR_INVALID_ARGUMENT, q, k, v, o, do, lse, algorithm=99)
    raises(capi.FLASH_ERROR_INVALID_ARGUMENT, q, k, v, o, do, lse, causal_alignment="middle")
    raises(capi.FLASH_ERROR_BAD_MASK, q, k, v, o, do, lse, block_mask=np.ones((1, 1, 3, 1), bool))
    raises(capi.FLASH_ERROR_BAD_MASK, q, k, v, o, do, lse, block_mask=np.ones((1, 1, 1, 1), bool), block_size=32)


@pytest.mark.parametrize("algorithm", ["sm80", "sm90"])
def test_error_gpu_algorithm_on_host_tensors(algorithm):
    q, k, v, o, do, lse = arrays()
    e = raises(capi.FLASH_ERROR_ALGORITHM_UNAVAILABLE, q, k, v, o, do, lse, algorithm=algorithm)
    assert algorithm in e.message


def test_error_not_an_array():
    q, k, v, o, do, lse = arrays()
    with pytest.raises(TypeError):
        libflash.attention_backward([1.0], k, v, o, do, lse)
    with pytest.raises(TypeError):
        libflash.attention_backward(q, k, v, o, "do", lse)


# ---- Packed variable-length batches (flash.h 1.3): forward and backward ------------------------------------------
# Each sequence of a packed batch is its own attention problem: on the CPU its rows of O, the LSE and dQ, and its
# slot's rows of dK and dV, are bitwise those of a dense call of batch 1 on that sequence alone (the cpu and naive
# algorithms run each sequence exactly as that call), and the dense call itself is checked against the float64
# reference. Rows outside every sequence (and a slot's keys past seqused_k) come back 0 (LSE -inf).
def offsets(lens):
    return np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)


def varlen_case(rng, lens_q, lens_k, hq=4, hkv=2, d=32, dtype="float32", used=None, tail_q=0, tail_k=0):
    """Packed q [total_q + tail_q, hq, d], k, v [total_k + tail_k, hkv, d] (NaN in the tail rows: never read) and the
    offsets of the given lengths."""
    cu_q, cu_k = offsets(lens_q), offsets(lens_k)
    q = randn(rng, (int(cu_q[-1]) + tail_q, hq, d), dtype)
    k = randn(rng, (int(cu_k[-1]) + tail_k, hkv, d), dtype)
    v = randn(rng, (int(cu_k[-1]) + tail_k, hkv, d), dtype)
    for x, n in ((q, cu_q[-1]), (k, cu_k[-1]), (v, cu_k[-1])):
        x[n:] = np.nan
    return q, k, v, cu_q, cu_k


def bits(x):
    x = np.ascontiguousarray(x)
    return x.view(np.uint16 if x.dtype.itemsize == 2 else np.uint32)


def assert_bitwise(got, want, what):
    assert got.shape == want.shape, (what, got.shape, want.shape)
    assert np.array_equal(bits(got), bits(want)), "%s: max |diff| %g" % (
        what, np.nanmax(np.abs(got.astype(np.float64) - want.astype(np.float64))))


def check_varlen(q, k, v, cu_q, cu_k, seqused_k=None, dtype="float32", check_ref=True, **kw):
    """Forward and backward of the packed batch, each sequence against a dense call of it (and that call against the
    float64 reference). Returns (o, lse, dq, dk, dv)."""
    rng = np.random.default_rng(int(cu_q[-1]) * 7 + int(cu_k[-1]))
    vk = dict(cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, seqused_k=seqused_k)
    o, lse = libflash.attention(q, k, v, return_lse=True, **vk, **kw)
    assert o.shape == q.shape and o.dtype == q.dtype and lse.shape == (q.shape[1], q.shape[0])
    do = randn(rng, q.shape, dtype)
    dq, dk, dv = libflash.attention_backward(q, k, v, o, do, lse, **vk, **kw)
    assert dq.shape == q.shape and dk.shape == k.shape and dv.shape == v.shape
    cu_q, cu_k = np.asarray(cu_q, np.int64), np.asarray(cu_k, np.int64)
    for i in range(len(cu_q) - 1):
        rows = slice(cu_q[i], cu_q[i + 1])
        sk = int(cu_k[i + 1] - cu_k[i]) if seqused_k is None else int(seqused_k[i])
        keys, unused = slice(cu_k[i], cu_k[i] + sk), slice(cu_k[i] + sk, cu_k[i + 1])
        assert not dk[unused].any() and not dv[unused].any(), "sequence %d: keys past seqused_k" % i
        if cu_q[i + 1] == cu_q[i]:
            assert not dk[keys].any() and not dv[keys].any(), "sequence %d: keys no query sees" % i
            continue
        if sk == 0:
            assert not o[rows].any() and np.all(np.isneginf(lse[:, rows])) and not dq[rows].any(), i
            continue
        qi, ki, vi = q[None, rows], k[None, keys], v[None, keys]
        od, ld = libflash.attention(qi, ki, vi, return_lse=True, **kw)
        gd = libflash.attention_backward(qi, ki, vi, od, do[None, rows], ld, **kw)
        assert_bitwise(o[rows], od[0], "o of sequence %d" % i)
        assert_bitwise(lse[:, rows], ld[0], "lse of sequence %d" % i)
        for name, g, w, sl in (("dq", dq, gd[0], rows), ("dk", dk, gd[1], keys), ("dv", dv, gd[2], keys)):
            assert_bitwise(g[sl], w[0], "%s of sequence %d" % (name, i))
        if check_ref and dtype == "float32":
            ro, _ = attention_ref(qi, ki, vi, softmax_scale=kw.get("softmax_scale"), **mask_kw(
                {n: x for n, x in kw.items() if n in ("causal", "causal_alignment", "window")}))
            np.testing.assert_allclose(od.astype(np.float64), ro, atol=2e-5, rtol=2e-5)
            run_and_check(qi, ki, vi, softmax_scale=kw.get("softmax_scale"), **{
                n: x for n, x in kw.items() if n in ("causal", "causal_alignment", "window")})
    # Rows outside every sequence: 0 (LSE -inf), as allocated by the binding.
    assert not o[cu_q[-1]:].any() and np.all(np.isneginf(lse[:, cu_q[-1]:])) and not dq[cu_q[-1]:].any()
    assert not dk[cu_k[-1]:].any() and not dv[cu_k[-1]:].any()
    return o, lse, dq, dk, dv


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("causal", [False, True])
def test_varlen_lengths_zero_one_and_odd(dtype, causal):
    rng = np.random.default_rng(72)
    lens_q = [0, 1, 5, 1, 33, 0, 17, 1]
    lens_k = [3, 1, 0, 9, 20, 0, 17, 40]
    q, k, v, cu_q, cu_k = varlen_case(rng, lens_q, lens_k, hq=4, hkv=2, d=40, dtype=dtype)
    check_varlen(q, k, v, cu_q, cu_k, dtype=dtype, causal=causal)


@pytest.mark.parametrize("seed", range(6))
def test_varlen_random_mixes_gqa(seed):
    rng = np.random.default_rng(seed + 720)
    b = int(rng.integers(1, 7))
    lens_q = [int(x) for x in rng.integers(0, 70, b)]
    lens_k = [int(x) for x in rng.integers(0, 70, b)]
    hkv = int(rng.choice([1, 2, 3]))
    hq = hkv * int(rng.choice([1, 2, 4]))
    d = int(rng.choice([8, 32, 64, 72, 128]))
    q, k, v, cu_q, cu_k = varlen_case(rng, lens_q, lens_k, hq=hq, hkv=hkv, d=d)
    check_varlen(q, k, v, cu_q, cu_k, causal=bool(seed % 2))


@pytest.mark.parametrize("alignment", ["bottom_right", "top_left"])
@pytest.mark.parametrize("window", [(-1, -1), (0, 0), (4, -1), (-1, 3), (6, 2)])
def test_varlen_masks_per_sequence(alignment, window):
    rng = np.random.default_rng(len(alignment) * 10 + window[0] + 3 * window[1])
    q, k, v, cu_q, cu_k = varlen_case(rng, [9, 30, 1, 12], [30, 9, 12, 1], hq=2, hkv=1, d=16)
    check_varlen(q, k, v, cu_q, cu_k, causal=True, causal_alignment=alignment, window=window)
    check_varlen(q, k, v, cu_q, cu_k, causal=False, causal_alignment=alignment, window=window)


def test_varlen_seqused_k_and_tail_rows():
    """seqused_k: each sequence uses the first seqused_k[i] keys of its slot (a cache with room to grow); rows past the
    last offsets are neither read (they hold NaN) nor written (they come back 0)."""
    rng = np.random.default_rng(5)
    q, k, v, cu_q, cu_k = varlen_case(rng, [4, 1, 7, 0], [10, 6, 8, 5], hq=4, hkv=1, d=24, tail_q=3, tail_k=5)
    used = np.array([10, 0, 3, 2], np.int32)
    k[cu_k[0] + 10:cu_k[1]] = np.nan  # (a full slot: nothing past it)
    for i, u in enumerate(used):
        k[cu_k[i] + u:cu_k[i + 1]] = np.nan
        v[cu_k[i] + u:cu_k[i + 1]] = np.nan
    check_varlen(q, k, v, cu_q, cu_k, seqused_k=used, causal=True)
    check_varlen(q, k, v, cu_q, cu_k, seqused_k=list(used), window=(2, 1))


def test_varlen_options_and_host_offset_forms():
    """Offsets as lists or int64 arrays (converted), max_seqlen given (a larger bound too) or inferred: the same bits.
    A scale; the naive algorithm (its own rounding: checked per sequence against its own dense calls)."""
    rng = np.random.default_rng(9)
    q, k, v, cu_q, cu_k = varlen_case(rng, [7, 0, 12], [5, 13, 12], hq=2, hkv=2, d=16)
    base = libflash.attention(q, k, v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, causal=True)
    for kw in (dict(cu_seqlens_q=list(cu_q), cu_seqlens_k=cu_k.astype(np.int64)),
               dict(cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_q=12, max_seqlen_k=13),
               dict(cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_q=100, max_seqlen_k=np.int64(200)),
               dict(cu_seqlens_q=cu_q.astype(np.uint16), cu_seqlens_k=tuple(int(x) for x in cu_k))):
        assert_bitwise(libflash.attention(q, k, v, causal=True, **kw), base, str(kw))
        assert libflash.last_algorithm_used() == "cpu"
    check_varlen(q, k, v, cu_q, cu_k, softmax_scale=0.3, causal=True)
    check_varlen(q, k, v, cu_q, cu_k, algorithm="naive", causal=True, check_ref=False)
    assert libflash.last_algorithm_used() == "naive"


def test_varlen_strided_inputs_and_given_outputs():
    """Views (a packed qkv buffer, every other head) are read in place; preallocated, strided outputs are written."""
    rng = np.random.default_rng(11)
    cu = offsets([6, 0, 11, 1])
    qkv = randn(rng, (int(cu[-1]), 3, 4, 16))
    q, k, v = qkv[:, 0], qkv[:, 1, ::2], qkv[:, 2, ::2]
    o_dense, lse_dense, *grads = check_varlen(q, k, v, cu, cu, causal=True)
    out = np.full((int(cu[-1]), 4, 2, 16), np.nan, np.float32)[:, :, 0]
    o, lse = libflash.attention(q, k, v, cu_seqlens_q=cu, cu_seqlens_k=cu, causal=True, out=out, return_lse=True)
    assert o is out
    assert_bitwise(o, o_dense, "o")
    given = [np.full((x.shape[0], x.shape[1], 2, x.shape[2]), np.nan, np.float32)[:, :, 1] for x in (q, k, v)]
    g = libflash.attention_backward(q, k, v, o, np.ones_like(o), lse, cu_seqlens_q=cu, cu_seqlens_k=cu, causal=True,
                                    dq=given[0], dk=given[1], dv=given[2])
    assert all(a is b for a, b in zip(g, given))
    assert np.all(np.isfinite(g[0])) and np.all(np.isfinite(g[1]))


def test_varlen_deterministic_bitwise_across_runs():
    rng = np.random.default_rng(13)
    q, k, v, cu_q, cu_k = varlen_case(rng, [40, 3, 77], [90, 3, 20], hq=8, hkv=2, d=64)
    o, lse = libflash.attention(q, k, v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, return_lse=True)
    do = randn(rng, q.shape)
    runs = [libflash.attention_backward(q, k, v, o, do, lse, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, deterministic=True)
            for _ in range(3)]
    for r in runs[1:]:
        for a, b in zip(runs[0], r):
            assert_bitwise(a, b, "run to run")
