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

Not available (raise NotImplementedError): dropout_p > 0, softcap != 0, alibi_slopes, return_attn_probs.
"""

import torch  # the real PyTorch: absolute import

from ._attention import attention, attention_backward

__all__ = ["flash_attn_func", "flash_attn_kvpacked_func", "flash_attn_qkvpacked_func", "attention",
           "attention_backward", "FlashAttnFunction"]


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
    if window_size is None:
        return (-1, -1)
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

    Used by flash_attn_func and by libflash.attention() when a torch input requires grad."""

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
    """Attention over views of one packed tensor (qkv [b, s, 3, h, d] or kv [b, s, 2, h, d]), read in place;
    the gradient comes back as one tensor shaped like it (the library refuses outputs whose memory ranges
    interleave, so dq/dk/dv are computed apart and stacked once).

    `q` is None for qkv-packed input (q = packed[:, :, 0]); otherwise kv-packed with a separate q."""

    @staticmethod
    def forward(ctx, q, packed, opts):
        if q is None:
            qq, k, v = packed[:, :, 0], packed[:, :, 1], packed[:, :, 2]
        else:
            qq, k, v = q, packed[:, :, 0], packed[:, :, 1]
        o, lse = attention(qq, k, v, return_lse=True, **opts)
        ctx.q_separate = q is not None
        ctx.save_for_backward(*((q, packed, o, lse) if q is not None else (packed, o, lse)))
        ctx.opts = _backward_options(opts)
        ctx.mark_non_differentiable(lse)
        return o, lse

    @staticmethod
    def backward(ctx, do, _dlse):
        if do is None:
            return None, None, None
        if ctx.q_separate:
            q, packed, o, lse = ctx.saved_tensors
            dq, dk, dv = attention_backward(q, packed[:, :, 0], packed[:, :, 1], o, _grad_out(do), lse, **ctx.opts)
            return dq, torch.stack((dk, dv), dim=2), None
        packed, o, lse = ctx.saved_tensors
        grads = attention_backward(packed[:, :, 0], packed[:, :, 1], packed[:, :, 2], o, _grad_out(do), lse,
                                   **ctx.opts)
        return None, torch.stack(grads, dim=2), None


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
    _check_unsupported(dropout_p, softcap, alibi_slopes, return_attn_probs)
    _check_tensors(q, k, v)
    o, _ = FlashAttnFunction.apply(q, k, v, _opts(softmax_scale, causal, window_size, deterministic))
    return o


def flash_attn_kvpacked_func(q, kv, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                             softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """kv: [batch, seqlen_k, 2, heads_kv, head_dim] (read in place through strided views)."""
    _check_unsupported(dropout_p, softcap, alibi_slopes, return_attn_probs)
    _check_tensors(q, kv)
    o, _ = _PackedFunction.apply(q, kv, _opts(softmax_scale, causal, window_size, deterministic))
    return o


def flash_attn_qkvpacked_func(qkv, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                              softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """qkv: [batch, seqlen, 3, heads, head_dim] (read in place through strided views)."""
    _check_unsupported(dropout_p, softcap, alibi_slopes, return_attn_probs)
    _check_tensors(qkv)
    o, _ = _PackedFunction.apply(None, qkv, _opts(softmax_scale, causal, window_size, deterministic))
    return o
