"""attention_with_kvcache() and combine() on the CPU (numpy) against an independent float64 reference written here
from flash.h's definitions (runs in CI: numpy + pytest only); at the end the same calls and the FlashAttention-2
shim flash_attn_with_kvcache on torch tensors (skipped without torch).

Every case draws fresh random inputs. The cache slots no query may see hold NaN (a stray read would show in O; the
append's targets are NaN too), outputs are poisoned with NaN, and after the call the caches must equal the expected
caches bit for bit: the appended rows in their slots, nothing else touched.

Bounds:
  float32: the cpu algorithm accumulates fp32 inputs in double and rounds O and LSE once to fp32
      (libflash/cpu/kvcache_cpu.cpp: "Acc: fp32 for 16-bit inputs, double for fp32 ones"; split partials are merged
      in double). With the reference using the scale the library uses (flash.h's softmax_scale is a C float, so
      1/sqrt(d) rounded to float32), the only error left is that rounding (<= 1/2 ulp) plus double-precision noise
      (~1e-14 here) that may move a value across a rounding boundary: |O - ref| <= 1 ulp_fp32(|ref|) + 1e-12, the
      same for the LSE. (Should the accumulator change, this bound must be re-derived, not widened.)
  float16 (bfloat16 in the torch tests at the end): at most twice the error of a naive implementation in the same dtype
      on the same rounded inputs (S, P and O each rounded to the dtype, the softmax in high precision), the largest
      error over the whole output (and over the finite LSE entries) in both cases.
"""

import inspect
import math
import zlib

import numpy as np
import pytest

import libflash
from libflash import FlashError, capi


# ---- Rounding helpers ---------------------------------------------------------------------------------------------
def rd(x, dtype):
    """x (float64) rounded to `dtype` (round to nearest even) and widened back to float64."""
    x = np.asarray(x, dtype=np.float64)
    if dtype == "float32":
        return x.astype(np.float32).astype(np.float64)
    if dtype == "float16":
        return x.astype(np.float16).astype(np.float64)
    if dtype == "bfloat16":  # through float32 (exact for the values here: float32 inputs or double sums)
        b = x.astype(np.float32).view(np.uint32).astype(np.uint64)
        b = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) << 16
        return b.astype(np.uint32).view(np.float32).astype(np.float64)
    raise ValueError(dtype)


_MANT = {"float32": (23, -126), "float16": (10, -14), "bfloat16": (7, -126)}


def ulp(x, dtype):
    """The spacing of `dtype` at |x| (elementwise; the subnormal spacing below the normal range)."""
    bits, emin = _MANT[dtype]
    _, e = np.frexp(np.abs(np.asarray(x, dtype=np.float64)))  # |x| = m 2^e, 0.5 <= m < 1
    return np.ldexp(1.0, np.maximum(e - 1, emin) - bits)


def float32_scale(d, softmax_scale=None):
    """The scale the library computes with: flash.h's softmax_scale is a C float (0 = 1/sqrt(d), as a float)."""
    return float(np.float32(1.0 / math.sqrt(d) if softmax_scale is None else softmax_scale))


# ---- The reference ------------------------------------------------------------------------------------------------
def slot(i, t, page_size, block_table, batch_idx):
    """(cache row or page, position in it) of key position t of sequence i (flash.h's addressing)."""
    if block_table is not None:
        return int(block_table[i][t // page_size]), t % page_size
    return (int(batch_idx[i]) if batch_idx is not None else i), t


def appended(cache, new, seqlens, page_size, block_table, batch_idx):
    """The cache after flash.h's step 1: row r of sequence i's new keys at position seqlens[i] + r."""
    out = cache.copy()
    if new is None:
        return out
    for i in range(new.shape[0]):
        for r in range(new.shape[1]):
            out[slot(i, int(seqlens[i]) + r, page_size, block_table, batch_idx)] = new[i, r]
    return out


def gather(cache, i, length, page_size, block_table, batch_idx):
    """Sequence i's first `length` keys, [length, heads_kv, d] float64."""
    rows = [cache[slot(i, t, page_size, block_table, batch_idx)] for t in range(length)]
    return np.asarray(rows, dtype=np.float64).reshape((length,) + cache.shape[2:])


def sees(length, seqlen_new, causal, window):
    """Boolean [seqlen_new, length]: query row r sits at position length - seqlen_new + r and sees key j iff j is at
    most that position (causal) and inside the window around it (flash.h, bottom-right per sequence)."""
    left, right = window
    if causal:
        right = 0
    pos = length - seqlen_new + np.arange(seqlen_new)[:, None]
    j = np.arange(length)[None, :]
    ok = np.ones((seqlen_new, length), dtype=bool)
    if left >= 0:
        ok &= j >= pos - left
    if right >= 0:
        ok &= j <= pos + right
    return ok


def kvcache_ref(q, k_cache, v_cache, lengths, page_size, block_table, batch_idx, causal, window, scale,
                naive_dtype=None):
    """(O [b, sn, hq, d], LSE [b, hq, sn]) in float64 from the caches after the append, sequence by sequence.
    naive_dtype: instead, a naive implementation in that dtype (S, P, O rounded to it; LSE from the rounded S)."""
    b, sn, hq, d = q.shape
    hkv = k_cache.shape[2]
    o = np.zeros((b, sn, hq, d))
    lse = np.full((b, hq, sn), -np.inf)
    r = (lambda x: rd(x, naive_dtype)) if naive_dtype else (lambda x: x)
    for i in range(b):
        n = int(lengths[i])
        if n == 0:
            continue
        kk = gather(k_cache, i, n, page_size, block_table, batch_idx)
        vv = gather(v_cache, i, n, page_size, block_table, batch_idx)
        ok = sees(n, sn, causal, window)
        for h in range(hq):
            hk = h // (hq // hkv)
            s = r(np.asarray(q[i, :, h], np.float64) @ kk[:, hk].T * scale)
            s = np.where(ok, s, -np.inf)
            m = s.max(axis=1, keepdims=True)
            m0 = np.where(np.isfinite(m), m, 0.0)
            p = np.exp(s - m0)
            l = p.sum(axis=1, keepdims=True)
            seen = l[:, 0] > 0
            p = r(p / np.where(l > 0, l, 1.0))
            o[i, :, h] = np.where(seen[:, None], r(p @ vv[:, hk]), 0.0)
            with np.errstate(divide="ignore"):
                lse[i, h] = np.where(seen, np.log(np.where(seen, l[:, 0], 1.0)) + m0[:, 0], -np.inf)
    return o, lse


def max_err(got, want):
    """Largest |got - want|; NaN anywhere, or an infinity where the other is finite, fails."""
    got = np.asarray(got, dtype=np.float64)
    assert not np.isnan(got).any(), "NaN in the result"
    inf = np.isinf(want) | np.isinf(got)
    assert np.array_equal(got[inf], want[inf]), "infinities differ"
    return float(np.abs(got[~inf] - want[~inf]).max()) if (~inf).any() else 0.0


def within_ulp(got, want, dtype="float32", ulps=1.0):
    """|got - want| <= ulps * ulp(|want|) + 1e-12 wherever want is finite (max_err has checked the infinities)."""
    fin = np.isfinite(want)
    diff = np.abs(np.asarray(got, np.float64)[fin] - want[fin])
    return bool(np.all(diff <= ulps * ulp(want[fin], dtype) + 1e-12))


def assert_bitwise_equal(got, want, name):
    bits = {2: np.uint16, 4: np.uint32}[got.dtype.itemsize]
    same = got.view(bits) == want.view(bits)
    assert same.all(), "%s differs from the expected cache at %s" % (name, np.argwhere(~same)[:5].tolist())


# ---- Cases --------------------------------------------------------------------------------------------------------
NAN16 = np.float16(np.nan)


def randn(rng, shape, dtype):
    return rng.standard_normal(shape).astype(np.float32).astype(dtype)


def make_case(rng, *, b, sn, hq, hkv, d, dtype, lengths, append, page_size=None, batch_idx=False, extra_rows=2,
              pad_table=False):
    """Inputs for one call. lengths: keys in each sequence's cache before the call. The caches hold random keys at
    the positions each sequence reads, NaN everywhere else; pages (paged) and cache rows (batch_idx) are assigned in
    a random order, with spare ones nobody uses."""
    lengths = np.asarray(lengths)
    total = lengths + (sn if append else 0)
    need = max(int(total.max()), 1)
    max_len = need + int(rng.integers(0, 5))
    case = dict(q=randn(rng, (b, sn, hq, d), dtype), cache_seqlens=lengths.astype(np.int32), page_size=None,
                block_table=None, cache_batch_idx=None)
    if page_size is None:
        rows = b + (extra_rows if batch_idx else 0)
        shape = (rows, max_len, hkv, d)
        if batch_idx:
            case["cache_batch_idx"] = rng.permutation(rows)[:b].astype(np.int32)
    else:
        pages_per_seq = -(-max_len // page_size)
        num_pages = b * pages_per_seq + extra_rows
        table = rng.permutation(num_pages)[:b * pages_per_seq].reshape(b, pages_per_seq).astype(np.int32)
        if pad_table:  # entries past the pages a sequence uses are never read, so never checked
            for i in range(b):
                used = -(-int(total[i]) // page_size)
                table[i, used:] = -1
        case["block_table"] = table
        case["page_size"] = page_size
        shape = (num_pages, page_size, hkv, d)
    k_cache = np.full(shape, np.nan, dtype=dtype)
    v_cache = np.full(shape, np.nan, dtype=dtype)
    for i in range(b):
        for t in range(int(lengths[i])):
            at = slot(i, t, page_size, case["block_table"], case["cache_batch_idx"])
            k_cache[at] = randn(rng, (hkv, d), dtype)
            v_cache[at] = randn(rng, (hkv, d), dtype)
    case.update(k_cache=k_cache, v_cache=v_cache, k=None, v=None)
    if append:
        case["k"] = randn(rng, (b, sn, hkv, d), dtype)
        case["v"] = randn(rng, (b, sn, hkv, d), dtype)
    return case


def run_and_check(case, causal=False, window=(-1, -1), softmax_scale=None, num_splits=0, return_lse=True,
                  index_dtype=np.int32):
    """Runs one call and checks the caches bit for bit, O and LSE against the reference."""
    q, k_cache, v_cache = case["q"], case["k_cache"], case["v_cache"]
    dtype = q.dtype.name
    b, sn, hq, d = q.shape
    ps, table, bidx, seqlens = case["page_size"], case["block_table"], case["cache_batch_idx"], case["cache_seqlens"]
    want_k = appended(k_cache, case["k"], seqlens, ps, table, bidx)
    want_v = appended(v_cache, case["v"], seqlens, ps, table, bidx)
    out = np.full(q.shape, np.nan, dtype=q.dtype)
    cast = (lambda a: None if a is None else a.astype(index_dtype))
    r = libflash.attention_with_kvcache(
        q, k_cache, v_cache, k=case["k"], v=case["v"], cache_seqlens=cast(seqlens), block_table=cast(table),
        cache_batch_idx=cast(bidx), causal=causal, window=window, softmax_scale=softmax_scale, num_splits=num_splits,
        return_lse=return_lse, out=out)
    o, lse = r if return_lse else (r, None)
    assert o is out
    assert libflash.last_algorithm_used() == "cpu"
    if num_splits:
        assert libflash.last_num_splits_used() == num_splits
    assert_bitwise_equal(k_cache, want_k, "k_cache")
    assert_bitwise_equal(v_cache, want_v, "v_cache")

    lengths = seqlens + (sn if case["k"] is not None else 0)
    scale = float32_scale(d, softmax_scale)
    ro, rlse = kvcache_ref(q, want_k, want_v, lengths, ps, table, bidx, causal, window, scale)
    err_o = max_err(o, ro)
    assert o.dtype == q.dtype and o.shape == q.shape
    if lse is not None:
        assert lse.dtype == np.float32 and lse.shape == (b, hq, sn)
        err_lse = max_err(lse, rlse)
    if dtype == "float32":
        assert within_ulp(o, ro), err_o
        if lse is not None:
            assert within_ulp(lse, rlse), err_lse
    else:
        no, nlse = kvcache_ref(q, want_k, want_v, lengths, ps, table, bidx, causal, window, scale, naive_dtype=dtype)
        naive_o = max_err(rd(no, dtype), ro)
        assert err_o <= 2 * naive_o, (err_o, naive_o)
        if lse is not None:
            naive_lse = max_err(rd(nlse, "float32"), rlse)
            assert err_lse <= 2 * naive_lse, (err_lse, naive_lse)
    return o, lse


DTYPES = ["float32", "float16"]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", range(12))
def test_random_cases(dtype, seed):
    """Random everything: layout (contiguous, batch index, paged with page sizes 1/16/64), GQA ratio 1 or 4,
    seqlen_new 1..16, append or not, masks, splits."""
    rng = np.random.default_rng(1000 + seed)
    b = int(rng.integers(1, 4))
    hkv = int(rng.choice([1, 3]))
    hq = hkv * int(rng.choice([1, 4]))
    d = int(rng.choice([8, 40, 72, 128]))
    sn = int(rng.integers(1, 17))
    layout = ["contiguous", "batch_idx", 1, 16, 64][seed % 5]
    lengths = rng.integers(0, 150, size=b)
    lengths[0] = max(lengths[0], 40)  # at least one long sequence
    case = make_case(rng, b=b, sn=sn, hq=hq, hkv=hkv, d=d, dtype=dtype, lengths=lengths, append=bool(seed % 2),
                     page_size=layout if isinstance(layout, int) else None, batch_idx=layout == "batch_idx")
    causal = bool(rng.integers(0, 2))
    window = [(-1, -1), (int(rng.integers(0, 60)), -1), (int(rng.integers(0, 30)), int(rng.integers(0, 5)))][seed % 3]
    run_and_check(case, causal=causal, window=window, num_splits=int(rng.choice([0, 1, 3])))


@pytest.mark.parametrize("page_size", [1, 16, 64])
@pytest.mark.parametrize("append", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
def test_paged(page_size, append, dtype):
    rng = np.random.default_rng(page_size * 10 + append)
    case = make_case(rng, b=3, sn=5, hq=4, hkv=1, d=40, dtype=dtype, lengths=[0, 77, 130], append=append,
                     page_size=page_size)
    run_and_check(case, causal=True)


def test_paged_table_padding_is_never_read():
    rng = np.random.default_rng(7)
    case = make_case(rng, b=3, sn=3, hq=3, hkv=3, d=24, dtype="float32", lengths=[5, 40, 17], append=True,
                     page_size=16, pad_table=True, extra_rows=5)
    assert (case["block_table"] == -1).any()
    run_and_check(case)


@pytest.mark.parametrize("append", [False, True])
def test_cache_batch_idx(append):
    rng = np.random.default_rng(11 + append)
    case = make_case(rng, b=3, sn=7, hq=4, hkv=4, d=72, dtype="float32", lengths=[9, 60, 33], append=append,
                     batch_idx=True, extra_rows=4)
    assert not np.array_equal(case["cache_batch_idx"], np.arange(3))
    run_and_check(case, causal=True)


@pytest.mark.parametrize("sn", [1, 2, 5, 9, 16])
@pytest.mark.parametrize("ratio", [1, 4])
def test_seqlen_new_and_gqa(sn, ratio):
    rng = np.random.default_rng(100 * sn + ratio)
    case = make_case(rng, b=2, sn=sn, hq=3 * ratio, hkv=3, d=64, dtype="float16", lengths=[31, 97], append=True)
    run_and_check(case, causal=True)


@pytest.mark.parametrize("num_splits", [1, 3])
@pytest.mark.parametrize("dtype", DTYPES)
def test_num_splits(num_splits, dtype):
    rng = np.random.default_rng(num_splits + len(dtype))
    case = make_case(rng, b=2, sn=3, hq=8, hkv=2, d=128, dtype=dtype, lengths=[211, 5], append=True, page_size=16)
    run_and_check(case, num_splits=num_splits, causal=True, window=(100, -1))


@pytest.mark.parametrize("causal,window", [(False, (-1, -1)), (True, (-1, -1)), (False, (3, 0)), (True, (10, -1)),
                                           (False, (0, 0)), (False, (2, 2)), (False, (-1, 1)), (True, (0, 5))])
def test_masks(causal, window):
    rng = np.random.default_rng([int(causal), window[0] + 1, window[1] + 1])
    # Sequence 0 has fewer keys than new queries in view: its first rows see no key (O = 0, LSE = -inf) under
    # causal masking; sequence 2 sees no key at all.
    case = make_case(rng, b=3, sn=6, hq=2, hkv=1, d=16, dtype="float32", lengths=[0, 45, 0], append=False,
                     page_size=16)
    case["cache_seqlens"] = np.array([3, 45, 0], np.int32)
    for t in range(3):
        at = slot(0, t, 16, case["block_table"], None)
        case["k_cache"][at] = randn(rng, (1, 16), np.float32)
        case["v_cache"][at] = randn(rng, (1, 16), np.float32)
    o, lse = run_and_check(case, causal=causal, window=window)
    assert np.all(o[2] == 0) and np.all(np.isneginf(lse[2]))
    if causal:
        assert np.all(o[0, :3] == 0) and np.all(np.isneginf(lse[0, :, :3]))


def test_softmax_scale_and_no_lse():
    rng = np.random.default_rng(5)
    case = make_case(rng, b=2, sn=4, hq=2, hkv=2, d=32, dtype="float32", lengths=[20, 3], append=True)
    run_and_check(case, softmax_scale=0.3, return_lse=False)


def test_int64_index_arrays_are_converted():
    rng = np.random.default_rng(6)
    case = make_case(rng, b=2, sn=2, hq=2, hkv=1, d=16, dtype="float32", lengths=[10, 30], append=True, page_size=16)
    run_and_check(case, index_dtype=np.int64)
    case = make_case(rng, b=2, sn=2, hq=2, hkv=1, d=16, dtype="float32", lengths=[10, 30], append=True,
                     batch_idx=True)
    run_and_check(case, index_dtype=np.uint16)


def test_scalar_cache_seqlens_is_broadcast():
    rng = np.random.default_rng(8)
    q = randn(rng, (3, 2, 2, 16), np.float32)
    kc, vc = randn(rng, (3, 20, 2, 16), np.float32), randn(rng, (3, 20, 2, 16), np.float32)
    a = libflash.attention_with_kvcache(q, kc, vc, cache_seqlens=11)
    b = libflash.attention_with_kvcache(q, kc, vc, cache_seqlens=np.int64(11))
    c = libflash.attention_with_kvcache(q, kc, vc, cache_seqlens=[11, 11, 11])
    np.testing.assert_array_equal(a, c)
    np.testing.assert_array_equal(b, c)


def test_strided_views():
    """A [b, h, s, d]-stored cache viewed as [b, s, h, d], q a slice of heads, k_new/v_new packed: read and written
    in place through their strides."""
    rng = np.random.default_rng(9)
    b, sn, hkv, d, max_len = 2, 3, 2, 32, 50
    kc = np.full((b, hkv, max_len, d), np.nan, np.float32)
    vc = np.full((b, hkv, max_len, d), np.nan, np.float32)
    lengths = np.array([12, 40], np.int32)
    for i in range(b):
        kc[i, :, :lengths[i]] = randn(rng, (hkv, lengths[i], d), np.float32)
        vc[i, :, :lengths[i]] = randn(rng, (hkv, lengths[i], d), np.float32)
    k_view, v_view = kc.transpose(0, 2, 1, 3), vc.transpose(0, 2, 1, 3)
    q = randn(rng, (b, sn, 8, d), np.float32)[:, :, 1::2]
    kv = randn(rng, (b, sn, 2, hkv, d), np.float32)
    want_k = appended(k_view, kv[:, :, 0], lengths, None, None, None)
    want_v = appended(v_view, kv[:, :, 1], lengths, None, None, None)
    o, lse = libflash.attention_with_kvcache(q, k_view, v_view, k=kv[:, :, 0], v=kv[:, :, 1], cache_seqlens=lengths,
                                             causal=True, return_lse=True)
    assert_bitwise_equal(k_view, want_k, "k_cache")
    assert_bitwise_equal(v_view, want_v, "v_cache")
    ro, rlse = kvcache_ref(q, want_k, want_v, lengths + sn, None, None, None, True, (-1, -1), float32_scale(d))
    assert np.all(np.abs(o - ro) <= ulp(ro, "float32") + 1e-12)
    assert np.all(np.abs(lse - rlse) <= ulp(rlse, "float32") + 1e-12)


def test_decode_loop_matches_one_shot():
    """Appending one token at a time (as a decoder does) gives the cache and outputs of attention over the whole
    sequence: each step equals the last row of causal attention over the keys so far."""
    rng = np.random.default_rng(10)
    b, hq, hkv, d, steps, prompt = 2, 4, 2, 16, 6, 9
    kc = np.full((b, prompt + steps, hkv, d), np.nan, np.float32)
    vc = kc.copy()
    kc[:, :prompt] = randn(rng, (b, prompt, hkv, d), np.float32)
    vc[:, :prompt] = randn(rng, (b, prompt, hkv, d), np.float32)
    lens = np.full(b, prompt, np.int32)
    for _ in range(steps):
        q = randn(rng, (b, 1, hq, d), np.float32)
        kn, vn = randn(rng, (b, 1, hkv, d), np.float32), randn(rng, (b, 1, hkv, d), np.float32)
        o = libflash.attention_with_kvcache(q, kc, vc, k=kn, v=vn, cache_seqlens=lens, causal=True)
        lens += 1
        full = libflash.attention(q, kc[:, :lens[0]], vc[:, :lens[0]], causal=True)
        ro, _ = kvcache_ref(q, kc, vc, lens, None, None, None, True, (-1, -1), float32_scale(d))
        assert np.all(np.abs(o - ro) <= ulp(ro, "float32") + 1e-12)
        assert np.all(np.abs(full - ro) <= 2e-5)  # flash_fwd's own (fp32-accumulating) path, test_cpu.py's bound
    assert np.isfinite(kc).all() and np.isfinite(vc).all()


def test_workspace_query_and_caller_workspace():
    rng = np.random.default_rng(12)
    case = make_case(rng, b=1, sn=2, hq=2, hkv=1, d=32, dtype="float32", lengths=[300], append=False)
    args = (case["q"], case["k_cache"], case["v_cache"])
    kw = dict(cache_seqlens=case["cache_seqlens"], num_splits=3)
    n = libflash.kvcache_workspace_size(*args, **kw)
    assert n > 0
    assert libflash.kvcache_workspace_size(*args, cache_seqlens=case["cache_seqlens"], num_splits=1) == 0
    ws = np.full(n // 8 + 1, np.nan)  # float64: 8-byte aligned
    got = libflash.attention_with_kvcache(*args, workspace=ws, **kw)
    want = libflash.attention_with_kvcache(*args, **kw)
    np.testing.assert_array_equal(got, want)
    e = refused(capi.FLASH_ERROR_WORKSPACE_TOO_SMALL, "workspace_size is 8 bytes but this call needs",
                libflash.attention_with_kvcache, *args, workspace=np.zeros(1), **kw)
    assert "flash_fwd_kvcache_workspace_size" in e.message


# ---- Refusals -------------------------------------------------------------------------------------------------------
def refused(code, needle, fn, *a, **kw):
    with pytest.raises(FlashError) as ei:
        fn(*a, **kw)
    e = ei.value
    assert e.status == code, str(e)
    assert e.status_name == capi.flash_status_string(code).decode()
    assert needle in e.message, e.message
    return e


def small(rng=None, paged=False, append=True):
    rng = rng or np.random.default_rng(0)
    return make_case(rng, b=2, sn=3, hq=4, hkv=2, d=32, dtype="float32", lengths=[5, 9], append=append,
                     page_size=4 if paged else None)


def call(case, **over):
    kw = dict(k=case["k"], v=case["v"], cache_seqlens=case["cache_seqlens"], block_table=case["block_table"],
              cache_batch_idx=case["cache_batch_idx"])
    kw.update(over)
    return libflash.attention_with_kvcache(case["q"], case["k_cache"], case["v_cache"], **kw)


def untouched(case, fn):
    """fn() must raise FlashError without writing either cache; returns the error."""
    k0, v0 = case["k_cache"].copy(), case["v_cache"].copy()
    with pytest.raises(FlashError) as ei:
        fn()
    assert_bitwise_equal(case["k_cache"], k0, "k_cache")
    assert_bitwise_equal(case["v_cache"], v0, "v_cache")
    return ei.value


@pytest.mark.parametrize("bad", [np.array([5.0, 9.0]), np.array([True, False]), np.array(["5", "9"])])
def test_index_dtype_refused(bad):
    case = small()
    e = refused(capi.FLASH_ERROR_UNSUPPORTED_DTYPE, "cache_seqlens has dtype", call, case, cache_seqlens=bad)
    assert "int32" in e.message
    refused(capi.FLASH_ERROR_UNSUPPORTED_DTYPE, "cache_seqlens has dtype float64", call, case, cache_seqlens=2.5)
    paged = small(paged=True)
    refused(capi.FLASH_ERROR_UNSUPPORTED_DTYPE, "block_table has dtype float32", call, paged,
            block_table=paged["block_table"].astype(np.float32))
    refused(capi.FLASH_ERROR_UNSUPPORTED_DTYPE, "cache_batch_idx has dtype bool", call, case,
            cache_batch_idx=np.array([True, False]))


def test_index_values_out_of_int32_refused():
    case = small(paged=True)
    e = untouched(case, lambda: call(case, cache_seqlens=np.array([5, 2 ** 32 + 5], np.int64)))
    assert e.status == capi.FLASH_ERROR_INVALID_ARGUMENT
    assert e.message == "cache_seqlens holds 4294967301, which does not fit int32"
    table = case["block_table"].astype(np.int64)
    table[1, 0] -= 2 ** 32
    refused(capi.FLASH_ERROR_INVALID_ARGUMENT, "block_table holds %d" % table[1, 0], call, case, block_table=table)
    refused(capi.FLASH_ERROR_INVALID_ARGUMENT, "cache_seqlens holds 4294967296, which does not fit int32", call, case,
            cache_seqlens=2 ** 32)


def test_index_values_out_of_range_refused_by_the_library():
    case = small()
    max_len = case["k_cache"].shape[1]
    e = untouched(case, lambda: call(case, cache_seqlens=np.array([5, max_len - 1], np.int32)))
    assert e.status == capi.FLASH_ERROR_INVALID_ARGUMENT
    assert e.message == ("cache_seqlens[1] is %d: appending seqlen_new 3 keys needs %d positions but k_cache.shape[1] "
                         "(max_len) is %d" % (max_len - 1, max_len + 2, max_len))
    e = untouched(case, lambda: call(case, cache_seqlens=np.array([-1, 2], np.int32)))
    assert e.message == "cache_seqlens[0] is -1 but must be >= 0"
    e = untouched(case, lambda: call(case, cache_batch_idx=np.array([0, 2], np.int32)))
    assert e.message == "cache_batch_idx[1] is 2 but must be in [0, 2) (k_cache.shape[0], batch_cache)"
    e = untouched(case, lambda: call(case, cache_batch_idx=np.array([1, 1], np.int32),
                                     cache_seqlens=np.array([5, 5], np.int32)))
    assert e.message == ("k_new: sequences 0 and 1 append to the same cache slot (row 1, position 5); check "
                         "cache_batch_idx")
    e = untouched(case, lambda: call(case, cache_batch_idx=np.array([1, 1], np.int32)))
    assert e.message == ("k_new: sequence 0 appends to a cache slot (row 1, position 5) that sequence 1 reads as one "
                         "of its cache_seqlens[1] = 9 cached keys; check cache_batch_idx")
    paged = small(paged=True)
    num_pages = paged["k_cache"].shape[0]
    table = paged["block_table"].copy()
    table[1, 1] = num_pages
    e = untouched(paged, lambda: call(paged, block_table=table))
    assert e.message == "block_table[1,1] is %d but must be in [0, %d) (k_cache.shape[0], num_pages)" % (num_pages,
                                                                                                      num_pages)
    table = paged["block_table"].copy()
    table[1, 0] = table[0, 1]  # sequence 0 appends at positions 5..7: page table[0, 1]; sequence 1 reads it
    e = untouched(paged, lambda: call(paged, block_table=table))
    assert "append" in e.message and "check block_table" in e.message, e.message


def test_index_shapes_refused():
    case = small(paged=True)
    refused(capi.FLASH_ERROR_BAD_SHAPE, "cache_seqlens has shape (3,) but must be (2,)", call, case,
            cache_seqlens=np.array([1, 2, 3], np.int32))
    refused(capi.FLASH_ERROR_BAD_SHAPE, "cache_seqlens has shape (1, 2) but must be (2,)", call, case,
            cache_seqlens=np.array([[1, 2]], np.int32))
    refused(capi.FLASH_ERROR_BAD_SHAPE, "block_table has shape (1, %d) but must be (2, max_pages_per_seq)"
            % case["block_table"].shape[1], call, case, block_table=case["block_table"][:1])
    refused(capi.FLASH_ERROR_BAD_SHAPE, "block_table has shape (%d,)" % case["block_table"].size, call, case,
            block_table=case["block_table"].ravel())
    contiguous = small()
    refused(capi.FLASH_ERROR_BAD_SHAPE, "cache_batch_idx has shape (1,) but must be (2,)", call, contiguous,
            cache_batch_idx=np.array([0], np.int32))
    refused(capi.FLASH_ERROR_NULL_POINTER, "cache_seqlens is required", call, contiguous, cache_seqlens=None)


def test_mismatched_tensors_refused_by_the_library():
    case = small()
    rng = np.random.default_rng(1)
    e = refused(capi.FLASH_ERROR_BAD_SHAPE, "", call, case, k=randn(rng, (2, 3, 2, 16), np.float32),
                v=randn(rng, (2, 3, 2, 16), np.float32))
    assert e.message == "k_new.shape[3] is 16 but q.shape[3] is 32"
    e = refused(capi.FLASH_ERROR_BAD_SHAPE, "", call, case, k=randn(rng, (2, 4, 2, 32), np.float32),
                v=randn(rng, (2, 4, 2, 32), np.float32))
    assert e.message == "k_new.shape[1] is 4 but q.shape[1] is 3"
    e = refused(capi.FLASH_ERROR_BAD_SHAPE, "", libflash.attention_with_kvcache, case["q"], case["k_cache"],
                case["v_cache"][:, :-1], cache_seqlens=[1, 1])
    assert e.message.startswith("v_cache.shape[1] is")
    e = refused(capi.FLASH_ERROR_BAD_SHAPE, "", libflash.attention_with_kvcache, case["q"][:, :, :3],
                case["k_cache"], case["v_cache"], cache_seqlens=[1, 1])
    assert e.message == "q.shape[2] (heads_q) is 3, not a multiple of k_cache.shape[2] (heads_kv) 2"
    e = refused(capi.FLASH_ERROR_DTYPE_MISMATCH, "", libflash.attention_with_kvcache, case["q"],
                case["k_cache"].astype(np.float16), case["v_cache"], cache_seqlens=[1, 1])
    assert e.message == "k_cache.dtype is fp16 but q.dtype is fp32"
    e = refused(capi.FLASH_ERROR_NULL_POINTER, "", call, case, v=None)
    assert e.message == "v_new.data is NULL but k_new.data is set (give both or neither)"
    e = refused(capi.FLASH_ERROR_INVALID_ARGUMENT, "", call, small(paged=True), cache_batch_idx=[0, 1])
    assert e.message.startswith("cache_batch_idx is set but block_table is too")
    e = refused(capi.FLASH_ERROR_BAD_SHAPE, "", libflash.attention_with_kvcache, case["q"], case["k_cache"][:1],
                case["v_cache"][:1], cache_seqlens=[1, 1])
    assert e.message == "k_cache.shape[0] (batch_cache) is 1 but q.shape[0] (batch) is 2 and cache_batch_idx is NULL"
    refused(capi.FLASH_ERROR_BAD_SHAPE, "", libflash.attention_with_kvcache, case["q"][0], case["k_cache"],
            case["v_cache"], cache_seqlens=[1, 1])
    e = refused(capi.FLASH_ERROR_DTYPE_MISMATCH, "", call, case, out=np.empty(case["q"].shape, np.float16))
    assert e.message == "o.dtype is fp16 but q.dtype is fp32"


def test_options_refused():
    case = small()
    e = refused(capi.FLASH_ERROR_INVALID_ARGUMENT, "num_splits is 300", call, case, num_splits=300)
    assert e.message == "num_splits is 300 but must be in [0, 256] (0 = choose)"
    refused(capi.FLASH_ERROR_INVALID_ARGUMENT, "num_splits is 4294967299, which does not fit", call, case,
            num_splits=2 ** 32 + 3)
    refused(capi.FLASH_ERROR_BAD_MASK, "window_left is 1099511627776, which does not fit", call, case,
            window=(2 ** 40, 0))
    refused(capi.FLASH_ERROR_BAD_MASK, "window_left is -2 but must be >= -1", call, case, window=(-2, 0))
    refused(capi.FLASH_ERROR_UNSUPPORTED, "algorithm naive does not support flash_fwd_kvcache", call, case,
            algorithm="naive")
    refused(capi.FLASH_ERROR_ALGORITHM_UNAVAILABLE, "algorithm sm80 does not run on the CPU", call, case,
            algorithm="sm80")
    refused(capi.FLASH_ERROR_INVALID_ARGUMENT, "softmax_scale is 0", call, case, softmax_scale=0.0)
    refused(capi.FLASH_ERROR_UNSUPPORTED_HEAD_DIM, "head_dim (q.shape[3]) is 12", libflash.attention_with_kvcache,
            case["q"][..., :12], case["k_cache"][..., :12], case["v_cache"][..., :12], cache_seqlens=[1, 1])


def test_read_only_cache_refused_when_appending():
    case = small()
    case["k_cache"].flags.writeable = False
    refused(capi.FLASH_ERROR_INVALID_ARGUMENT, "k_cache is a read-only numpy array, but k and v are appended", call,
            case)
    call(case, k=None, v=None)  # reading a read-only cache is fine


def test_overlapping_output_refused():
    case = small(append=False)
    refused(capi.FLASH_ERROR_INVALID_ARGUMENT, "o overlaps q in memory", call, case, out=case["q"])


# ---- combine ----------------------------------------------------------------------------------------------------
def combine_ref(o_parts, lse_parts):
    """flash.h's formula in float64: M = max LSE_p, w_p = exp(LSE_p - M), O = sum w_p O_p / sum w_p,
    LSE = M + log sum w_p; a part at -inf contributes nothing (its O is not looked at); all -inf: O = 0, -inf."""
    lse = np.stack([np.asarray(x, np.float64) for x in lse_parts])  # [P, b, h, s]
    o = np.stack([np.asarray(x, np.float64) for x in o_parts])  # [P, b, s, h, d]
    m = lse.max(axis=0)
    m0 = np.where(np.isfinite(m), m, 0.0)
    w = np.where(np.isneginf(lse), 0.0, np.exp(lse - m0))  # [P, b, h, s]
    wo = w.transpose(0, 1, 3, 2)[..., None]  # [P, b, s, h, 1]
    total = w.sum(axis=0)
    contrib = np.where(wo > 0, wo * np.nan_to_num(o, nan=0.0), 0.0).sum(axis=0)
    t = total.transpose(0, 2, 1)[..., None]
    out = np.where(t > 0, contrib / np.where(t > 0, t, 1.0), 0.0)
    with np.errstate(divide="ignore"):
        out_lse = np.where(total > 0, m0 + np.log(np.where(total > 0, total, 1.0)), -np.inf)
    return out, out_lse


def split_keys(rng, sk, parts):
    """A random partition of the key indices 0..sk-1 into `parts` non-empty sets (not contiguous ranges)."""
    perm = rng.permutation(sk)
    cuts = np.sort(rng.choice(np.arange(1, sk), size=parts - 1, replace=False))
    return [np.sort(x) for x in np.split(perm, cuts)]


def attention64(q, k, v, ok, scale):
    """O, LSE float64 of q [b, sq, h, d] over k, v [b, sk, h, d] with a boolean visibility [sq, sk]."""
    s = np.einsum("bqhd,bkhd->bhqk", q.astype(np.float64), k.astype(np.float64)) * scale
    s = np.where(ok[None, None], s, -np.inf)
    m = s.max(axis=-1, keepdims=True)
    m0 = np.where(np.isfinite(m), m, 0.0)
    p = np.exp(s - m0)
    l = p.sum(axis=-1, keepdims=True)
    o = np.einsum("bhqk,bkhd->bqhd", p / np.where(l > 0, l, 1.0), v.astype(np.float64))
    with np.errstate(divide="ignore"):
        lse = np.where(l[..., 0] > 0, np.log(np.where(l[..., 0] > 0, l[..., 0], 1.0)) + m0[..., 0], -np.inf)
    return o, lse


@pytest.mark.parametrize("parts", [1, 2, 3, 5])
@pytest.mark.parametrize("seed", range(3))
def test_combine_equals_one_shot(parts, seed):
    """Partial results over a random partition of the keys (libflash.attention on each set), combined, against
    attention over all keys in float64.

    Bound: each part's O and LSE are within 1 ulp_fp32 of exact (fp32 inputs accumulate in double, see the module
    docstring). A relative error e in a weight w_p = exp(LSE_p - M) comes from absolute LSE errors of at most
    2 ulp(Lambda), Lambda = max |LSE|, so the normalised weights move by at most ~4 ulp(Lambda) in total and O by
    that times max |O_p|; the O_p errors add max ulp(|O_p|); the final rounding 1 ulp(|O|)."""
    rng = np.random.default_rng(50 * parts + seed)
    b, sq, sk, h, d = 2, 7, 61, 3, 24
    q, k, v = (randn(rng, (b, n, h, d), np.float32) for n in (sq, sk, sk))
    sets = split_keys(rng, sk, parts)
    o_parts, lse_parts = [], []
    for keys in sets:
        o, lse = libflash.attention(q, k[:, keys], v[:, keys], return_lse=True)
        o_parts.append(o)
        lse_parts.append(lse)
    out, lse = libflash.combine(o_parts, lse_parts, return_lse=True)
    ro, rlse = attention64(q, k, v, np.ones((sq, sk), bool), float32_scale(d))
    big_o = max(np.abs(x).max() for x in o_parts)
    lam = max(np.abs(x).max() for x in lse_parts)
    bound = ulp(big_o, "float32") * (1 + 4 * float(ulp(lam, "float32")) / float(ulp(1.0, "float32"))) \
        + ulp(ro, "float32") + 1e-12
    assert out.dtype == np.float32 and out.shape == q.shape
    assert np.all(np.abs(out - ro) <= bound), np.abs(out - ro).max()
    assert np.all(np.abs(lse - rlse) <= 3 * ulp(lam, "float32") + 1e-12)
    # One stacked array gives the same bits as the list.
    o2, lse2 = libflash.combine(np.stack(o_parts), np.stack(lse_parts), return_lse=True)
    np.testing.assert_array_equal(o2, out)
    np.testing.assert_array_equal(lse2, lse)


def test_combine_rows_without_keys():
    """Causal attention split into two key ranges: early rows see no key of the second range (LSE -inf there; its O
    is NaN-poisoned and must not be read), and rows of a fully masked batch see no key at all (O = 0, LSE = -inf)."""
    rng = np.random.default_rng(3)
    b, sq, sk, h, d = 2, 9, 9, 2, 16
    q, k, v = (randn(rng, (b, n, h, d), np.float32) for n in (sq, sk, sk))
    ok = sees(sk, sq, True, (-1, -1))
    scale = float32_scale(d)
    cut = 4
    o_parts, lse_parts = [], []
    for lo, hi in ((0, cut), (cut, sk)):
        part_ok = ok.copy()
        part_ok[:, :lo] = False
        part_ok[:, hi:] = False
        o, lse = attention64(q, k, v, part_ok, scale)
        o = o.astype(np.float32)
        lse = lse.astype(np.float32)
        o[:, :, :][np.isneginf(lse).transpose(0, 2, 1)] = np.nan  # rows of a part that saw no key: never read
        lse[1] = -np.inf  # batch 1: no part saw a key
        o_parts.append(o)
        lse_parts.append(lse)
    assert np.isnan(o_parts[1]).any()
    out, lse = libflash.combine(o_parts, lse_parts, return_lse=True)
    ro, rlse = combine_ref(o_parts, lse_parts)
    assert np.all(out[1] == 0) and np.all(np.isneginf(lse[1]))
    max_err(out, ro), max_err(lse, rlse)  # no NaN, the same infinities
    assert within_rounding(out, ro, "float32") and within_rounding(lse, rlse, "float32")
    # Against attention over all keys (batch 0): the parts were rounded to fp32 once, the merge once more.
    full_o, full_lse = attention64(q, k, v, ok, scale)
    assert np.all(np.abs(out[0] - full_o[0]) <= 3 * ulp(np.abs(full_o[0]).max(), "float32"))


def within_rounding(got, want, dtype):
    """A double result stored to `dtype`: within half an ulp of it (finite entries). 16-bit outputs are stored
    through float32 (libflash/cpu/convert.h: the store takes a float), so they are rounded twice: half an ulp of
    the dtype plus half an ulp of float32."""
    fin = np.isfinite(want)
    bound = ulp(want[fin], dtype) / 2 + (ulp(want[fin], "float32") / 2 if dtype != "float32" else 0) + 1e-12
    return bool(np.all(np.abs(np.asarray(got, np.float64)[fin] - want[fin]) <= bound))


@pytest.mark.parametrize("part_dtype,out_dtype", [("float16", "float16"), ("float32", "float16"),
                                                  ("float16", "float32")])
def test_combine_dtypes_round_once(part_dtype, out_dtype):
    """Computed in double, O stored once to its dtype (through float32 for 16-bit outputs)."""
    rng = np.random.default_rng(4)
    b, s, h, d = 3, 5, 2, 40
    o_parts = [randn(rng, (b, s, h, d), part_dtype) for _ in range(3)]
    lse_parts = [(rng.standard_normal((b, h, s)) * 3).astype(np.float32) for _ in range(3)]
    out = np.full((b, s, h, d), np.nan, out_dtype)
    r = libflash.combine(o_parts, lse_parts, out=out)
    assert r is out
    ro, _ = combine_ref(o_parts, lse_parts)
    assert within_rounding(out, ro, out_dtype)
    # The parts' dtype by default.
    assert libflash.combine(o_parts, lse_parts).dtype == np.dtype(part_dtype)


def test_combine_strided_parts():
    rng = np.random.default_rng(5)
    big = randn(rng, (2, 4, 6, 3, 32), np.float32)
    o_parts = [big[:, :, i].transpose(0, 2, 1, 3) for i in range(2)]  # [b, s=3, h=4, d] views, [b, h, s, d] in memory
    lse_parts = [rng.standard_normal((2, 3, 4)).astype(np.float32).transpose(0, 2, 1) for _ in range(2)]  # [b, h, s]
    assert not o_parts[0].flags.c_contiguous and not lse_parts[0].flags.c_contiguous
    out = libflash.combine(o_parts, lse_parts)
    ro, _ = combine_ref(o_parts, lse_parts)
    assert within_rounding(out, ro, "float32")


def test_combine_refusals():
    rng = np.random.default_rng(6)
    o = [randn(rng, (1, 3, 2, 16), np.float32) for _ in range(2)]
    lse = [rng.standard_normal((1, 2, 3)).astype(np.float32) for _ in range(2)]
    refused(capi.FLASH_ERROR_INVALID_ARGUMENT, "o_parts has 2 parts but lse_parts has 1", libflash.combine, o, lse[:1])
    refused(capi.FLASH_ERROR_INVALID_ARGUMENT, "o_parts is empty", libflash.combine, [], [])
    e = refused(capi.FLASH_ERROR_BAD_SHAPE, "", libflash.combine, [o[0], o[1][:, :2]], lse)
    assert e.message == "o_parts[1].shape[1] is 2 but o.shape[1] is 3"
    e = refused(capi.FLASH_ERROR_BAD_SHAPE, "", libflash.combine, o, [lse[0], lse[1][:, :1]])
    assert e.message == "lse_parts[1].shape[1] is 1 but o.shape[2] is 2"
    e = refused(capi.FLASH_ERROR_DTYPE_MISMATCH, "", libflash.combine, [o[0], o[1].astype(np.float16)], lse)
    assert e.message == "o_parts[1].dtype is fp16 but o_parts[0].dtype is fp32"
    e = refused(capi.FLASH_ERROR_DTYPE_MISMATCH, "", libflash.combine, o, [lse[0], lse[1].astype(np.float16)])
    assert e.message == "lse_parts[1].dtype is fp16 but must be fp32"
    refused(capi.FLASH_ERROR_UNSUPPORTED_DTYPE, "lse_parts[0].dtype is float64", libflash.combine, o,
            [lse[0].astype(np.float64), lse[1]])
    refused(capi.FLASH_ERROR_BAD_SHAPE, "stacked parts must have 5", libflash.combine, o[0], lse)
    refused(capi.FLASH_ERROR_BAD_SHAPE, "o_parts[0] has 3 dimensions", libflash.combine, [o[0][0]], lse[:1])
    e = refused(capi.FLASH_ERROR_INVALID_ARGUMENT, "", libflash.combine, o, lse, out=o[0])
    assert e.message == "o overlaps o_parts[0] in memory"
    with pytest.raises(TypeError):
        libflash.combine(3, lse)


# ==== torch tensors (was test_kvcache_torch.py) ===================================================================
# attention_with_kvcache(), combine() and the FlashAttention-2 shim flash_attn_with_kvcache on torch tensors.
#
# CPU tensors (float32, float16, bfloat16) run everywhere torch is installed, against the float64 reference and the
# bounds of the numpy tests above (float32: 1 ulp; 16-bit: twice a naive same-dtype implementation's error). The CUDA
# tests need a GPU and a CUDA build; until libflash's GPU kernels for these calls exist the library refuses CUDA tensors
# with FLASH_ERROR_ALGORITHM_UNAVAILABLE, which they accept in place of a result.

try:
    import torch
except ImportError:  # the numpy tests above run without it
    torch = None
if torch is not None:
    from libflash.torch import flash_attn_with_kvcache

needs_torch = pytest.mark.skipif(torch is None, reason="needs torch")
TORCH_DTYPES = ["float32", "float16", "bfloat16"]


def tdtype(name):
    return getattr(torch, name)


def _cuda_ok():
    try:
        return torch is not None and torch.cuda.is_available() and libflash.device_count("cuda") > 0
    except Exception:
        return False


gpu = pytest.mark.skipif(not _cuda_ok(), reason="no torch with a CUDA device, or a CPU-only libflash")


def to_torch(case, dtype, device="cpu", index_dtype=None):
    """The numpy case (float32) as torch tensors of `dtype` on `device` (values rounded to it; NaN stays NaN)."""
    index_dtype = index_dtype or torch.int32
    t = {}
    for name in ("q", "k_cache", "v_cache", "k", "v"):
        x = case[name]
        t[name] = None if x is None else torch.from_numpy(x).to(device=device, dtype=dtype)
    for name in ("cache_seqlens", "block_table", "cache_batch_idx"):
        x = case[name]
        t[name] = None if x is None else torch.from_numpy(x.astype(np.int64)).to(device=device, dtype=index_dtype)
    t["page_size"] = case["page_size"]
    return t


def expected_caches(t):
    """The caches after the append, made by torch element copies (the same bits the library must write)."""
    want_k, want_v = t["k_cache"].clone(), t["v_cache"].clone()
    if t["k"] is not None:
        seqlens = t["cache_seqlens"].cpu().numpy()
        table = None if t["block_table"] is None else t["block_table"].cpu().numpy()
        bidx = None if t["cache_batch_idx"] is None else t["cache_batch_idx"].cpu().numpy()
        for i in range(t["k"].shape[0]):
            for r in range(t["k"].shape[1]):
                at = slot(i, int(seqlens[i]) + r, t["page_size"], table, bidx)
                want_k[at] = t["k"][i, r]
                want_v[at] = t["v"][i, r]
    return want_k, want_v


def same_bits(a, b):
    bits = torch.int16 if a.element_size() == 2 else torch.int32
    return torch.equal(a.view(bits), b.view(bits))


def f64(x):
    return x.detach().cpu().double().numpy()


def check_result(t, o, lse, dtype, causal=False, window=(-1, -1), softmax_scale=None):
    """O and LSE against the reference from the expected caches (the bounds of test_kvcache.py)."""
    want_k, want_v = expected_caches(t)
    q = f64(t["q"])
    b, sn, hq, d = q.shape
    seqlens = t["cache_seqlens"].cpu().numpy().astype(np.int64)
    lengths = seqlens + (sn if t["k"] is not None else 0)
    table = None if t["block_table"] is None else t["block_table"].cpu().numpy()
    bidx = None if t["cache_batch_idx"] is None else t["cache_batch_idx"].cpu().numpy()
    args = (q, f64(want_k), f64(want_v), lengths, t["page_size"], table, bidx, causal, window,
            float32_scale(d, softmax_scale))
    ro, rlse = kvcache_ref(*args)
    assert o.dtype == t["q"].dtype and tuple(o.shape) == (b, sn, hq, d) and o.device == t["q"].device
    err_o = max_err(f64(o), ro)
    err_lse = max_err(f64(lse), rlse) if lse is not None else None
    if lse is not None:
        assert lse.dtype == torch.float32 and tuple(lse.shape) == (b, hq, sn)
    if dtype == "float32":
        assert within_ulp(f64(o), ro), err_o
        assert lse is None or within_ulp(f64(lse), rlse), err_lse
    else:
        no, nlse = kvcache_ref(*args, naive_dtype=dtype)
        naive_o = max_err(rd(no, dtype), ro)
        assert err_o <= 2 * naive_o, (err_o, naive_o)
        if lse is not None:
            naive_lse = max_err(rd(nlse, "float32"), rlse)
            assert err_lse <= 2 * naive_lse, (err_lse, naive_lse)


# ---- CPU tensors ----------------------------------------------------------------------------------------------------
@needs_torch
@pytest.mark.parametrize("dtype", TORCH_DTYPES)
@pytest.mark.parametrize("layout", ["contiguous", "batch_idx", 1, 16, 64])
def test_shim_cpu(dtype, layout):
    rng = np.random.default_rng(zlib.crc32(("%s %s" % (dtype, layout)).encode()))  # stable across runs
    case = make_case(rng, b=3, sn=int(rng.integers(1, 17)), hq=8, hkv=2, d=72, dtype="float32",
                     lengths=[57, 0, 121], append=True, page_size=layout if isinstance(layout, int) else None,
                     batch_idx=layout == "batch_idx")
    t = to_torch(case, tdtype(dtype))
    want_k, want_v = expected_caches(t)
    causal = layout != 16
    o, lse = flash_attn_with_kvcache(t["q"], t["k_cache"], t["v_cache"], t["k"], t["v"],
                                     cache_seqlens=t["cache_seqlens"], cache_batch_idx=t["cache_batch_idx"],
                                     block_table=t["block_table"], causal=causal, window_size=(90, -1), num_splits=3,
                                     return_softmax_lse=True)
    assert libflash.last_num_splits_used() == 3
    assert same_bits(t["k_cache"], want_k) and same_bits(t["v_cache"], want_v)
    check_result(t, o, lse, dtype, causal=causal, window=(90, -1))


@needs_torch
@pytest.mark.parametrize("dtype", TORCH_DTYPES)
def test_core_api_cpu_tensors(dtype):
    """libflash.attention_with_kvcache on torch CPU tensors: the result is a torch tensor; int64 index tensors are
    range-checked and converted."""
    rng = np.random.default_rng(len(dtype))
    case = make_case(rng, b=2, sn=4, hq=4, hkv=4, d=40, dtype="float32", lengths=[13, 70], append=True, page_size=16)
    t = to_torch(case, tdtype(dtype), index_dtype=torch.int64)
    out = torch.full(t["q"].shape, float("nan"), dtype=tdtype(dtype))
    o, lse = libflash.attention_with_kvcache(t["q"], t["k_cache"], t["v_cache"], k=t["k"], v=t["v"],
                                             cache_seqlens=t["cache_seqlens"], block_table=t["block_table"],
                                             causal=True, return_lse=True, out=out)
    assert o is out and isinstance(lse, torch.Tensor)
    check_result(t, o, lse, dtype, causal=True)


@needs_torch
def test_int_cache_seqlens_is_broadcast_and_none_means_full():
    rng = np.random.default_rng(2)
    q = torch.randn(3, 2, 4, 16)
    kc, vc = torch.randn(3, 33, 2, 16), torch.randn(3, 33, 2, 16)
    a = flash_attn_with_kvcache(q, kc, vc, cache_seqlens=20, causal=True)
    b = flash_attn_with_kvcache(q, kc, vc, cache_seqlens=torch.full((3,), 20, dtype=torch.int32), causal=True)
    assert torch.equal(a, b)
    # None: every sequence attends to the whole cache (flash-attn's meaning), paged or not.
    full = flash_attn_with_kvcache(q, kc, vc)
    assert torch.equal(full, flash_attn_with_kvcache(q, kc, vc, cache_seqlens=33))
    pages = torch.randn(7, 5, 2, 16), torch.randn(7, 5, 2, 16)
    table = torch.from_numpy(rng.permutation(7)[:6].reshape(3, 2).astype(np.int32))
    paged = flash_attn_with_kvcache(q, *pages, block_table=table)
    assert torch.equal(paged, flash_attn_with_kvcache(q, *pages, block_table=table, cache_seqlens=10))
    with pytest.raises(ValueError, match="cache_seqlens is required when k and v are given"):
        flash_attn_with_kvcache(q, kc, vc, torch.randn(3, 2, 2, 16), torch.randn(3, 2, 2, 16))
    with pytest.raises(FlashError, match="cache_seqlens holds 4294967296, which does not fit int32"):
        flash_attn_with_kvcache(q, kc, vc, cache_seqlens=2 ** 32)


@needs_torch
def test_shim_signature_is_flash_attn_2s():
    names = list(inspect.signature(flash_attn_with_kvcache).parameters)
    assert names == ["q", "k_cache", "v_cache", "k", "v", "rotary_cos", "rotary_sin", "cache_seqlens",
                     "cache_batch_idx", "cache_leftpad", "block_table", "softmax_scale", "causal", "window_size",
                     "softcap", "rotary_interleaved", "alibi_slopes", "num_splits", "return_softmax_lse"]
    defaults = {k: p.default for k, p in inspect.signature(flash_attn_with_kvcache).parameters.items()}
    assert defaults["window_size"] == (-1, -1) and defaults["softcap"] == 0.0 and defaults["num_splits"] == 0
    assert defaults["rotary_interleaved"] is True and defaults["return_softmax_lse"] is False


@needs_torch
@pytest.mark.parametrize("arg,value,needle", [
    ("rotary_cos", lambda: torch.zeros(8, 8), "rotary_cos"), ("rotary_sin", lambda: torch.zeros(8, 8), "rotary_sin"),
    ("cache_leftpad", lambda: torch.zeros(1, dtype=torch.int32), "cache_leftpad"),
    ("softcap", lambda: 30.0, "softcap=30.0"), ("alibi_slopes", lambda: torch.zeros(2), "alibi_slopes")])
def test_shim_unsupported_arguments(arg, value, needle):
    value = value()
    q, kc = torch.randn(1, 1, 2, 16), torch.randn(1, 8, 2, 16)
    with pytest.raises(NotImplementedError, match=needle):
        flash_attn_with_kvcache(q, kc, kc, cache_seqlens=3, **{arg: value})


@needs_torch
def test_shim_k_without_v():
    q, kc = torch.randn(1, 1, 2, 16), torch.randn(1, 8, 2, 16)
    with pytest.raises(ValueError, match="k and v must be given together"):
        flash_attn_with_kvcache(q, kc, kc.clone(), k=torch.randn(1, 1, 2, 16), cache_seqlens=3)


@needs_torch
def test_requires_grad_is_refused_and_no_grad_runs():
    q, kc, vc = torch.randn(1, 2, 2, 16, requires_grad=True), torch.randn(1, 8, 2, 16), torch.randn(1, 8, 2, 16)
    with pytest.raises(RuntimeError, match="has no backward"):
        flash_attn_with_kvcache(q, kc, vc, cache_seqlens=5)
    with torch.no_grad():
        o = flash_attn_with_kvcache(q, kc, vc, cache_seqlens=5)
    assert not o.requires_grad
    with torch.inference_mode():
        flash_attn_with_kvcache(q.detach(), kc, vc, cache_seqlens=5)
    parts = torch.randn(2, 1, 2, 2, 16, requires_grad=True)
    with pytest.raises(RuntimeError, match="combine has no backward"):
        libflash.combine(parts, torch.zeros(2, 1, 2, 2))


@needs_torch
def test_index_tensor_refusals():
    q, kc = torch.randn(2, 1, 2, 16), torch.randn(2, 8, 2, 16)
    with pytest.raises(FlashError, match="cache_seqlens has dtype float32") as ei:
        flash_attn_with_kvcache(q, kc, kc.clone(), cache_seqlens=torch.tensor([1.0, 2.0]))
    assert ei.value.status == capi.FLASH_ERROR_UNSUPPORTED_DTYPE
    for bad in (torch.tensor([1, 2], dtype=torch.bfloat16), torch.tensor([True, False])):
        with pytest.raises(FlashError, match="cache_seqlens has dtype") as ei:
            flash_attn_with_kvcache(q, kc, kc.clone(), cache_seqlens=bad)
        assert ei.value.status == capi.FLASH_ERROR_UNSUPPORTED_DTYPE
    with pytest.raises(FlashError, match="cache_seqlens holds -4294967296") as ei:
        flash_attn_with_kvcache(q, kc, kc.clone(), cache_seqlens=torch.tensor([1, -2 ** 32]))
    assert ei.value.status == capi.FLASH_ERROR_INVALID_ARGUMENT
    with pytest.raises(FlashError, match=r"cache_seqlens has shape \(3,\) but must be \(2,\)") as ei:
        flash_attn_with_kvcache(q, kc, kc.clone(), cache_seqlens=torch.tensor([1, 2, 3], dtype=torch.int32))
    assert ei.value.status == capi.FLASH_ERROR_BAD_SHAPE
    with pytest.raises(FlashError) as ei:
        flash_attn_with_kvcache(q, kc, kc.clone(), cache_seqlens=torch.tensor([1, 9], dtype=torch.int32))
    assert ei.value.status == capi.FLASH_ERROR_INVALID_ARGUMENT
    assert ei.value.message == "cache_seqlens[1] is 9 but k_cache.shape[1] (max_len) is 8"
    # Strided (non-contiguous) CPU index tensors are copied; a broadcast block table works too.
    seq = torch.tensor([[3, 0], [5, 0]], dtype=torch.int32)[:, 0]
    assert not seq.is_contiguous()
    a = flash_attn_with_kvcache(q, kc, kc, cache_seqlens=seq)
    assert torch.equal(a, flash_attn_with_kvcache(q, kc, kc, cache_seqlens=torch.tensor([3, 5], dtype=torch.int32)))
    pages = torch.randn(4, 4, 2, 16)
    table = torch.tensor([[2, 0]], dtype=torch.int32).expand(2, 2)
    assert table.stride(0) == 0
    a = flash_attn_with_kvcache(q, pages, pages, cache_seqlens=6, block_table=table)
    assert torch.equal(a, flash_attn_with_kvcache(q, pages, pages, cache_seqlens=6, block_table=table.contiguous()))


@needs_torch
def test_combine_torch_cpu():
    rng = np.random.default_rng(3)
    o_parts = torch.randn(3, 2, 5, 3, 24, dtype=torch.float32)
    lse_parts = torch.from_numpy((rng.standard_normal((3, 2, 3, 5)) * 2).astype(np.float32))
    lse_parts[1, 0, 1] = float("-inf")
    out, lse = libflash.combine(o_parts, lse_parts, return_lse=True)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float32
    ro, rlse = combine_ref(o_parts.numpy(), lse_parts.numpy())
    assert within_ulp(out.numpy(), ro) and within_ulp(lse.numpy(), rlse)
    out16 = libflash.combine(list(o_parts.to(torch.bfloat16)), list(lse_parts))
    assert out16.dtype == torch.bfloat16
    ro, _ = combine_ref(o_parts.to(torch.bfloat16).double().numpy(), lse_parts.numpy())
    assert within_rounding(out16.double().numpy(), ro, "bfloat16")


# ---- CUDA tensors ---------------------------------------------------------------------------------------------------
def _gpu_call(fn, *a, **kw):
    """The call's result, or None when the library has no GPU kernel for it yet (its documented refusal)."""
    try:
        return fn(*a, **kw)
    except FlashError as e:
        if e.status == capi.FLASH_ERROR_ALGORITHM_UNAVAILABLE:
            return None
        raise


@needs_torch
@gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("layout", ["contiguous", "batch_idx", 16, 64])
def test_shim_cuda(dtype, layout):
    rng = np.random.default_rng(zlib.crc32(("%s %s cuda" % (dtype, layout)).encode()))
    case = make_case(rng, b=3, sn=5, hq=8, hkv=2, d=128, dtype="float32", lengths=[300, 1, 77], append=True,
                     page_size=layout if isinstance(layout, int) else None, batch_idx=layout == "batch_idx")
    t = to_torch(case, tdtype(dtype), device="cuda")
    k0, v0 = t["k_cache"].clone(), t["v_cache"].clone()
    want_k, want_v = expected_caches(t)
    r = _gpu_call(flash_attn_with_kvcache, t["q"], t["k_cache"], t["v_cache"], t["k"], t["v"],
                  cache_seqlens=t["cache_seqlens"], cache_batch_idx=t["cache_batch_idx"], block_table=t["block_table"],
                  causal=True, return_softmax_lse=True)
    if r is None:  # refused before anything was written
        assert same_bits(t["k_cache"], k0) and same_bits(t["v_cache"], v0)
        return
    torch.cuda.synchronize()
    assert same_bits(t["k_cache"], want_k) and same_bits(t["v_cache"], want_v)
    check_result(t, r[0], r[1], dtype, causal=True)


@needs_torch
@gpu
def test_cuda_index_arrays_must_be_int32_on_qs_device():
    q, kc = torch.randn(2, 1, 2, 64, device="cuda", dtype=torch.float16), torch.randn(2, 8, 2, 64, device="cuda",
                                                                                      dtype=torch.float16)
    with pytest.raises(FlashError, match="GPU index arrays must be int32") as ei:
        libflash.attention_with_kvcache(q, kc, kc, cache_seqlens=torch.tensor([1, 2], device="cuda"))
    assert ei.value.status == capi.FLASH_ERROR_UNSUPPORTED_DTYPE
    with pytest.raises(FlashError, match="index arrays live on q's device") as ei:
        libflash.attention_with_kvcache(q, kc, kc, cache_seqlens=torch.tensor([1, 2], dtype=torch.int32))
    assert ei.value.status == capi.FLASH_ERROR_DEVICE_MISMATCH
    # Host data (an int, numpy) is copied to q's device.
    _gpu_call(libflash.attention_with_kvcache, q, kc, kc, cache_seqlens=np.array([1, 2]))
    _gpu_call(flash_attn_with_kvcache, q, kc, kc, cache_seqlens=3)


@needs_torch
@gpu
def test_combine_cuda():
    o_parts = torch.randn(3, 2, 5, 3, 64, device="cuda", dtype=torch.float16)
    lse_parts = torch.randn(3, 2, 3, 5, device="cuda")
    r = _gpu_call(libflash.combine, o_parts, lse_parts, return_lse=True)
    if r is None:
        return
    torch.cuda.synchronize()
    ro, rlse = combine_ref(o_parts.double().cpu().numpy(), lse_parts.cpu().numpy())
    # Accumulated in fp32 or better and rounded once: within 1 ulp (the CPU combine, in double, is within 1/2). The
    # LSE, M + log(sum of <= 3 weights) in fp32: a few fp32 roundings of values of size max(1, |LSE|).
    assert within_ulp(r[0].double().cpu().numpy(), ro, "float16", 1.0)
    lse_err = np.abs(r[1].double().cpu().numpy() - rlse)
    assert np.all(lse_err <= 8 * 2.0 ** -24 * np.maximum(1.0, np.abs(rlse)))
