"""Ring attention (context parallelism) over torch.distributed, with libflash computing every local block.

    import torch.distributed as dist
    from libflash.distributed import ring_attention, zigzag_split, zigzag_unsplit

    # each rank of `group` holds its slice of one long sequence: [batch, local_seqlen, heads, head_dim]
    q, k, v = (zigzag_split(x, rank, world) for x in (q_all, k_all, v_all))   # causal: the zigzag split
    o = ring_attention(q, k, v, causal=True)          # o: this rank's rows of attention over the WHOLE sequence
    o.sum().backward()                                 # q.grad, k.grad, v.grad: this rank's slices of the gradients

The sequence of N = world * local_seqlen tokens is split along dim 1 over the ranks of a process group (NCCL for
CUDA tensors, gloo for CPU tensors). K and V slices travel around the ring (rank r sends to r + 1 and receives from
r - 1) with batched isend/irecv; while slice t + 1 is in flight, libflash attends the local queries to slice t
(flash_fwd with its log-sum-exp), and the partial results are merged through their LSEs. The backward sends K/V
around the ring again; each rank computes its queries' share of dK/dV for the visiting slice with flash_bwd, given
the global O and the global LSE of its queries, and dK/dV travel with their slice back to its owner.

Layouts (which global positions a rank holds; every rank the same local_seqlen):
  "contiguous": rank r holds tokens [r * n, (r + 1) * n) (n = local_seqlen); the default without causal.
  "zigzag":     the sequence cut into 2 * world chunks of n / 2; rank r holds chunks r and 2 * world - 1 - r,
                concatenated in that order (ring-flash-attn's zigzag, Megatron's load-balanced split): with causal
                attention every rank then does the same work at every ring step. The default with causal; n even.
  zigzag_split(x, rank, world) / zigzag_unsplit(per_rank) convert; zigzag_split(torch.arange(N), rank, world) gives a
  rank's global positions (for rotary embeddings and the like).

Per-step masks: for the slice of rank s visiting rank r, each pair (query chunk, key chunk) is classified from the
chunks' global positions as entirely visible (keys before the queries, for causal), empty (keys after: skipped), or
a band (the diagonal, or a window's edge), which is expressed as a top-left aligned window on the sub-block after
dropping the rows or columns that see nothing. Pairs that are all visible and adjacent in memory are merged into one
call: with causal zigzag each step is one libflash call (the diagonal step: causal on the local slice; a slice from
a lower rank: all local queries against its first chunk; from a higher rank: the second local chunk against both).
"""

import math

import torch
import torch.distributed as dist

from ._attention import attention, attention_backward

__all__ = ["ring_attention", "zigzag_split", "zigzag_unsplit", "RingAttnFunction"]

_LAYOUTS = ("contiguous", "zigzag")


# ---- Split helpers --------------------------------------------------------------------------------------------
def zigzag_split(x, rank, world, dim=1):
    """Rank `rank`'s zigzag slice of the whole sequence `x` (along `dim`, default 1 = FA2's seqlen dimension): x cut
    into 2 * world equal chunks, chunks `rank` and `2 * world - 1 - rank` concatenated (a new contiguous tensor).
    x.shape[dim] must be a multiple of 2 * world."""
    world = int(world)
    rank = int(rank)
    if world < 1 or not 0 <= rank < world:
        raise ValueError("zigzag_split: rank %d is not in [0, world=%d)" % (rank, world))
    n = x.shape[dim]
    if n % (2 * world):
        raise ValueError("zigzag_split: the sequence has %d tokens along dim %d, not a multiple of 2 * world = %d"
                         % (n, dim, 2 * world))
    chunks = x.chunk(2 * world, dim=dim)
    return torch.cat((chunks[rank], chunks[2 * world - 1 - rank]), dim=dim)


def zigzag_unsplit(chunks_per_rank, dim=1):
    """The whole sequence from every rank's zigzag slice, in rank order (the inverse of zigzag_split; e.g. after
    torch.distributed.all_gather). Each slice's length along `dim` must be even and all equal."""
    parts = list(chunks_per_rank)
    world = len(parts)
    if world == 0:
        raise ValueError("zigzag_unsplit: no slices")
    n = parts[0].shape[dim]
    if n % 2 or any(p.shape[dim] != n for p in parts):
        raise ValueError("zigzag_unsplit: slices must all have one even length along dim %d, got %s"
                         % (dim, [p.shape[dim] for p in parts]))
    firsts = [p.narrow(dim, 0, n // 2) for p in parts]
    seconds = [p.narrow(dim, n // 2, n // 2) for p in parts]
    return torch.cat(firsts + seconds[::-1], dim=dim)


def _segments(layout, rank, world, n):
    """((local_start, global_start, length), ...) of the tokens rank holds, in local (= global) order."""
    if layout == "contiguous":
        return ((0, rank * n, n),)
    c = n // 2
    return ((0, rank * c, c), (c, (2 * world - 1 - rank) * c, c))


# ---- Per-step plan ----------------------------------------------------------------------------------------------
def _pair(qseg, kseg, left, right):
    """The call for query chunk qseg against key chunk kseg under the global window (left, right) (-1 = unbounded;
    causal is right = 0): None when no query sees a key, else (q_lo, q_hi, k_lo, k_hi, window_left, window_right) in
    local indices with a top-left aligned window ((-1, -1): every pair visible)."""
    ql, gq, nq = qseg
    kl, gk, nk = kseg
    if nq == 0 or nk == 0:
        return None
    off = gk - gq  # key position - query position = (j - i) + off
    lo = None if left < 0 else -left - off  # j - i >= lo
    hi = None if right < 0 else right - off  # j - i <= hi
    if (lo is not None and lo > nk - 1) or (hi is not None and hi < -(nq - 1)) or \
            (lo is not None and hi is not None and lo > hi):
        return None
    if lo is not None and lo <= -(nq - 1):
        lo = None  # no row's window reaches below the block
    if hi is not None and hi >= nk - 1:
        hi = None
    if lo is None and hi is None:
        return (ql, ql + nq, kl, kl + nk, -1, -1)
    # Shift the band so that it contains the diagonal j' - i' = 0 (a window of non-negative sizes): drop the leading
    # keys no row sees (lo > 0) or the leading rows that see no key (hi < 0).
    delta = lo if lo is not None and lo > 0 else (hi if hi is not None and hi < 0 else 0)
    i0, j0 = max(0, -delta), max(0, delta)
    wl = -1 if lo is None else delta - lo
    wr = -1 if hi is None else hi - delta
    return (ql + i0, ql + nq, kl + j0, kl + nk, wl, wr)


def _plan(layout, rank, src, world, n, left, right):
    """The libflash calls that attend rank's queries to the keys of rank src: a list of (q_lo, q_hi, k_lo, k_hi,
    window_left, window_right), local indices, top-left aligned windows. Each query row appears in at most one call
    per key chunk; calls of one step may share rows (their results are merged like those of different steps)."""
    qsegs = _segments(layout, rank, world, n)
    ksegs = _segments(layout, src, world, n)
    if src == rank and left < 0 and right == 0:
        # The diagonal under plain causal: local order is global order within a rank (both layouts), so causal on
        # the local slice (query i sees local keys j <= i) is exactly the global rule.
        return [(0, n, 0, n, -1, 0)]
    grid = [[_pair(qs, ks, left, right) for ks in ksegs] for qs in qsegs]
    calls = [c for row in grid for c in row if c is not None]
    if calls and all(c[4:] == (-1, -1) for c in calls):
        # Only fully visible pairs: one call when they fill a rectangle of adjacent chunks.
        rows = [i for i, row in enumerate(grid) if any(c is not None for c in row)]
        cols = [j for j in range(len(ksegs)) if any(grid[i][j] is not None for i in range(len(qsegs)))]
        if rows == list(range(rows[0], rows[-1] + 1)) and cols == list(range(cols[0], cols[-1] + 1)) and \
                all(grid[i][j] is not None for i in rows for j in cols):
            q0, k0 = qsegs[rows[0]], ksegs[cols[0]]
            q1, k1 = qsegs[rows[-1]], ksegs[cols[-1]]
            return [(q0[0], q1[0] + q1[2], k0[0], k1[0] + k1[2], -1, -1)]
    return calls


# ---- Process group helpers ----------------------------------------------------------------------------------------
def _global_rank(group, group_rank):
    if group is None or group is dist.group.WORLD:
        return group_rank
    get = getattr(dist, "get_global_rank", None) or dist.distributed_c10d._get_global_rank
    return get(group, group_rank)


class _Ring:
    def __init__(self, group):
        self.group = group
        self.rank = dist.get_rank(group)
        self.world = dist.get_world_size(group)
        self.next = _global_rank(group, (self.rank + 1) % self.world)
        self.prev = _global_rank(group, (self.rank - 1) % self.world)

    def exchange(self, send, recv):
        """Posts send -> next rank and recv <- previous rank; returns the requests (wait on each)."""
        ops = [dist.P2POp(dist.isend, send, self.next, self.group),
               dist.P2POp(dist.irecv, recv, self.prev, self.group)]
        return dist.batch_isend_irecv(ops)


def _wait(reqs):
    for r in reqs:
        r.wait()


# ---- Merge through the log-sum-exp -------------------------------------------------------------------------------
def _acc_dtype(x):
    """The ring's accumulators: fp32 for 16-bit inputs (far finer than their rounding), fp64 for fp32 inputs, whose
    one-shot result is computed in fp32: summing the steps' partial results in fp32 would add a rounding per step
    that the one-shot result does not have."""
    return torch.float64 if x.dtype == torch.float32 else torch.float32


def _merge(acc, acc_lse, o, lse):
    """acc, acc_lse (accumulator views [b, n, h, d], [b, h, n]) <- the merge of (acc, acc_lse) and (o, lse), in place:
    flash_combine's arithmetic for two parts: M = max LSE_p, w_p = exp(LSE_p - M), O = sum w_p O_p / sum w_p,
    LSE = M + log sum w_p; a part at -inf contributes nothing, rows where both are -inf stay O = 0, LSE = -inf."""
    m = torch.maximum(acc_lse, lse)
    m = torch.where(torch.isneginf(m), torch.zeros_like(m), m)
    wa = torch.exp(acc_lse - m)
    wo = torch.exp(lse - m)
    s = wa + wo
    acc_lse.copy_(m + torch.log(s))
    s = torch.where(s > 0, s, torch.ones_like(s))
    wa = (wa / s).transpose(1, 2).unsqueeze(-1)
    wo = (wo / s).transpose(1, 2).unsqueeze(-1)
    acc.mul_(wa).add_(o.to(acc.dtype) * wo)


# ---- Forward and backward ------------------------------------------------------------------------------------------
def _ring_forward(q, k, v, ring, plans, scale):
    b, n, hq, d = q.shape
    acc = torch.zeros((b, n, hq, d), dtype=_acc_dtype(q), device=q.device)
    acc_lse = torch.full((b, hq, n), -math.inf, dtype=_acc_dtype(q), device=q.device)
    kv = torch.stack((k, v))  # one contiguous buffer [2, b, n, hkv, d]: one message per step
    spare = torch.empty_like(kv) if ring.world > 1 else None
    for t in range(ring.world):
        # Post the exchange of the next slice first: it travels while this one is attended to.
        reqs = ring.exchange(kv, spare) if t + 1 < ring.world else None
        for ql, qh, kl, kh, wl, wr in plans[t]:
            o, lse = attention(q[:, ql:qh], kv[0, :, kl:kh], kv[1, :, kl:kh], causal_alignment="top_left",
                               window=(wl, wr), softmax_scale=scale, return_lse=True)
            _merge(acc[:, ql:qh], acc_lse[:, :, ql:qh], o, lse)
        if reqs is not None:
            _wait(reqs)
            kv, spare = spare, kv
    return acc.to(q.dtype), acc_lse.float()


def _ring_backward(do, q, k, v, o, lse, ring, plans, scale, deterministic):
    dq = torch.zeros(q.shape, dtype=_acc_dtype(q), device=q.device)
    kv = torch.stack((k, v))
    spare = torch.empty_like(kv) if ring.world > 1 else None
    dkv = dkv_spare = dkv_reqs = None  # dK/dV of the visiting slice (fp32), travelling with it
    for t in range(ring.world):
        kv_reqs = ring.exchange(kv, spare) if t + 1 < ring.world else None
        parts = []
        for ql, qh, kl, kh, wl, wr in plans[t]:
            gq, gk, gv = attention_backward(q[:, ql:qh], kv[0, :, kl:kh], kv[1, :, kl:kh], o[:, ql:qh], do[:, ql:qh],
                                            lse[:, :, ql:qh], causal_alignment="top_left", window=(wl, wr),
                                            softmax_scale=scale, deterministic=deterministic)
            dq[:, ql:qh] += gq
            parts.append((kl, kh, gk, gv))
        if t == 0:
            dkv = torch.zeros(kv.shape, dtype=_acc_dtype(q), device=q.device)
            dkv_spare = torch.empty_like(dkv) if ring.world > 1 else None
        else:
            # The slice's dK/dV so far, sent by the previous rank during this step's computation.
            _wait(dkv_reqs)
            dkv, dkv_spare = dkv_spare, dkv
        for kl, kh, gk, gv in parts:
            dkv[0, :, kl:kh] += gk
            dkv[1, :, kl:kh] += gv
        if ring.world > 1:
            # After the last step this sends each slice's dK/dV home: the owner is the next rank.
            dkv_reqs = ring.exchange(dkv, dkv_spare)
        if kv_reqs is not None:
            _wait(kv_reqs)
            kv, spare = spare, kv
    if ring.world > 1:
        _wait(dkv_reqs)
        dkv = dkv_spare
    return dq.to(q.dtype), dkv[0].to(k.dtype), dkv[1].to(v.dtype)


class RingAttnFunction(torch.autograd.Function):
    """(o, lse) = ring attention of q, k, v over the group; differentiable in q, k and v (lse is not)."""

    @staticmethod
    def forward(ctx, q, k, v, ring, plans, scale, deterministic):
        o, lse = _ring_forward(q, k, v, ring, plans, scale)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.ring, ctx.plans, ctx.scale, ctx.deterministic = ring, plans, scale, deterministic
        ctx.mark_non_differentiable(lse)
        return o, lse

    @staticmethod
    def backward(ctx, do, _dlse):
        q, k, v, o, lse = ctx.saved_tensors
        if do is None:
            do = torch.zeros_like(o)  # every rank must take part in the ring
        if do.stride(-1) != 1:
            do = do.contiguous()
        dq, dk, dv = _ring_backward(do, q, k, v, o, lse, ctx.ring, ctx.plans, ctx.scale, ctx.deterministic)
        return dq, dk, dv, None, None, None, None


def ring_attention(q, k, v, *, group=None, causal=False, window=(-1, -1), softmax_scale=None, layout=None,
                   deterministic=False, return_lse=False):
    """Exact attention over one sequence split along dim 1 across the ranks of a torch.distributed process group
    (context parallelism): returns this rank's rows of softmax(softmax_scale * Q K^T + mask) V over the WHOLE sequence.

    q: [batch, local_seqlen, heads_q, head_dim]; k, v: [batch, local_seqlen, heads_kv, head_dim] (FlashAttention-2's
        layout; heads_q a multiple of heads_kv: GQA/MQA), this rank's tokens. Every rank passes the same batch, heads,
        head_dim, dtype and local_seqlen (not checked: a mismatch fails or hangs in the communication). Tensors on a
        CUDA device (NCCL group: libflash runs on the current stream, the transfers on NCCL's, each waited for by the
        current stream before their buffer is read or reused) or on the CPU (gloo group);
        dtypes as libflash.attention on that device (CPU: float32, float16, bfloat16; CUDA: float16, bfloat16).
    group: the process group (None: the default group); its rank order is the ring and the order of the slices.
    layout: which tokens a rank holds (see the module docstring): "contiguous" (default without causal) or "zigzag"
        (default with causal: chunks rank and 2 * world - 1 - rank of 2 * world; local_seqlen even). Any layout works
        with any mask; zigzag balances causal work.
    causal, window=(left, right): the mask over GLOBAL positions, as libflash.attention on the whole sequence (which
        has seqlen_q == seqlen_k, so both alignments agree): query p sees key p' iff p' <= p (causal) and
        p - left <= p' <= p + right (-1 = unbounded). Sliding windows are supported, but every step still runs (and
        sends K/V) around the whole ring even when a window makes it empty.
    softmax_scale: None = 1/sqrt(head_dim). deterministic: as flash_attn_func (the sums around the ring have a fixed
        order, so the gradients are then bitwise reproducible).
    return_lse: also return the fp32 log-sum-exp [batch, heads_q, local_seqlen] over the whole sequence (not
        differentiable).

    Autograd: differentiable in q, k and v; the backward is collective too (every rank of the group must call
    backward, as every rank must call the forward). The forward keeps q, k, v, O and the LSE (O(local_seqlen)); partial
    results are merged in fp32 and dQ, dK, dV accumulated in fp32 (dK/dV travel in fp32), each rounded once to the
    inputs' dtype.
    """
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError("ring_attention: %s is a %s; expected a torch.Tensor" % (name, type(t).__name__))
        if t.dim() != 4:
            raise ValueError("ring_attention: %s has %d dimensions; expected [batch, local_seqlen, heads, head_dim]"
                             % (name, t.dim()))
    if k.shape != v.shape:
        raise ValueError("ring_attention: k has shape %s but v has %s" % (tuple(k.shape), tuple(v.shape)))
    if q.shape[1] != k.shape[1]:
        raise ValueError("ring_attention: q has %d local tokens but k has %d; each rank holds the same tokens' q, k, v"
                         % (q.shape[1], k.shape[1]))
    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError("ring_attention: torch.distributed is not initialised (call "
                           "torch.distributed.init_process_group first)")
    if layout is None:
        layout = "zigzag" if causal else "contiguous"
    if layout not in _LAYOUTS:
        raise ValueError("ring_attention: layout is %r; use 'contiguous' or 'zigzag'" % (layout,))
    n = q.shape[1]
    if layout == "zigzag" and n % 2:
        raise ValueError("ring_attention: the zigzag layout needs an even local_seqlen (two chunks per rank), got %d"
                         % n)
    try:
        left, right = (-1, -1) if window is None else (int(window[0]), int(window[1]))
    except (TypeError, ValueError, IndexError):
        raise ValueError("ring_attention: window must be a (left, right) pair, -1 meaning unbounded") from None
    if left < -1 or right < -1:
        raise ValueError("ring_attention: window is %r; each side must be >= 0, or -1 (unbounded)" % ((left, right),))
    if causal:
        right = 0
    ring = _Ring(group)
    plans = [_plan(layout, ring.rank, (ring.rank - t) % ring.world, ring.world, n, left, right)
             for t in range(ring.world)]
    o, lse = RingAttnFunction.apply(q, k, v, ring, plans, softmax_scale, bool(deterministic))
    return (o, lse) if return_lse else o
