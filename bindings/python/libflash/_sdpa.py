"""libflash as the flash-attention implementation behind torch.nn.functional.scaled_dot_product_attention
(PyTorch >= 2.11: torch.nn.attention.register_flash_attention_impl, the registry FA3 and FA4 use).

    import torch, libflash.torch                                  # registers the name "libflash" (no activation)
    torch.nn.attention.activate_flash_attention_impl("libflash")  # the user opts in
    o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)  # the flash backend runs libflash
    torch.nn.attention.restore_flash_attention_impl()             # back to the built-in kernels (where exported)

Activation overrides, for CUDA tensors, the kernels of
    aten::_scaled_dot_product_flash_attention            (SDPA's flash forward, [batch, heads, seqlen, head_dim])
    aten::_scaled_dot_product_flash_attention_backward
    aten::_flash_attention_forward                       (the FA2-layout op underneath, [batch, seqlen, heads, d])
    aten::_flash_attention_backward
with kernels that call libflash where the call means the same thing to both, and otherwise the kernel that was
registered before (torch.library.get_kernel, taken at activation, called through the dispatcher with the same
dispatch keys): dropout_p > 0, return_debug_mask, varlen (cum_seq_q / cum_seq_k), seqused_k, alibi_slopes, dtypes other
than fp16/bf16, a causal mask or window with seqlen_q != seqlen_k (top-left vs bottom-right alignment is not something
to guess), and every call the library refuses (FlashError: an unsupported head dim or GPU, strides, ...). A refused call
writes nothing, so falling back after it is safe. Keyword arguments a later schema adds (block_table, num_splits,
...) are passed through to the built-in kernel whenever they hold a value. Outputs have the strides the built-in kernels (and their meta
functions, which torch.compile trusts) give: empty_like of the [batch, seqlen, heads, d] views of the inputs.
The backward uses the deterministic kernel when torch.are_deterministic_algorithms_enabled().

Untested here: this needs PyTorch >= 2.11 and a CUDA GPU (the second half of tests/test_torch_compile.py runs on one
and skips elsewhere).
"""

import torch

from . import _attention, _capi, _fast
from ._attention import _NO_WINDOW, _attention_nograd, attention_backward
from ._errors import FlashError

IMPL_NAME = "libflash"
_OPS = ("_flash_attention_forward", "_flash_attention_backward", "_scaled_dot_product_flash_attention",
        "_scaled_dot_product_flash_attention_backward")
_HALF = (torch.float16, torch.bfloat16)
_registered = False
error = None  # why registering failed, if it did


def available():
    """Whether this PyTorch has the flash-attention implementation registry (2.11) and torch.library.get_kernel."""
    attn = getattr(getattr(torch, "nn", None), "attention", None)
    return (attn is not None and hasattr(attn, "register_flash_attention_impl")
            and hasattr(attn, "activate_flash_attention_impl") and hasattr(torch.library, "get_kernel"))


def register():
    """Registers "libflash" with torch.nn.attention (once). Returns whether it is registered. Never activates it:
    torch.nn.attention.activate_flash_attention_impl("libflash") does, at the user's choice."""
    global _registered
    if _registered:
        return True
    global error
    if not available():
        return False
    try:
        torch.nn.attention.register_flash_attention_impl(IMPL_NAME, register_fn=activate_kernels)
    except Exception as e:  # a registry that changed shape must not break `import libflash.torch`
        error = "%s: %s" % (type(e).__name__, e)
        return False
    _registered = True
    return True


class _Handle:
    """What activate_flash_attention_impl keeps; remove() (restore_flash_attention_impl) unregisters the kernels."""

    def __init__(self, library):
        self.library = library

    def remove(self):
        lib, self.library = self.library, None
        if lib is not None and hasattr(lib, "_destroy"):
            lib._destroy()


def activate_kernels():
    """The register_fn: takes the kernels registered now for CUDA (the built-in ones, or whatever the user installed)
    as the fallbacks, then installs libflash's in front of them."""
    original = {name: torch.library.get_kernel("aten::" + name, "CUDA") for name in _OPS}
    lib = torch.library.Library("aten", "IMPL", "CUDA")  # noqa: TOR901 (the registry's own pattern)
    lib.impl("_scaled_dot_product_flash_attention", _sdpa_forward(original["_scaled_dot_product_flash_attention"]),
             "CUDA", with_keyset=True)
    lib.impl("_scaled_dot_product_flash_attention_backward",
             _sdpa_backward(original["_scaled_dot_product_flash_attention_backward"]), "CUDA", with_keyset=True)
    lib.impl("_flash_attention_forward", _flash_forward(original["_flash_attention_forward"]), "CUDA",
             with_keyset=True)
    lib.impl("_flash_attention_backward", _flash_backward(original["_flash_attention_backward"]), "CUDA",
             with_keyset=True)
    return _Handle(lib)


# ---- When libflash takes a call --------------------------------------------------------------------------------------
def _dense_ok(*ts):
    """Dense 4-d fp16/bf16 CUDA tensors of one dtype (what else matters, the library checks and refuses)."""
    dt = ts[0].dtype
    if dt not in _HALF:
        return False
    for t in ts:
        if t.dim() != 4 or t.dtype != dt or not t.is_cuda:
            return False
    return True


def _aligned(masked, seqlen_q, seqlen_k):
    """A causal mask or a window means the same to both only when seqlen_q == seqlen_k."""
    return not masked or seqlen_q == seqlen_k


def _any(extra):
    """Whether a keyword argument of a newer schema than this file knows (e.g. block_table, num_splits) has a value:
    the built-in kernel then takes the call."""
    for v in extra.values():
        if v is not None:
            return True
    return False


def _window(left, right):
    return (-1 if left is None else int(left)), (-1 if right is None else int(right))


def _extras(query):
    """rng_state [2] and philox offset [] (uint64, unused without dropout: never read) and the empty debug mask, as the
    built-in kernels return them, without launching anything. (empty_strided: about 1.9 us each in torch 2.11 where
    torch.empty with the same keywords costs 3.)"""
    dev = query.device
    return (_empty_strided((2,), (1,), dtype=_U64, device=dev), _empty_strided((), (), dtype=_U64, device=dev),
            _empty_strided((0,), (1,), dtype=query.dtype, device=dev))


_empty_strided = torch.empty_strided
_U64 = getattr(torch, "uint64", None)  # (torch >= 2.3; the kernels run only on 2.11)


def _try(fn):
    try:
        return fn()
    except FlashError:
        return None  # refused before anything ran: the built-in kernel takes the call


def _forward_bshd(q, k, v, causal, window, scale):
    """(out, lse) on [batch, seqlen, heads, d] tensors, out laid out as empty_like(q) (the built-in kernel's layout)."""
    out = torch.empty_like(q)
    return _attention_nograd(q, k, v, causal, window, scale, False, True, out)


def _backward_bshd(do, q, k, v, o, lse, causal, window, scale):
    if do.stride(-1) != 1:
        do = do.contiguous()
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    return attention_backward(q, k, v, o, do, lse, causal=causal, window=window, softmax_scale=scale,
                              deterministic=torch.are_deterministic_algorithms_enabled(), dq=dq, dk=dk, dv=dv)


# ---- The fast path: SDPA's [batch, heads, seqlen, d] tensors described as libflash's [batch, seqlen, heads, d] from
# their shapes and strides (TorchKind.fields_t12), with no transposed views and the outputs allocated in the built-in
# kernels' layout directly (TorchKind.empty_like_t12). Anything it does not take goes the general way above.

def _fast_fields(kind, ts):
    """fields_t12 of every tensor of ts (all of the fast torch kind), or None."""
    kinds = _fast.KINDS
    out = []
    for t in ts:
        if kinds.get(type(t)) is not kind:
            return None
        f = kind.fields_t12(t)
        if f is None:
            return None
        out.append(f)
    return out


def _forward_bhsd(q, k, v, causal, scale):
    """(out, lse) for [batch, heads, seqlen, d] q, k, v with out [batch, heads, seqlen, d] in the built-in kernel's
    layout; None when the library refuses the call (the built-in kernel then takes it)."""
    kind = _fast.TorchKind
    f = _fast_fields(kind, (q, k, v))
    if f is not None:
        try:
            tmpl = _attention._template(_attention._FWD, _capi.flash_fwd_args_init, causal, "bottom_right",
                                        _NO_WINDOW, scale, "auto", False)
        except Exception:
            tmpl = None  # the general path below raises it, or falls back, as before
        if tmpl is not None:
            out = kind.empty_like_t12(q, f[0])
            try:
                return _attention._fwd_run(kind, q, f[0], f[1], f[2], tmpl, True, out, kind.fields_t12(out))
            except FlashError:
                return None
    r = _try(lambda: _forward_bshd(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal, _NO_WINDOW,
                                   scale))
    return None if r is None else (r[0].transpose(1, 2), r[1])


def _backward_bhsd(do, q, k, v, o, lse, causal, scale):
    """(dq, dk, dv) for [batch, heads, seqlen, d] tensors, each in the built-in kernel's layout; None when the library
    refuses the call."""
    kind = _fast.TorchKind
    f = _fast_fields(kind, (do, q, k, v, o))
    fl = kind.fields(lse, 3) if f is not None and _fast.KINDS.get(type(lse)) is kind else None
    if fl is not None and f[0][12] == 1:  # (a dO whose last dimension is strided is made contiguous below)
        try:
            tmpl = _attention._template(_attention._BWD, _capi.flash_bwd_args_init, causal, "bottom_right",
                                        _NO_WINDOW, scale, "auto", torch.are_deterministic_algorithms_enabled())
        except Exception:
            tmpl = None
        if tmpl is not None:
            grads = (kind.empty_like_t12(q, f[1]), kind.empty_like_t12(k, f[2]), kind.empty_like_t12(v, f[3]))
            try:
                return _attention._bwd_run(kind, (q, k, v), f[1], f[2], f[3], f[4], f[0], fl, tmpl, grads,
                                           [kind.fields_t12(g) for g in grads])
            except FlashError:
                return None
    r = _try(lambda: _backward_bshd(do.transpose(1, 2), q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                    o.transpose(1, 2), lse, causal, _NO_WINDOW, scale))
    return None if r is None else tuple(g.transpose(1, 2) for g in r)


# ---- The kernels ------------------------------------------------------------------------------------------------------
def _sdpa_forward(original):
    def kernel(keyset, query, key, value, dropout_p=0.0, is_causal=False, return_debug_mask=False, *, scale=None,
               **extra):
        r = None
        if ((not extra or not _any(extra)) and dropout_p == 0.0 and not return_debug_mask
                and _dense_ok(query, key, value) and _aligned(is_causal, query.shape[2], key.shape[2])):
            r = _forward_bhsd(query, key, value, bool(is_causal), scale)
        if r is None:
            return original.call_boxed(keyset, query, key, value, dropout_p, is_causal, return_debug_mask, scale=scale,
                                       **extra)
        out, lse = r
        rng, offset, debug = _extras(query)
        return out, lse, None, None, query.shape[2], key.shape[2], rng, offset, debug

    return kernel


def _sdpa_backward(original):
    def kernel(keyset, grad_out, query, key, value, out, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p,
               is_causal, philox_seed, philox_offset, *, scale=None, **extra):
        r = None
        if ((not extra or not _any(extra)) and dropout_p == 0.0 and cum_seq_q is None and cum_seq_k is None
                and _dense_ok(grad_out, query, key, value, out) and _aligned(is_causal, query.shape[2], key.shape[2])):
            r = _backward_bhsd(grad_out, query, key, value, out, logsumexp, bool(is_causal), scale)
        if r is None:
            return original.call_boxed(keyset, grad_out, query, key, value, out, logsumexp, cum_seq_q, cum_seq_k, max_q,
                                       max_k, dropout_p, is_causal, philox_seed, philox_offset, scale=scale, **extra)
        return r

    return kernel


def _flash_forward(original):
    def kernel(keyset, query, key, value, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, return_debug_mask,
               *, scale=None, window_size_left=None, window_size_right=None, seqused_k=None, alibi_slopes=None,
               **extra):
        r = None
        window = _window(window_size_left, window_size_right)
        masked = is_causal or window != _NO_WINDOW
        if (not _any(extra) and cum_seq_q is None and cum_seq_k is None and seqused_k is None and alibi_slopes is None and dropout_p == 0.0
                and not return_debug_mask and _dense_ok(query, key, value)
                and _aligned(masked, query.shape[1], key.shape[1])):
            r = _try(lambda: _forward_bshd(query, key, value, bool(is_causal), window, scale))
        if r is None:
            return original.call_boxed(keyset, query, key, value, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p,
                                       is_causal, return_debug_mask, scale=scale, window_size_left=window_size_left,
                                       window_size_right=window_size_right, seqused_k=seqused_k,
                                       alibi_slopes=alibi_slopes, **extra)
        out, lse = r
        rng, offset, debug = _extras(query)
        return out, lse, rng, offset, debug

    return kernel


def _flash_backward(original):
    def kernel(keyset, grad_out, query, key, value, out, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p,
               is_causal, rng_state, unused, *, scale=None, window_size_left=None, window_size_right=None, **extra):
        r = None
        window = _window(window_size_left, window_size_right)
        masked = is_causal or window != _NO_WINDOW
        if (not _any(extra) and dropout_p == 0.0 and cum_seq_q is None and cum_seq_k is None
                and _dense_ok(grad_out, query, key, value, out) and _aligned(masked, query.shape[1], key.shape[1])):
            r = _try(lambda: _backward_bshd(grad_out, query, key, value, out, logsumexp, bool(is_causal), window,
                                            scale))
        if r is None:
            return original.call_boxed(keyset, grad_out, query, key, value, out, logsumexp, cum_seq_q, cum_seq_k, max_q,
                                       max_k, dropout_p, is_causal, rng_state, unused, scale=scale,
                                       window_size_left=window_size_left, window_size_right=window_size_right,
                                       **extra)
        return r

    return kernel


__all__ = ["IMPL_NAME", "available", "register", "activate_kernels"]
