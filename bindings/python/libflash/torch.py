"""FlashAttention-2-compatible functions for PyTorch tensors, over libflash.

    # from flash_attn import flash_attn_func
    from libflash.torch import flash_attn_func

Same signatures and meaning as flash_attn 2.x: q [batch, seqlen_q, heads_q, head_dim], k/v
[batch, seqlen_k, heads_kv, head_dim]; causal is aligned bottom-right; window_size=(left, right) with -1
unbounded; softmax_scale None = 1/sqrt(head_dim). Runs on the tensors' CUDA device on the current stream
(or on the CPU backend for CPU tensors).

Not available (raise NotImplementedError): dropout_p > 0, softcap != 0, alibi_slopes, return_attn_probs.
Forward only: libflash has no backward pass yet, so inputs that require grad (with grad mode on) raise
RuntimeError; use torch.no_grad()/torch.inference_mode() or .detach().
"""

import torch  # the real PyTorch: absolute import

from ._attention import attention

__all__ = ["flash_attn_func", "flash_attn_kvpacked_func", "flash_attn_qkvpacked_func", "attention"]


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
    if torch.is_grad_enabled() and any(t.requires_grad for t in ts):
        raise RuntimeError("libflash.torch: an input requires grad, but libflash has no backward pass yet "
                           "(forward only). Run under torch.no_grad()/torch.inference_mode() or pass .detach()ed "
                           "tensors.")


def _window(window_size):
    if window_size is None:
        return (-1, -1)
    left, right = window_size
    return (int(left), int(right))


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                    alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """out [batch, seqlen_q, heads_q, head_dim] = softmax(softmax_scale * q k^T + mask) v (FlashAttention-2)."""
    _check_unsupported(dropout_p, softcap, alibi_slopes, return_attn_probs)
    _check_tensors(q, k, v)
    return attention(q, k, v, causal=causal, causal_alignment="bottom_right", window=_window(window_size),
                     softmax_scale=softmax_scale, deterministic=deterministic)


def flash_attn_kvpacked_func(q, kv, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                             softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """kv: [batch, seqlen_k, 2, heads_kv, head_dim] (read in place through strided views)."""
    _check_unsupported(dropout_p, softcap, alibi_slopes, return_attn_probs)
    _check_tensors(q, kv)
    return attention(q, kv[:, :, 0], kv[:, :, 1], causal=causal, causal_alignment="bottom_right",
                     window=_window(window_size), softmax_scale=softmax_scale, deterministic=deterministic)


def flash_attn_qkvpacked_func(qkv, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                              softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """qkv: [batch, seqlen, 3, heads, head_dim] (read in place through strided views)."""
    _check_unsupported(dropout_p, softcap, alibi_slopes, return_attn_probs)
    _check_tensors(qkv)
    return attention(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], causal=causal, causal_alignment="bottom_right",
                     window=_window(window_size), softmax_scale=softmax_scale, deterministic=deterministic)
