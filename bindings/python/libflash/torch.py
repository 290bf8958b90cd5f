"""FlashAttention-2-compatible functions for PyTorch tensors, over libflash, with autograd.

    # from flash_attn import flash_attn_func
    from libflash.torch import flash_attn_func

Same signatures and meaning as flash_attn 2.x: q [batch, seqlen_q, heads_q, head_dim], k/v
[batch, seqlen_k, heads_kv, head_dim]; causal is aligned bottom-right; window_size=(left, right) with -1
unbounded; softmax_scale None = 1/sqrt(head_dim). Runs on the tensors' CUDA device on the current stream
(or on the CPU backend for CPU tensors).

Gradients: each function is a torch.autograd.Function. The forward saves q, k, v, O and the log-sum-exp
(O(N) memory, nothing N x N); the backward calls flash_bwd, which recomputes P tile by tile. deterministic=True
makes the backward bitwise reproducible (as in flash_attn). The packed variants read q, k, v through views
of the packed tensor and return its gradient as one tensor of its shape.

Packed variable-length batches (flash.h 1.3): flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k,
max_seqlen_q, max_seqlen_k, ...) with q [total_q, heads_q, head_dim], k/v [total_k, heads_kv, head_dim] and int32
[batch + 1] offsets on q's device, and its qkv-packed ([total, 3, heads, head_dim]) and kv-packed ([total_k, 2,
heads_kv, head_dim]) variants, with autograd, as in flash_attn 2.x.

Not available (raise NotImplementedError): dropout_p > 0, softcap != 0, alibi_slopes, return_attn_probs (and
block_table in flash_attn_varlen_func).

torch.compile and CUDA graphs (PyTorch >= 2.4): the calls are also torch.library custom ops, torch.ops.libflash.fwd,
.bwd, .fwd_kvcache, .varlen_fwd and .varlen_bwd, with fake (meta) implementations and autograd registered, so
torch.compile(fullgraph=True) traces flash_attn_func / flash_attn_*packed_func / flash_attn_varlen_*func /
flash_attn_with_kvcache without a graph break, and CUDA-graph capture records them (no host synchronisation; every
output and workspace from torch's allocator, on the current stream; the varlen functions need their max_seqlen
arguments for this, and their offsets as int32 tensors on q's device). Which path a call takes (custom_op_mode, or
the LIBFLASH_TORCH_CUSTOM_OP environment variable):
  "auto" (default): the custom op while torch.compile/export traces, under a dispatch mode (FakeTensorMode, make_fx,
      ...) or for tensor subclasses; otherwise the direct path (an autograd.Function, or no autograd at all when no
      gradient is needed), whose host cost is lower. Both paths run the same library calls: results are bitwise equal.
  "always": the custom op for every call.   "never": never the custom op (torch.compile then graph-breaks here).
With an older PyTorch (no torch.library.custom_op) only the direct path exists: custom_op_available() is False.
libflash.attention() itself is not traced by torch.compile (it graph-breaks); call these functions inside compiled
code.

SDPA (PyTorch >= 2.11): importing this module registers libflash as a flash-attention implementation of
torch.nn.functional.scaled_dot_product_attention; torch.nn.attention.activate_flash_attention_impl("libflash")
switches the flash backend's CUDA kernels to libflash (see libflash/_sdpa.py; shapes libflash does not take run the
built-in kernel).

flash_attn_with_kvcache (inference: decode and chunked prefill over a contiguous or paged KV cache, appending
the new keys and values in place) has FlashAttention-2's signature too; it has no backward (torch inputs that
require grad, in grad mode, are refused). Not available there (raise NotImplementedError): rotary_cos/rotary_sin,
cache_leftpad, softcap != 0, alibi_slopes.
"""

import os
import types
from typing import Optional, Tuple

import torch  # the real PyTorch: absolute import

from . import _capi, _fast
from ._attention import (_NO_WINDOW, _attention_nograd, _bwd_fast, _fwd_fast, _varlen_resolved, attention,
                         attention_backward)
from ._errors import error
from ._kvcache import _host_int32, attention_with_kvcache

_fast.register_torch(torch)  # torch tensors take the fast path from the first call

__all__ = ["flash_attn_func", "flash_attn_kvpacked_func", "flash_attn_qkvpacked_func", "flash_attn_with_kvcache",
           "flash_attn_varlen_func", "flash_attn_varlen_kvpacked_func", "flash_attn_varlen_qkvpacked_func", "attention",
           "attention_backward", "FlashAttnFunction", "custom_op_available", "custom_op_mode", "sdpa_impl_available",
           "SDPA_IMPL_NAME"]

CUSTOM_OP_MODES = ("auto", "always", "never")
custom_op_mode = os.environ.get("LIBFLASH_TORCH_CUSTOM_OP", "auto").strip().lower()
if custom_op_mode not in CUSTOM_OP_MODES:
    custom_op_mode = "auto"


def _check_unsupported(dropout_p, softcap, alibi_slopes, return_attn_probs):
    if dropout_p:
        raise NotImplementedError("libflash: dropout_p=%r is not supported (libflash computes exact attention "
                                  "without dropout); pass dropout_p=0.0" % (dropout_p,))
    if softcap:
        raise NotImplementedError("libflash: softcap=%r is not supported; pass softcap=0.0" % (softcap,))
    if alibi_slopes is not None:
        raise NotImplementedError("libflash: alibi_slopes is not supported; pass alibi_slopes=None")
    if return_attn_probs:
        raise NotImplementedError("libflash: return_attn_probs=True is not supported (no attention probabilities "
                                  "or dropout mask are materialised); for the log-sum-exp use "
                                  "libflash.attention(..., return_lse=True)")


def _check_tensors(*ts):
    for t in ts:
        if not isinstance(t, torch.Tensor):
            raise TypeError("libflash.torch: expected torch.Tensor inputs, got %s" % type(t).__name__)


def _window(window_size):
    if window_size is None or (type(window_size) is tuple and window_size == _NO_WINDOW):  # the default, quickly
        return _NO_WINDOW
    left, right = window_size
    return (int(left), int(right))


def _grad_out(do):
    """dO as the library takes it: the last dimension contiguous (autograd hands in expanded, stride-0
    gradients for e.g. out.sum())."""
    return do if do.stride(-1) == 1 else do.contiguous()


def _backward_options(opts):
    # The backward runs on the stream autograd calls it on (the forward's, by PyTorch's rules).
    return {k: v for k, v in opts.items() if k != "stream"}


class FlashAttnFunction(torch.autograd.Function):
    """(o, lse) = attention(q, k, v, return_lse=True, **opts), differentiable in q, k and v (lse is not).

    Used by libflash.attention() when a torch input requires grad (flash_attn_func has its own, _FlashAttnFunc)."""

    @staticmethod
    def forward(ctx, q, k, v, opts):
        o, lse = attention(q, k, v, return_lse=True, **opts)  # grad mode is off inside forward
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.opts = _backward_options(opts)
        ctx.mark_non_differentiable(lse)
        return o, lse

    @staticmethod
    def backward(ctx, do, _dlse):
        q, k, v, o, lse = ctx.saved_tensors
        if do is None:
            return None, None, None, None
        dq, dk, dv = attention_backward(q, k, v, o, _grad_out(do), lse, **ctx.opts)
        return dq, dk, dv, None


class _PackedFunction(torch.autograd.Function):
    """Attention over views of one packed tensor, read in place: qkv [b, s, 3, h, d] or kv [b, s, 2, h, d] (axis 2),
    or in a packed variable-length batch qkv [total, 3, h, d] or kv [total, 2, h, d] (axis 1); the gradient comes
    back as one tensor shaped like it (the library refuses outputs whose memory ranges interleave, so dq/dk/dv are
    computed apart and stacked once).

    `q` is None for qkv-packed input (q = packed.select(axis, 0)); otherwise kv-packed with a separate q."""

    @staticmethod
    def forward(ctx, q, packed, opts, axis=2):
        if q is None:
            qq, k, v = packed.select(axis, 0), packed.select(axis, 1), packed.select(axis, 2)
        else:
            qq, k, v = q, packed.select(axis, 0), packed.select(axis, 1)
        o, lse = attention(qq, k, v, return_lse=True, **opts)
        ctx.q_separate = q is not None
        ctx.axis = axis
        ctx.save_for_backward(*((q, packed, o, lse) if q is not None else (packed, o, lse)))
        ctx.opts = _backward_options(opts)
        ctx.mark_non_differentiable(lse)
        return o, lse

    @staticmethod
    def backward(ctx, do, _dlse):
        if do is None:
            return None, None, None, None
        a = ctx.axis
        if ctx.q_separate:
            q, packed, o, lse = ctx.saved_tensors
            dq, dk, dv = attention_backward(q, packed.select(a, 0), packed.select(a, 1), o, _grad_out(do), lse,
                                            **ctx.opts)
            return dq, torch.stack((dk, dv), dim=a), None, None
        packed, o, lse = ctx.saved_tensors
        grads = attention_backward(packed.select(a, 0), packed.select(a, 1), packed.select(a, 2), o, _grad_out(do), lse,
                                   **ctx.opts)
        return None, torch.stack(grads, dim=a), None, None


class _FlashAttnFunc(torch.autograd.Function):
    """flash_attn_func's autograd: o = attention(q, k, v, **options), differentiable in q, k and v.

    Leaner than FlashAttnFunction, for the host cost of a call: one output (the log-sum-exp is saved for the backward,
    not returned, so there is no second output to wrap and mark non-differentiable), the options as one tuple
    (causal, window, softmax_scale, deterministic), and both passes straight on the fast path (the general path takes
    what it does not, with the same results and errors)."""

    @staticmethod
    def forward(ctx, q, k, v, opts):
        causal, window, scale, deterministic = opts
        kind = _fast.KINDS.get(type(q))
        r = None
        if kind is not None:  # grad mode is off inside forward: no grad check
            r = _fwd_fast(kind, q, k, v, causal, "bottom_right", window, scale, "auto", deterministic, True, None, False)
        if r is None:
            r = attention(q, k, v, causal=causal, window=window, softmax_scale=scale, deterministic=deterministic,
                          return_lse=True)
        o, lse = r
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.opts = opts
        return o

    @staticmethod
    def backward(ctx, do):
        if do is None:
            return None, None, None, None
        q, k, v, o, lse = ctx.saved_tensors
        causal, window, scale, deterministic = ctx.opts
        do = _grad_out(do)
        kind = _fast.KINDS.get(type(q))
        r = None
        if kind is not None:
            r = _bwd_fast(kind, q, k, v, o, do, lse, causal, "bottom_right", window, scale, "auto", deterministic)
        if r is None:
            r = attention_backward(q, k, v, o, do, lse, causal=causal, window=window, softmax_scale=scale,
                                   deterministic=deterministic)
        dq, dk, dv = r
        return dq, dk, dv, None


def _c_apply(fn_class):
    """fn_class.apply without the Python layer torch >= 2.0 puts around the C++ one (about 2.7 us of a call's host
    cost in torch 2.11), or None where this torch lacks what it needs (then fn_class.apply is used).

    That layer, for a Function without setup_context (as _FlashAttnFunc), does exactly this: with functorch transforms
    (vmap, grad, ...) active it raises, so the caller must then use the full fn_class.apply; otherwise it unwraps
    tensors that escaped a dead functorch transform (torch._C._functorch.unwrap_if_dead, done here per tensor) and
    calls the C++ apply."""
    single = getattr(torch.autograd.function, "_SingleLevelFunction", None)
    active = getattr(torch._C, "_are_functorch_transforms_active", None)
    unwrap = getattr(getattr(torch._C, "_functorch", None), "unwrap_if_dead", None)
    if single is None or active is None or unwrap is None or not issubclass(fn_class, single):
        return None
    if fn_class.setup_context is not single.setup_context:
        return None  # the Python layer also binds default arguments for these
    apply = super(single, fn_class).apply  # torch._C._FunctionBase.apply, bound to fn_class
    full = fn_class.apply

    def c_apply(q, k, v, opts):
        if active():
            return full(q, k, v, opts)
        return apply(unwrap(q), unwrap(k), unwrap(v), opts)

    return c_apply


_flash_attn_apply = _c_apply(_FlashAttnFunc) or _FlashAttnFunc.apply


def _attention_autograd(q, k, v, return_lse, opts):
    """libflash.attention() for torch inputs that require grad."""
    o, lse = FlashAttnFunction.apply(q, k, v, opts)
    return (o, lse) if return_lse else o


def _opts(softmax_scale, causal, window_size, deterministic):
    return dict(causal=causal, causal_alignment="bottom_right", window=_window(window_size),
                softmax_scale=softmax_scale, deterministic=deterministic)


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                    alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """out [batch, seqlen_q, heads_q, head_dim] = softmax(softmax_scale * q k^T + mask) v (FlashAttention-2).
    Differentiable in q, k, v; deterministic=True makes the backward bitwise reproducible."""
    if dropout_p or softcap or alibi_slopes is not None or return_attn_probs:
        _check_unsupported(dropout_p, softcap, alibi_slopes, return_attn_probs)
    if type(q) not in _PLAIN_TENSORS or type(k) not in _PLAIN_TENSORS or type(v) not in _PLAIN_TENSORS:
        _check_tensors(q, k, v)  # (plain tensors pass it: skipped for them, for the host cost)
    if _use_custom_op(q, k, v):
        return _op_fwd(q, k, v, softmax_scale, causal, window_size, deterministic)
    window = _window(window_size)
    if _grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        return _flash_attn_apply(q, k, v, (causal, window, softmax_scale, deterministic))
    # No gradient wanted: the forward alone, without the log-sum-exp autograd would keep; straight to the fast path
    # (grad need already settled), else the general path, which names any problem.
    kind = _fast.KINDS.get(type(q))
    if kind is not None:
        o = _fwd_fast(kind, q, k, v, causal, "bottom_right", window, softmax_scale, "auto", deterministic, False, None,
                      False)
        if o is not None:
            return o
    return attention(q, k, v, causal=causal, window=window, softmax_scale=softmax_scale, deterministic=deterministic)


def flash_attn_kvpacked_func(q, kv, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                             softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """kv: [batch, seqlen_k, 2, heads_kv, head_dim] (read in place through strided views)."""
    _check_unsupported(dropout_p, softcap, alibi_slopes, return_attn_probs)
    _check_tensors(q, kv)
    if _use_custom_op(q, kv):
        return _op_fwd(q, kv[:, :, 0], kv[:, :, 1], softmax_scale, causal, window_size, deterministic)
    o, _ = _PackedFunction.apply(q, kv, _opts(softmax_scale, causal, window_size, deterministic))
    return o


def flash_attn_qkvpacked_func(qkv, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                              softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """qkv: [batch, seqlen, 3, heads, head_dim] (read in place through strided views)."""
    _check_unsupported(dropout_p, softcap, alibi_slopes, return_attn_probs)
    _check_tensors(qkv)
    if _use_custom_op(qkv):
        return _op_fwd(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], softmax_scale, causal, window_size, deterministic)
    o, _ = _PackedFunction.apply(None, qkv, _opts(softmax_scale, causal, window_size, deterministic))
    return o


def _varlen_opts(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal, window_size,
                 deterministic):
    o = _opts(softmax_scale, causal, window_size, deterministic)
    o.update(cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k, max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k)
    return o


def _check_block_table(block_table):
    if block_table is not None:
        raise NotImplementedError("libflash: block_table (a paged KV cache) is not supported in "
                                  "flash_attn_varlen_func; use flash_attn_with_kvcache for paged caches, and pass "
                                  "block_table=None")


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                           softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                           deterministic=False, return_attn_probs=False, block_table=None):
    """FlashAttention-2's flash_attn_varlen_func: a packed batch of sequences of different lengths.

    q: [total_q, heads_q, head_dim], k, v: [total_k, heads_kv, head_dim]; cu_seqlens_q, cu_seqlens_k: int32 [batch + 1]
    offsets on q's device (sequence i owns rows cu_seqlens_q[i] .. cu_seqlens_q[i+1] - 1 of q and cu_seqlens_k[i] ..
    cu_seqlens_k[i+1] - 1 of k and v); max_seqlen_q, max_seqlen_k: ints, at least the longest sequence (None: computed
    from the offsets with one device-to-host copy). Causal (bottom-right) and window_size apply per sequence. Returns
    out [total_q, heads_q, head_dim] (rows past cu_seqlens_q[-1] are 0). Differentiable in q, k, v; deterministic=True
    makes the backward bitwise reproducible. Not supported (NotImplementedError): dropout_p > 0, softcap,
    alibi_slopes, return_attn_probs, block_table."""
    _check_unsupported(dropout_p, softcap, alibi_slopes, return_attn_probs)
    _check_block_table(block_table)
    _check_tensors(q, k, v)
    if _use_custom_op(q, k, v):
        return _op_varlen_fwd(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal,
                              window_size, deterministic)
    opts = _varlen_opts(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal, window_size,
                        deterministic)
    # With inputs that require grad this goes through FlashAttnFunction (max_seqlen_* resolved once, for both passes).
    return attention(q, k, v, **opts)


def flash_attn_varlen_kvpacked_func(q, kv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                                    softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                                    alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """flash_attn_varlen_func with kv: [total_k, 2, heads_kv, head_dim] (read in place through strided views)."""
    _check_unsupported(dropout_p, softcap, alibi_slopes, return_attn_probs)
    _check_tensors(q, kv)
    if _use_custom_op(q, kv):
        return _op_varlen_fwd(q, kv[:, 0], kv[:, 1], cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                              softmax_scale, causal, window_size, deterministic)
    opts = _varlen_opts(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal, window_size,
                        deterministic)
    _resolve_max_seqlens(q, opts)
    o, _ = _PackedFunction.apply(q, kv, opts, 1)
    return o


def flash_attn_varlen_qkvpacked_func(qkv, cu_seqlens, max_seqlen, dropout_p=0.0, softmax_scale=None, causal=False,
                                     window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
                                     return_attn_probs=False):
    """flash_attn_varlen_func with qkv: [total, 3, heads, head_dim] (read in place through strided views); queries and
    keys share cu_seqlens and max_seqlen."""
    _check_unsupported(dropout_p, softcap, alibi_slopes, return_attn_probs)
    _check_tensors(qkv)
    if _use_custom_op(qkv):
        return _op_varlen_fwd(qkv[:, 0], qkv[:, 1], qkv[:, 2], cu_seqlens, cu_seqlens, max_seqlen, max_seqlen,
                              softmax_scale, causal, window_size, deterministic)
    opts = _varlen_opts(cu_seqlens, cu_seqlens, max_seqlen, max_seqlen, softmax_scale, causal, window_size,
                        deterministic)
    _resolve_max_seqlens(qkv, opts)
    o, _ = _PackedFunction.apply(None, qkv, opts, 1)
    return o


def _resolve_max_seqlens(like, opts):
    """Fills in opts' max_seqlen_q / max_seqlen_k when None (one device-to-host copy for device offsets), so that the
    backward does not compute them again."""
    if opts["max_seqlen_q"] is None or opts["max_seqlen_k"] is None:
        from ._arrays import describe

        vl = {n: opts.get(n) for n in ("cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q", "max_seqlen_k", "seqused_k")}
        opts.update(_varlen_resolved(vl, describe(like, "q"), None))


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, rotary_cos=None, rotary_sin=None, cache_seqlens=None,
                            cache_batch_idx=None, cache_leftpad=None, block_table=None, softmax_scale=None,
                            causal=False, window_size=(-1, -1), softcap=0.0, rotary_interleaved=True,
                            alibi_slopes=None, num_splits=0, return_softmax_lse=False):
    """FlashAttention-2's flash_attn_with_kvcache over libflash.attention_with_kvcache (flash_fwd_kvcache).

    q: [batch, seqlen, heads_q, head_dim]; k_cache, v_cache: [batch_cache, seqlen_cache, heads_kv, head_dim], or
    with block_table [num_blocks, page_block_size, heads_kv, head_dim] (any page_block_size >= 1; flash-attn needs a
    multiple of 256); k, v: optional [batch, seqlen_new, heads_kv, head_dim], written into the caches IN PLACE at
    positions cache_seqlens[i] .. cache_seqlens[i] + seqlen_new - 1 before attending (cache_seqlens itself is not
    updated). cache_seqlens: an int (broadcast to every sequence, as flash-attn does) or an int32 tensor [batch] on
    q's device; None means every sequence fills the whole cache (not allowed with k, v). cache_batch_idx: int32
    [batch], the cache row of each sequence (contiguous cache only). block_table: int32 [batch,
    max_num_blocks_per_seq]. Causal and window_size are aligned bottom-right per sequence. num_splits: 0 lets the
    library choose. Returns out [batch, seqlen, heads_q, head_dim], and the fp32 softmax_lse [batch, heads_q,
    seqlen] when return_softmax_lse.

    Differences from flash-attn: no rotary embedding (rotary_cos/rotary_sin), cache_leftpad, softcap or
    alibi_slopes (NotImplementedError); a torch input that requires grad in grad mode is refused (the call has no
    backward; flash-attn returns a result cut off from the graph). CPU tensors run on the library's CPU backend;
    CUDA tensors need libflash's GPU kernels for this call (FlashError FLASH_ERROR_ALGORITHM_UNAVAILABLE until they
    are built)."""
    if rotary_cos is not None or rotary_sin is not None:
        raise NotImplementedError("libflash: rotary_cos/rotary_sin (rotary embedding of q and k) are not supported; "
                                  "apply the rotary embedding to q and k before the call and pass rotary_cos=None, "
                                  "rotary_sin=None")
    if cache_leftpad is not None:
        raise NotImplementedError("libflash: cache_leftpad is not supported; pass cache_leftpad=None")
    if softcap:
        raise NotImplementedError("libflash: softcap=%r is not supported; pass softcap=0.0" % (softcap,))
    if alibi_slopes is not None:
        raise NotImplementedError("libflash: alibi_slopes is not supported; pass alibi_slopes=None")
    _check_tensors(q, k_cache, v_cache, *[t for t in (k, v) if t is not None])
    if (k is None) != (v is None):
        raise ValueError("libflash: k and v must be given together (got %s)" % ("k only" if v is None else "v only"))
    if cache_seqlens is None:
        if k is not None:
            raise ValueError("libflash: cache_seqlens is required when k and v are given (where to append them)")
        # flash-attn: every sequence attends to the whole cache.
        cache_seqlens = k_cache.shape[1] * (block_table.shape[1] if block_table is not None else 1)
    if _use_custom_op(q, k_cache, v_cache, *[t for t in (k, v) if t is not None]):
        return _op_fwd_kvcache(q, k_cache, v_cache, k, v, cache_seqlens, cache_batch_idx, block_table, softmax_scale,
                               causal, window_size, num_splits, return_softmax_lse)
    # An int is broadcast to an int32 [batch] array on q's device (range-checked, as flash-attn's torch.full).
    return attention_with_kvcache(q, k_cache, v_cache, k=k, v=v, cache_seqlens=cache_seqlens, block_table=block_table,
                                  cache_batch_idx=cache_batch_idx, causal=causal, window=_window(window_size),
                                  softmax_scale=softmax_scale, num_splits=num_splits, return_lse=return_softmax_lse)


# ---- Custom ops (torch.compile, export, CUDA graphs), PyTorch >= 2.4 ---------------------------------------------------
_is_compiling = getattr(getattr(torch, "compiler", None), "is_compiling", None)
if _is_compiling is None:
    _dynamo = getattr(torch, "_dynamo", None)
    _is_compiling = getattr(_dynamo, "is_compiling", None) or (lambda: False)
_dispatch_modes = getattr(torch._C, "_len_torch_dispatch_mode", None) or (lambda: 0)
_PLAIN_TENSORS = (torch.Tensor, torch.nn.Parameter)
_grad_enabled = torch.is_grad_enabled

_OPS = None  # namespace with fwd, bwd, fwd_kvcache, varlen_fwd, varlen_bwd once defined
custom_op_error = None  # why the custom ops are unavailable, when they are


def custom_op_available():
    """Whether the torch.library custom ops (torch.ops.libflash.fwd, .bwd, .fwd_kvcache, .varlen_fwd, .varlen_bwd) are
    defined: PyTorch >= 2.4."""
    return _OPS is not None


def _use_custom_op(*ts):
    """Whether a call goes through the custom op (see the module docstring): tracing by torch.compile / export, a
    dispatch mode, or a tensor subclass; or custom_op_mode "always"."""
    if _OPS is None or custom_op_mode == "never":
        return False
    if custom_op_mode == "always" or _is_compiling():
        return True
    if _dispatch_modes():
        return True
    for t in ts:
        if type(t) not in _PLAIN_TENSORS:
            return True
    return False


def _scale(softmax_scale):
    return None if softmax_scale is None else float(softmax_scale)


def _op_fwd(q, k, v, softmax_scale, causal, window_size, deterministic):
    left, right = _window(window_size)
    return _OPS.fwd(q, k, v, _scale(softmax_scale), bool(causal), left, right, bool(deterministic))[0]


def _op_fwd_kvcache(q, k_cache, v_cache, k, v, cache_seqlens, cache_batch_idx, block_table, softmax_scale, causal,
                    window_size, num_splits, return_lse):
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (q, k_cache, v_cache, k, v)):
        raise RuntimeError("libflash: attention_with_kvcache has no backward, but an input requires grad; run it under "
                           "torch.no_grad() or torch.inference_mode(), or pass detached tensors")
    if isinstance(cache_seqlens, int):  # one length for every sequence: a fill on q's device (no host copy)
        if not -2 ** 31 <= cache_seqlens < 2 ** 31:
            raise error(_capi.FLASH_ERROR_INVALID_ARGUMENT, "cache_seqlens holds %d, which does not fit int32"
                        % cache_seqlens)
        cache_seqlens = torch.full((q.shape[0],), cache_seqlens, dtype=torch.int32, device=q.device)
    elif not isinstance(cache_seqlens, torch.Tensor):  # host data (a list, numpy): checked, copied to q's device
        cache_seqlens = torch.from_numpy(_host_int32(cache_seqlens, "cache_seqlens")).to(q.device)
    left, right = _window(window_size)
    o, lse = _OPS.fwd_kvcache(q, k_cache, v_cache, k, v, cache_seqlens, cache_batch_idx, block_table,
                              _scale(softmax_scale), bool(causal), left, right, int(num_splits))
    return (o, lse) if return_lse else o


def _offsets_tensor(x, name, q):
    """A varlen array as an int32 tensor for the custom ops: tensors as they are (the op checks them), host data (a
    list, numpy) range-checked and copied to q's device."""
    if isinstance(x, torch.Tensor):
        return x
    return torch.from_numpy(_host_int32(x, name)).to(q.device)


def _max_seqlen(m, cu):
    """An int for the custom ops; None: the longest sequence of cu (a device-to-host copy, which a CUDA graph or
    torch.compile cannot record: pass max_seqlen_* to flash_attn_varlen_func)."""
    if m is not None:
        return int(m)
    lens = cu[1:].long() - cu[:-1].long()
    return max(int(lens.max().item()), 0) if lens.numel() else 0


def _op_varlen_fwd(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal,
                   window_size, deterministic):
    cq = _offsets_tensor(cu_seqlens_q, "cu_seqlens_q", q)
    ck = cq if cu_seqlens_k is cu_seqlens_q else _offsets_tensor(cu_seqlens_k, "cu_seqlens_k", q)
    left, right = _window(window_size)
    return _OPS.varlen_fwd(q, k, v, cq, ck, None, _max_seqlen(max_seqlen_q, cq),
                           _max_seqlen(max_seqlen_k, ck), _scale(softmax_scale), bool(causal), left,
                           right, bool(deterministic))[0]


def _fake_3d(name, *ts):
    for t in ts:
        if t.dim() != 3:
            raise error(_capi.FLASH_ERROR_BAD_SHAPE, "%s must be 3-d [total, heads, head_dim] in a packed "
                        "variable-length batch (got %d dimensions)" % (name, t.dim()))


def _fake_4d(name, *ts):
    for t in ts:
        if t.dim() != 4:
            raise error(_capi.FLASH_ERROR_BAD_SHAPE, "%s must be 4-d [batch, seqlen, heads, head_dim] (got %d "
                        "dimensions)" % (name, t.dim()))


def _define_custom_ops():
    Tensor = torch.Tensor

    @torch.library.custom_op("libflash::fwd", mutates_args=())
    def fwd(q: Tensor, k: Tensor, v: Tensor, softmax_scale: Optional[float], causal: bool, window_left: int,
            window_right: int, deterministic: bool) -> Tuple[Tensor, Tensor]:
        """(O, LSE) of libflash.attention(q, k, v, return_lse=True, ...), bottom-right aligned masks."""
        return _attention_nograd(q, k, v, causal, (window_left, window_right), softmax_scale, deterministic, True)

    @fwd.register_fake
    def _fwd_fake(q, k, v, softmax_scale, causal, window_left, window_right, deterministic):
        _fake_4d("q, k and v", q, k, v)
        b, sq, hq, d = q.shape
        return q.new_empty((b, sq, hq, d)), q.new_empty((b, hq, sq), dtype=torch.float32)

    @torch.library.custom_op("libflash::bwd", mutates_args=())
    def bwd(do: Tensor, q: Tensor, k: Tensor, v: Tensor, o: Tensor, lse: Tensor, softmax_scale: Optional[float],
            causal: bool, window_left: int, window_right: int, deterministic: bool) -> Tuple[Tensor, Tensor, Tensor]:
        """(dQ, dK, dV) of libflash.attention_backward for the forward's options."""
        return attention_backward(q, k, v, o, do, lse, causal=causal, window=(window_left, window_right),
                                  softmax_scale=softmax_scale, deterministic=deterministic)

    @bwd.register_fake
    def _bwd_fake(do, q, k, v, o, lse, softmax_scale, causal, window_left, window_right, deterministic):
        _fake_4d("q, k and v", q, k, v)
        return q.new_empty(q.shape), q.new_empty(k.shape), q.new_empty(v.shape)

    def _setup(ctx, inputs, output):
        q, k, v, softmax_scale, causal, window_left, window_right, deterministic = inputs
        o, lse = output
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.opts = (softmax_scale, causal, window_left, window_right, deterministic)

    def _backward(ctx, do, _dlse):
        q, k, v, o, lse = ctx.saved_tensors
        dq, dk, dv = torch.ops.libflash.bwd.default(_grad_out(do), q, k, v, o, lse, *ctx.opts)
        return dq, dk, dv, None, None, None, None, None

    fwd.register_autograd(_backward, setup_context=_setup)

    @torch.library.custom_op("libflash::fwd_kvcache", mutates_args=("k_cache", "v_cache"))
    def fwd_kvcache(q: Tensor, k_cache: Tensor, v_cache: Tensor, k: Optional[Tensor], v: Optional[Tensor],
                    cache_seqlens: Tensor, cache_batch_idx: Optional[Tensor], block_table: Optional[Tensor],
                    softmax_scale: Optional[float], causal: bool, window_left: int, window_right: int,
                    num_splits: int) -> Tuple[Tensor, Tensor]:
        """(O, LSE) of libflash.attention_with_kvcache; k and v (when given) are appended to the caches in place."""
        return attention_with_kvcache(q, k_cache, v_cache, k=k, v=v, cache_seqlens=cache_seqlens,
                                      cache_batch_idx=cache_batch_idx, block_table=block_table, causal=causal,
                                      window=(window_left, window_right), softmax_scale=softmax_scale,
                                      num_splits=num_splits, return_lse=True)

    @fwd_kvcache.register_fake
    def _kvcache_fake(q, k_cache, v_cache, k, v, cache_seqlens, cache_batch_idx, block_table, softmax_scale, causal,
                      window_left, window_right, num_splits):
        _fake_4d("q", q)
        b, sn, hq, d = q.shape
        return q.new_empty((b, sn, hq, d)), q.new_empty((b, hq, sn), dtype=torch.float32)

    @torch.library.custom_op("libflash::varlen_fwd", mutates_args=())
    def varlen_fwd(q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Tensor, cu_seqlens_k: Tensor,
                   seqused_k: Optional[Tensor], max_seqlen_q: int, max_seqlen_k: int, softmax_scale: Optional[float],
                   causal: bool, window_left: int, window_right: int, deterministic: bool) -> Tuple[Tensor, Tensor]:
        """(O, LSE) of libflash.attention over a packed variable-length batch, bottom-right aligned masks."""
        with torch.no_grad():
            return attention(q, k, v, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k, seqused_k=seqused_k,
                             max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k, causal=causal,
                             window=(window_left, window_right), softmax_scale=softmax_scale,
                             deterministic=deterministic, return_lse=True)

    @varlen_fwd.register_fake
    def _varlen_fwd_fake(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k, softmax_scale,
                         causal, window_left, window_right, deterministic):
        _fake_3d("q, k and v", q, k, v)
        total_q, hq, d = q.shape
        return q.new_empty((total_q, hq, d)), q.new_empty((hq, total_q), dtype=torch.float32)

    @torch.library.custom_op("libflash::varlen_bwd", mutates_args=())
    def varlen_bwd(do: Tensor, q: Tensor, k: Tensor, v: Tensor, o: Tensor, lse: Tensor, cu_seqlens_q: Tensor,
                   cu_seqlens_k: Tensor, seqused_k: Optional[Tensor], max_seqlen_q: int, max_seqlen_k: int,
                   softmax_scale: Optional[float], causal: bool, window_left: int, window_right: int,
                   deterministic: bool) -> Tuple[Tensor, Tensor, Tensor]:
        """(dQ, dK, dV) of libflash.attention_backward over a packed variable-length batch."""
        return attention_backward(q, k, v, o, do, lse, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
                                  seqused_k=seqused_k, max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k,
                                  causal=causal, window=(window_left, window_right), softmax_scale=softmax_scale,
                                  deterministic=deterministic)

    @varlen_bwd.register_fake
    def _varlen_bwd_fake(do, q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k,
                         softmax_scale, causal, window_left, window_right, deterministic):
        _fake_3d("q, k and v", q, k, v)
        return q.new_empty(q.shape), q.new_empty(k.shape), q.new_empty(v.shape)

    def _varlen_setup(ctx, inputs, output):
        q, k, v, cu_q, cu_k, seqused_k = inputs[:6]
        o, lse = output
        ctx.save_for_backward(q, k, v, o, lse, cu_q, cu_k, seqused_k)
        ctx.opts = tuple(inputs[6:])

    def _varlen_backward(ctx, do, _dlse):
        q, k, v, o, lse, cu_q, cu_k, seqused_k = ctx.saved_tensors
        dq, dk, dv = torch.ops.libflash.varlen_bwd.default(_grad_out(do), q, k, v, o, lse, cu_q, cu_k, seqused_k,
                                                           *ctx.opts)
        return (dq, dk, dv) + (None,) * 10

    varlen_fwd.register_autograd(_varlen_backward, setup_context=_varlen_setup)

    ops = torch.ops.libflash  # called as OpOverloads (what traced graphs hold); the definitions stay referenced
    return types.SimpleNamespace(fwd=ops.fwd.default, bwd=ops.bwd.default, fwd_kvcache=ops.fwd_kvcache.default,
                                 varlen_fwd=ops.varlen_fwd.default, varlen_bwd=ops.varlen_bwd.default,
                                 definitions=(fwd, bwd, fwd_kvcache, varlen_fwd, varlen_bwd))


if hasattr(torch, "library") and hasattr(torch.library, "custom_op"):
    try:
        _OPS = _define_custom_ops()
    except Exception as e:  # e.g. the ops already defined by another copy of this module: the direct path only
        custom_op_error = "%s: %s" % (type(e).__name__, e)
else:
    custom_op_error = "torch %s has no torch.library.custom_op (PyTorch >= 2.4)" % torch.__version__

# ---- SDPA implementation (PyTorch >= 2.11) ------------------------------------------------------------------------------
from ._sdpa import IMPL_NAME as SDPA_IMPL_NAME  # noqa: E402
from ._sdpa import available as sdpa_impl_available  # noqa: E402
from ._sdpa import register as _register_sdpa  # noqa: E402

_register_sdpa()  # registers the name only; torch.nn.attention.activate_flash_attention_impl("libflash") activates it
