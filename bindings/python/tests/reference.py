"""An independent float64 reference for attention with every libflash mask, in plain numpy.

Written from flash.h's definitions, not from the library: query i sees key j iff
  window_left  < 0 or j >= i + off - window_left,
  window_right < 0 or j <= i + off + window_right   (causal: window_right = 0),
  the block map keeps (i // block_m, j // block_n) for that batch and query head,
with off = seqlen_k - seqlen_q (bottom-right) or 0 (top-left). Rows that see no key: O = 0, LSE = -inf.
"""

import numpy as np


def visible(seqlen_q, seqlen_k, causal=False, alignment="bottom_right", window=(-1, -1), block_map=None,
            block=(128, 128)):
    """Boolean [B|1, H|1, seqlen_q, seqlen_k]."""
    i = np.arange(seqlen_q)[:, None]
    j = np.arange(seqlen_k)[None, :]
    off = seqlen_k - seqlen_q if alignment == "bottom_right" else 0
    left, right = window
    if causal:
        right = 0
    ok = np.ones((seqlen_q, seqlen_k), dtype=bool)
    if left >= 0:
        ok &= j >= i + off - left
    if right >= 0:
        ok &= j <= i + off + right
    ok = ok[None, None]
    if block_map is not None:
        bm = np.asarray(block_map, dtype=bool)
        while bm.ndim < 4:
            bm = bm[None]
        bm_, bn_ = block
        ok = ok & bm[:, :, i // bm_, j // bn_]
    return ok


def attention_ref(q, k, v, softmax_scale=None, **mask):
    """(O float64 [B, Sq, Hq, D], LSE float64 [B, Hq, Sq]) from arrays [B, S, H, D] of any float dtype."""
    q = np.asarray(q, dtype=np.float64)
    k = np.asarray(k, dtype=np.float64)
    v = np.asarray(v, dtype=np.float64)
    b, sq, hq, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    assert hq % hkv == 0
    k = np.repeat(k, hq // hkv, axis=2)
    v = np.repeat(v, hq // hkv, axis=2)
    scale = 1.0 / np.sqrt(d) if softmax_scale is None else softmax_scale
    s = np.einsum("bqhd,bkhd->bhqk", q, k) * scale
    ok = np.broadcast_to(visible(sq, sk, **mask), s.shape)
    s = np.where(ok, s, -np.inf)
    m = s.max(axis=-1, keepdims=True)
    m_safe = np.where(np.isfinite(m), m, 0.0)
    p = np.exp(s - m_safe)
    l = p.sum(axis=-1, keepdims=True)
    o = np.einsum("bhqk,bkhd->bqhd", p / np.where(l > 0, l, 1.0), v)
    with np.errstate(divide="ignore"):
        lse = np.where(l[..., 0] > 0, np.log(np.where(l[..., 0] > 0, l[..., 0], 1.0)) + m_safe[..., 0], -np.inf)
    return o, lse


def attention_grad_ref(q, k, v, do, softmax_scale=None, **mask):
    """(dQ, dK, dV) float64 of O = attention_ref(q, k, v, ...) given dO, by the textbook chain rule on the
    materialised P (nothing taken from the library: not its O, not its LSE):
        dV = P^T dO,  dP = dO V^T,  dS = P * (dP - rowsum(P * dP)),  dQ = scale dS K,  dK = scale dS^T Q,
    with dK, dV of a key/value head summed over the query heads sharing it (GQA). Rows that see no key
    have P = 0 and so contribute nothing."""
    q = np.asarray(q, dtype=np.float64)
    k = np.asarray(k, dtype=np.float64)
    v = np.asarray(v, dtype=np.float64)
    do = np.asarray(do, dtype=np.float64)
    b, sq, hq, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    g = hq // hkv
    kr = np.repeat(k, g, axis=2)
    vr = np.repeat(v, g, axis=2)
    scale = 1.0 / np.sqrt(d) if softmax_scale is None else softmax_scale
    s = np.einsum("bqhd,bkhd->bhqk", q, kr) * scale
    ok = np.broadcast_to(visible(sq, sk, **mask), s.shape)
    s = np.where(ok, s, -np.inf)
    m = s.max(axis=-1, keepdims=True)
    p = np.exp(s - np.where(np.isfinite(m), m, 0.0))
    l = p.sum(axis=-1, keepdims=True)
    p = p / np.where(l > 0, l, 1.0)
    dv = np.einsum("bhqk,bqhd->bkhd", p, do)
    dp = np.einsum("bqhd,bkhd->bhqk", do, vr)
    ds = p * (dp - (p * dp).sum(axis=-1, keepdims=True))
    dq = np.einsum("bhqk,bkhd->bqhd", ds, kr) * scale
    dk = np.einsum("bhqk,bqhd->bkhd", ds, q) * scale
    # GQA: query head h uses key/value head h // g; sum each group's gradients.
    dk = dk.reshape(b, sk, hkv, g, d).sum(axis=3)
    dv = dv.reshape(b, sk, hkv, g, d).sum(axis=3)
    return dq, dk, dv
