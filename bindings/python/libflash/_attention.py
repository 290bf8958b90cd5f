"""libflash.attention(), devices(), version()."""

import ctypes
import threading
from collections import namedtuple

import numpy as np

from . import _capi, _fast, _mask
from ._arrays import Allocator, current_stream, describe, host_int32, kind_of, stream_pointer, to_host
from ._errors import FlashError, c_float, c_int, check, error

_ALIGNMENTS = {
    "bottom_right": _capi.FLASH_ALIGN_BOTTOM_RIGHT,
    "bottom-right": _capi.FLASH_ALIGN_BOTTOM_RIGHT,
    "br": _capi.FLASH_ALIGN_BOTTOM_RIGHT,
    "top_left": _capi.FLASH_ALIGN_TOP_LEFT,
    "top-left": _capi.FLASH_ALIGN_TOP_LEFT,
    "tl": _capi.FLASH_ALIGN_TOP_LEFT,
}


def _algorithm_id(algorithm):
    if isinstance(algorithm, str):
        a = _capi.flash_algorithm_from_name(algorithm.lower().encode())
        if a < 0:
            raise error(_capi.FLASH_ERROR_INVALID_ARGUMENT, "unknown algorithm %r (known: %s)"
                        % (algorithm, ", ".join(algorithm_names())))
        return a
    return c_int(algorithm, "algorithm", _capi.FLASH_ERROR_INVALID_ARGUMENT)


def algorithm_names():
    names = []
    for i in range(_capi.FLASH_ALGO_COUNT):
        n = _capi.flash_algorithm_name(i)
        if n:
            names.append(n.decode())
    return names


def _alignment(a):
    if isinstance(a, str):
        try:
            return _ALIGNMENTS[a.lower()]
        except KeyError:
            raise error(_capi.FLASH_ERROR_INVALID_ARGUMENT, "causal_alignment is %r; use 'bottom_right' "
                        "(FlashAttention-2) or 'top_left' (PyTorch is_causal)" % (a,)) from None
    return c_int(a, "causal_alignment", _capi.FLASH_ERROR_INVALID_ARGUMENT)


def _window(window):
    if window is None:
        return -1, -1
    try:
        left, right = window
    except (TypeError, ValueError):
        raise ValueError("libflash: window must be a (left, right) pair, -1 meaning unbounded") from None
    left = -1 if left is None else c_int(left, "window_left", _capi.FLASH_ERROR_BAD_MASK)
    right = -1 if right is None else c_int(right, "window_right", _capi.FLASH_ERROR_BAD_MASK)
    return left, right


def _needs_autograd(descs):
    """True when a torch input requires grad in grad mode: the call must then go through autograd."""
    if not any(d.kind == "torch" for d in descs):
        return False
    import torch

    return torch.is_grad_enabled() and any(d.kind == "torch" and d.obj.requires_grad for d in descs)


def _describe_inputs(q, names_arrays, stream):
    """(user_stream, [Desc...], run_stream, Allocator) shared by the forward and the backward: the inputs
    described, the stream the call runs on (the given one or the framework's current one), and an
    allocator for results like q."""
    if kind_of(q) is None:
        raise TypeError("libflash: q is a %s.%s; expected a numpy array, a torch tensor, or an array exposing "
                        "__cuda_array_interface__ or __dlpack__" % (type(q).__module__, type(q).__name__))
    user_stream = stream_pointer(stream)
    descs = [describe(x, name, user_stream) for name, x in names_arrays]
    d0 = descs[0]
    if d0.is_cuda:
        run_stream = user_stream if user_stream is not None else current_stream(d0)
    else:
        run_stream = 0
    return user_stream, descs, run_stream, Allocator(d0, run_stream)


def _framework_workspace(args, size_query, alloc):
    """For torch CUDA inputs, the call's workspace from torch's caching allocator on the call's stream (so that CUDA
    graph capture and torch's memory accounting see it) rather than the library's own cudaMallocAsync. Returns what
    keeps it alive, or None (no workspace needed, not torch on CUDA, or a refused query: the call itself says why)."""
    d = alloc.like
    if d.kind != "torch" or not d.is_cuda:
        return None
    n = ctypes.c_size_t(0)
    if size_query(ctypes.byref(args), ctypes.byref(n)) != _capi.FLASH_OK or n.value == 0:
        return None
    import torch

    with alloc._torch_ctx():
        ws = torch.empty((n.value,), dtype=torch.uint8, device=d.obj.device)
    args.workspace = ws.data_ptr()
    args.workspace_size = n.value
    return ws


def _output(x, name, user_stream):
    """Desc of a caller-given output, refusing read-only numpy arrays."""
    d = describe(x, name, user_stream)
    if d.kind == "numpy" and not x.flags.writeable:
        raise error(_capi.FLASH_ERROR_INVALID_ARGUMENT, "%s is a read-only numpy array" % name)
    return d


def _set_scalar_options(args, causal, causal_alignment, window, softmax_scale, algorithm, deterministic):
    """The option fields flash_fwd_args and flash_bwd_args share, validated (all but the stream and the mask)."""
    if softmax_scale is not None:
        softmax_scale = c_float(softmax_scale, "softmax_scale", _capi.FLASH_ERROR_INVALID_ARGUMENT)
        if softmax_scale == 0.0:
            raise error(_capi.FLASH_ERROR_INVALID_ARGUMENT, "softmax_scale is 0; the ABI reads 0 as 'the default "
                        "1/sqrt(head_dim)'. Pass None for the default")
        args.softmax_scale = softmax_scale
    args.causal = 1 if causal else 0
    args.causal_alignment = _alignment(causal_alignment)
    args.window_left, args.window_right = _window(window)
    for name, w in (("window_left", args.window_left), ("window_right", args.window_right)):
        if w < -1:
            raise error(_capi.FLASH_ERROR_BAD_MASK, "%s is %d but must be >= -1" % (name, w))
    args.algorithm = _algorithm_id(algorithm)
    args.flags = _capi.FLASH_FLAG_DETERMINISTIC if deterministic else 0


def _set_options(args, dq, shape, alloc, run_stream, causal, causal_alignment, window, block_mask, block_size,
                 softmax_scale, algorithm, deterministic):
    """The option fields flash_fwd_args and flash_bwd_args share. Returns what keeps the block mask alive."""
    batch, seqlen_q, heads_q, seqlen_k = shape
    _set_scalar_options(args, causal, causal_alignment, window, softmax_scale, algorithm, deterministic)
    args.stream = run_stream or None

    bm, keep = _mask.build(block_mask, block_size, dq, batch, heads_q, seqlen_q, seqlen_k, alloc)
    if bm is not None:
        args.block_mask = ctypes.pointer(bm)
    return (bm, keep)


# ---- Packed variable-length batches (flash.h 1.3) --------------------------------------------------------------------
def _varlen_opts(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_k):
    """The varlen keywords as a dict when any is given (a packed variable-length call), else None (a dense call)."""
    if cu_seqlens_q is None and cu_seqlens_k is None and seqused_k is None and max_seqlen_q is None \
            and max_seqlen_k is None:
        return None
    if cu_seqlens_q is None or cu_seqlens_k is None:
        if cu_seqlens_q is None and cu_seqlens_k is None:
            given = [n for n, x in (("max_seqlen_q", max_seqlen_q), ("max_seqlen_k", max_seqlen_k),
                                    ("seqused_k", seqused_k)) if x is not None]
            raise error(_capi.FLASH_ERROR_INVALID_ARGUMENT, "%s given without cu_seqlens_q and cu_seqlens_k: they "
                        "describe a packed variable-length batch (pass the offsets too, or leave them None)"
                        % " and ".join(given))
        have, missing = ("cu_seqlens_q", "cu_seqlens_k") if cu_seqlens_k is None else ("cu_seqlens_k", "cu_seqlens_q")
        raise error(_capi.FLASH_ERROR_NULL_POINTER, "%s is given but %s is None: a packed variable-length batch needs "
                    "both (or neither, for a dense call)" % (have, missing))
    if not _capi.has_varlen():
        raise error(_capi.FLASH_ERROR_UNSUPPORTED, "the loaded libflash %s (%s) has no packed variable-length batches "
                    "(cu_seqlens_q, ...: flash.h 1.3 and later)" % (version(), _capi.library_path))
    return dict(cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k, max_seqlen_q=max_seqlen_q,
                max_seqlen_k=max_seqlen_k, seqused_k=seqused_k)


def _varlen_array(x, name, q, user_stream):
    """(host, gpu) for one varlen int32 array of a call whose q is described by `q`. Host data (a sequence, numpy, a CPU
    tensor or CPU DLPack array) of any integer dtype: `host` is a contiguous int32 numpy copy (values int32 cannot hold
    are refused, never wrapped), `gpu` None. A GPU array is used in place: host None, gpu its Desc; it must be int32,
    1-d, contiguous and on q's device (another dtype could only be range-checked with a device synchronisation)."""
    kind = kind_of(x)
    if kind is None or kind == "numpy":
        a = host_int32(x, name)
    else:
        d = describe(x, name, user_stream)
        if d.is_cuda:
            if not q.is_cuda or d.device_id != q.device_id:
                where = "cuda:%d" % q.device_id if q.is_cuda else "the CPU"
                raise error(_capi.FLASH_ERROR_DEVICE_MISMATCH, "%s is on cuda:%d but q is on %s; the varlen arrays "
                            "live on q's device" % (name, d.device_id, where))
            if d.dtype != "int32":
                raise error(_capi.FLASH_ERROR_UNSUPPORTED_DTYPE, "%s is a GPU array of dtype %s; GPU varlen arrays "
                            "must be int32 (convert it, e.g. .to(torch.int32), .astype(cupy.int32))" % (name, d.dtype))
            if len(d.shape) != 1:
                raise error(_capi.FLASH_ERROR_BAD_SHAPE, "%s has shape %s but must be 1-d" % (name, d.shape))
            if d.shape[0] > 1 and d.strides[0] != 1:
                raise error(_capi.FLASH_ERROR_BAD_STRIDE, "%s has a stride of %d elements but must be contiguous "
                            "(stride 1)" % (name, d.strides[0]))
            return None, d
        if q.is_cuda:
            raise error(_capi.FLASH_ERROR_DEVICE_MISMATCH, "%s is on the CPU but q is on cuda:%d; the varlen arrays "
                        "live on q's device (host data is taken as a list or numpy array, and copied)"
                        % (name, q.device_id))
        if not d.dtype.startswith(("int", "uint")):
            raise error(_capi.FLASH_ERROR_UNSUPPORTED_DTYPE, "%s has dtype %s; index arrays must be int32 (or "
                        "another integer type whose values fit int32)" % (name, d.dtype))
        a = host_int32(to_host(x, name), name)
    if a.ndim != 1:
        raise error(_capi.FLASH_ERROR_BAD_SHAPE, "%s has shape %s but must be 1-d" % (name, a.shape))
    return a, None


def _on_host(h, g, name):
    """The values of a varlen array on the host: its host copy, or one device-to-host copy (synchronising)."""
    return h if h is not None else host_int32(to_host(g.obj, name), name)


_I32_MAX = 2 ** 31 - 1


class _Varlen:
    """A packed variable-length call's arrays and lengths, checked in the binding (see _varlen_prepare)."""

    __slots__ = ("arrays", "batch", "max_seqlen_q", "max_seqlen_k")


def _varlen_prepare(vl, q, user_stream):
    """_Varlen for the keywords `vl` (_varlen_opts) of a call whose q is described by `q`: each array taken as
    _varlen_array takes it, their lengths checked, the batch range-checked, and max_seqlen_q / max_seqlen_k those given
    (range-checked) or the longest sequence: from the host data, or from one device-to-host copy of the GPU arrays."""
    r = _Varlen()
    names = ("cu_seqlens_q", "cu_seqlens_k", "seqused_k")
    r.arrays = {n: _varlen_array(vl[n], n, q, user_stream) for n in names if vl[n] is not None}

    def length(n):
        h, g = r.arrays[n]
        return len(h) if h is not None else g.shape[0]

    nq, nk = length("cu_seqlens_q"), length("cu_seqlens_k")
    if nq < 2:
        raise error(_capi.FLASH_ERROR_BAD_SHAPE, "cu_seqlens_q has %d entries but must hold batch + 1 >= 2 offsets"
                    % nq)
    if nk != nq:
        raise error(_capi.FLASH_ERROR_BAD_SHAPE, "cu_seqlens_k has %d entries but cu_seqlens_q has %d (each holds "
                    "batch + 1 offsets)" % (nk, nq))
    r.batch = c_int(nq - 1, "the batch (len(cu_seqlens_q) - 1)", _capi.FLASH_ERROR_INVALID_ARGUMENT)
    if "seqused_k" in r.arrays and length("seqused_k") != r.batch:
        raise error(_capi.FLASH_ERROR_BAD_SHAPE, "seqused_k has %d entries but must have one per sequence, %d "
                    "(len(cu_seqlens_q) - 1)" % (length("seqused_k"), r.batch))
    for which, given, src in (("q", vl["max_seqlen_q"], "cu_seqlens_q"),
                              ("k", vl["max_seqlen_k"], "seqused_k" if "seqused_k" in r.arrays else "cu_seqlens_k")):
        name = "max_seqlen_" + which
        if given is None:
            vals = _on_host(*r.arrays[src], src).astype(np.int64)
            longest = int(vals.max()) if src == "seqused_k" else int(np.diff(vals).max())
            # (invalid offsets are the library's to name: the bound is only kept inside int32 here)
            given = min(max(longest, 0), _I32_MAX)
        setattr(r, name, c_int(given, name, _capi.FLASH_ERROR_INVALID_ARGUMENT))
    return r


def _check_offsets_host(cu, name, tensor, rows):
    """flash.h's rules for one host offsets array, with the library's messages. Returns the longest sequence."""
    if cu[0] != 0:
        raise error(_capi.FLASH_ERROR_INVALID_ARGUMENT, "%s[0] is %d but must be 0" % (name, cu[0]))
    d = np.diff(cu.astype(np.int64))
    bad = np.flatnonzero(d < 0)
    if bad.size:
        i = int(bad[0]) + 1
        raise error(_capi.FLASH_ERROR_INVALID_ARGUMENT, "%s[%d] is %d, less than %s[%d] = %d: the offsets must not "
                    "decrease" % (name, i, cu[i], name, i - 1, cu[i - 1]))
    b = len(cu) - 1
    if cu[b] > rows:
        raise error(_capi.FLASH_ERROR_INVALID_ARGUMENT, "%s[%d] is %d but %s has %d rows (%s.shape[0])"
                    % (name, b, cu[b], tensor, rows, tensor))
    return int(d.max())


def _check_varlen_host(r, total_q, total_k):
    """The checks the library makes of host-resident varlen arrays (flash.h), made here on the host data of a GPU call
    before it is copied to the device (the library cannot read device arrays without a synchronisation)."""
    hq, hk = r.arrays["cu_seqlens_q"][0], r.arrays["cu_seqlens_k"][0]
    hs = r.arrays["seqused_k"][0] if "seqused_k" in r.arrays else None
    longest_q = _check_offsets_host(hq, "cu_seqlens_q", "q", total_q) if hq is not None else None
    longest_k = _check_offsets_host(hk, "cu_seqlens_k", "k", total_k) if hk is not None else None
    if "seqused_k" in r.arrays:
        longest_k = None
        if hs is not None and hk is not None:
            slot = np.diff(hk.astype(np.int64))
            bad = np.flatnonzero((hs < 0) | (hs > slot))
            if bad.size:
                i = int(bad[0])
                raise error(_capi.FLASH_ERROR_INVALID_ARGUMENT, "seqused_k[%d] is %d but sequence %d's slot holds %d "
                            "keys (cu_seqlens_k[%d] - cu_seqlens_k[%d]): must be in [0, %d]"
                            % (i, hs[i], i, slot[i], i + 1, i, slot[i]))
            longest_k = int(hs.max())
    if longest_q is not None and r.max_seqlen_q < longest_q:
        raise error(_capi.FLASH_ERROR_INVALID_ARGUMENT, "max_seqlen_q is %d but a sequence has %d queries "
                    "(cu_seqlens_q)" % (r.max_seqlen_q, longest_q))
    if longest_k is not None and r.max_seqlen_k < longest_k:
        raise error(_capi.FLASH_ERROR_INVALID_ARGUMENT, "max_seqlen_k is %d but a sequence has %d keys (%s)"
                    % (r.max_seqlen_k, longest_k, "seqused_k" if "seqused_k" in r.arrays else "cu_seqlens_k"))


def _varlen_apply(args, r, q, k, alloc, user_stream):
    """Sets the varlen fields of flash_fwd_args / flash_bwd_args from _Varlen r, host data copied to q's device first
    (checked here for a GPU call; the library checks a CPU call's). Returns what keeps the arrays alive."""
    if q.is_cuda and len(q.shape) == 3 and len(k.shape) == 3 and any(h is not None for h, _ in r.arrays.values()):
        _check_varlen_host(r, q.shape[0], k.shape[0])
    keep = []
    for name, (h, g) in r.arrays.items():
        if h is not None:
            try:
                g = describe(alloc.upload_int32(h), name, user_stream)
            except TypeError:
                raise TypeError("libflash: cannot copy %s to the GPU for a %s.%s q; pass it as an int32 array on q's "
                                "device" % (name, type(q.obj).__module__, type(q.obj).__name__)) from None
        setattr(args, name, g.ptr or None)
        keep.append(g)
    args.max_seqlen_q, args.max_seqlen_k, args.varlen_batch = r.max_seqlen_q, r.max_seqlen_k, r.batch
    return keep


def _varlen_resolved(vl, q, user_stream):
    """vl with max_seqlen_q and max_seqlen_k filled in (for autograd: the backward then needs no device-to-host
    copy)."""
    if vl["max_seqlen_q"] is not None and vl["max_seqlen_k"] is not None:
        return vl
    r = _varlen_prepare(vl, q, user_stream)
    return dict(vl, max_seqlen_q=r.max_seqlen_q, max_seqlen_k=r.max_seqlen_k)


def _refuse_varlen_block_mask(block_mask):
    if block_mask is not None:
        raise error(_capi.FLASH_ERROR_UNSUPPORTED, "block_mask is given with cu_seqlens_q: block-sparse masks are not "
                    "supported with packed variable-length batches (flash.h)")


# ---- The fast path (see _fast.py): exact numpy arrays and torch tensors, no block mask, the framework's current
# stream. Anything else, and every refusal, goes to the general path.
_FWD = _capi.flash_fwd_args
_BWD = _capi.flash_bwd_args
_PACK = _fast.TENSOR.pack_into
_PACK_PTR = _fast.POINTER.pack_into
_CUDA, _FP32 = _fast.CUDA, _fast.FP32
_F_Q, _F_K, _F_V, _F_O, _F_LSE = (getattr(_FWD, n).offset for n in ("q", "k", "v", "o", "lse"))
_F_STREAM, _F_WS = _FWD.stream.offset, _FWD.workspace.offset
_B_Q, _B_K, _B_V, _B_O, _B_DO, _B_LSE, _B_DQ, _B_DK, _B_DV = (
    getattr(_BWD, n).offset for n in ("q", "k", "v", "o", "d_o", "lse", "dq", "dk", "dv"))
_B_STREAM, _B_WS = _BWD.stream.offset, _BWD.workspace.offset

_TEMPLATES = {}  # (struct class, options...) -> the initialised struct's bytes with those options set


def _template(cls, init, causal, causal_alignment, window, softmax_scale, algorithm, deterministic):
    """The bytes of an initialised `cls` with these options set and validated: built once per distinct options (an
    unhashable option, e.g. a list window, is built every call). Raises what _set_scalar_options raises."""
    key = (cls, causal, causal_alignment, window, softmax_scale, algorithm, deterministic)
    try:
        t = _TEMPLATES.get(key)
    except TypeError:
        key, t = None, None
    if t is None:
        args = cls()
        check(init(ctypes.byref(args)))
        _set_scalar_options(args, causal, causal_alignment, window, softmax_scale, algorithm, deterministic)
        t = bytes(args)
        if key is not None:
            if len(_TEMPLATES) >= 512:
                _TEMPLATES.clear()
            _TEMPLATES[key] = t
    return t


def _given(kind, x, ndim):
    """Fields of a caller-given output of the fast kind (a writeable numpy array), or None."""
    if _fast.KINDS.get(type(x)) is not kind or (kind is _fast.NumpyKind and not x.flags.writeable):
        return None
    return kind.fields(x, ndim)


def _fwd_fast(kind, q, k, v, causal, causal_alignment, window, softmax_scale, algorithm, deterministic, return_lse,
              out=None, check_grad=True):
    """attention() for three arrays of one fast kind, or None when the general path must take the call."""
    kinds = _fast.KINDS
    if kinds.get(type(k)) is not kind or kinds.get(type(v)) is not kind or (check_grad and kind.needs_grad(q, k, v)):
        return None
    fq = kind.fields(q, 4)
    fk = kind.fields(k, 4)
    fv = kind.fields(v, 4)
    if fq is None or fk is None or fv is None:
        return None
    fo = None
    if out is not None:
        fo = _given(kind, out, 4)
        if fo is None:
            return None
    try:
        tmpl = _template(_FWD, _capi.flash_fwd_args_init, causal, causal_alignment, window, softmax_scale, algorithm,
                         deterministic)
    except Exception:
        return None  # the general path raises it, after what it checks first
    return _fwd_run(kind, q, fq, fk, fv, tmpl, return_lse, out, fo)


def _fwd_run(kind, q, fq, fk, fv, tmpl, return_lse, out=None, fo=None):
    """The fast forward once q, k, v are described (fq, fk, fv: their fields) and the options are in `tmpl`: packs
    and runs flash_fwd; out (fields fo) is allocated when None, contiguous, like q. Returns out or (out, lse); raises
    FlashError when the library refuses (having written nothing)."""
    b, sq, hq, d = fq[5], fq[6], fq[7], fq[8]
    code, dt, di = fq[1], fq[2], fq[3]
    args = _FWD.from_buffer_copy(tmpl)
    _PACK(args, _F_Q, *fq)
    _PACK(args, _F_K, *fk)
    _PACK(args, _F_V, *fv)
    if fo is None:
        out = kind.empty_as(q, fq)
        op = kind.ptr(out)
        _PACK(args, _F_O, op, code, dt, di, 4, b, sq, hq, d, sq * hq * d, hq * d, d, 1)
    else:
        op = fo[0]
        _PACK(args, _F_O, *fo)
    lse = None
    if return_lse:
        lse = kind.empty_f32(q, (b, hq, sq))
        _PACK(args, _F_LSE, kind.ptr(lse), _FP32, dt, di, 3, b, hq, sq, 0, hq * sq, sq, 1, 0)
    if dt == _CUDA:
        _PACK_PTR(args, _F_STREAM, kind.raw_stream(di))
        status, ws = _fast.run_with_workspace(_capi.flash_fwd, _capi.flash_fwd_workspace_size, args, _F_WS,
                                              (tmpl, fq[1:9], fk[5:9]), kind, q, op)
    else:
        status = _capi.flash_fwd(args)
    if status:
        check(status)
    _last.algorithm_used = args.algorithm_used
    return (out, lse) if return_lse else out


_NO_WINDOW = (-1, -1)  # no sliding window (the one tuple the fast paths compare against)


def _attention_nograd(q, k, v, causal=False, window=(-1, -1), softmax_scale=None, deterministic=False,
                      return_lse=False, out=None, causal_alignment="bottom_right", algorithm="auto"):
    """attention() for torch tensors that never goes through autograd, whatever the grad mode: for the kernels of
    custom ops and dispatcher overrides (libflash.torch), which run below autograd."""
    kind = _fast.KINDS.get(type(q))
    if kind is not None:
        r = _fwd_fast(kind, q, k, v, causal, causal_alignment, window, softmax_scale, algorithm, deterministic,
                      return_lse, out, False)
        if r is not None:
            return r
    import torch

    with torch.no_grad():
        return attention(q, k, v, causal=causal, causal_alignment=causal_alignment, window=window,
                         softmax_scale=softmax_scale, return_lse=return_lse, algorithm=algorithm, out=out,
                         deterministic=deterministic)


def _bwd_fast(kind, q, k, v, o, do, lse, causal, causal_alignment, window, softmax_scale, algorithm, deterministic,
              dq=None, dk=None, dv=None):
    """attention_backward() for six arrays of one fast kind, or None when the general path must take the call."""
    kinds = _fast.KINDS
    for x in (k, v, o, do, lse):
        if kinds.get(type(x)) is not kind:
            return None
    fq = kind.fields(q, 4)
    fk = kind.fields(k, 4)
    fv = kind.fields(v, 4)
    fo = kind.fields(o, 4)
    fdo = kind.fields(do, 4)
    fl = kind.fields(lse, 3)
    if fq is None or fk is None or fv is None or fo is None or fdo is None or fl is None:
        return None
    given = []
    for g in (dq, dk, dv):
        fg = None
        if g is not None:
            fg = _given(kind, g, 4)
            if fg is None:
                return None
        given.append(fg)
    try:
        tmpl = _template(_BWD, _capi.flash_bwd_args_init, causal, causal_alignment, window, softmax_scale, algorithm,
                         deterministic)
    except Exception:
        return None
    return _bwd_run(kind, (q, k, v), fq, fk, fv, fo, fdo, fl, tmpl, (dq, dk, dv), given)


def _bwd_run(kind, qkv, fq, fk, fv, fo, fdo, fl, tmpl, grads=(None, None, None), fgrads=(None, None, None)):
    """The fast backward once every input is described (fields fq ... fl) and the options are in `tmpl`: packs and
    runs flash_bwd. grads: the caller's dq, dk, dv (fields fgrads), each None to allocate (contiguous, q's dtype and
    device, shaped like its input). Returns (dq, dk, dv); raises FlashError when the library refuses."""
    q = qkv[0]
    code, dt, di = fq[1], fq[2], fq[3]
    args = _BWD.from_buffer_copy(tmpl)
    _PACK(args, _B_Q, *fq)
    _PACK(args, _B_K, *fk)
    _PACK(args, _B_V, *fv)
    _PACK(args, _B_O, *fo)
    _PACK(args, _B_DO, *fdo)
    _PACK(args, _B_LSE, *fl)
    outs = []
    for off, x, f, g, fg in ((_B_DQ, q, fq, grads[0], fgrads[0]), (_B_DK, qkv[1], fk, grads[1], fgrads[1]),
                             (_B_DV, qkv[2], fv, grads[2], fgrads[2])):
        if fg is None:
            b, s, h, d = f[5], f[6], f[7], f[8]
            if f[1] == code and f[2] == dt and f[3] == di:
                g = kind.empty_as(x, f)  # x's dtype and device are q's: allocated like x
            else:
                g = kind.empty(q, (b, s, h, d))  # (the library refuses the call, naming x)
            _PACK(args, off, kind.ptr(g), code, dt, di, 4, b, s, h, d, s * h * d, h * d, d, 1)
        else:
            _PACK(args, off, *fg)
        outs.append(g)
    if dt == _CUDA:
        _PACK_PTR(args, _B_STREAM, kind.raw_stream(di))
        status, ws = _fast.run_with_workspace(_capi.flash_bwd, _capi.flash_bwd_workspace_size, args, _B_WS,
                                              (tmpl, fq[1:9], fk[5:9]), kind, q, kind.ptr(outs[0]))
    else:
        status = _capi.flash_bwd(args)
    if status:
        check(status)
    _last.algorithm_used = args.algorithm_used
    return tuple(outs)


def _attention_varlen(q, dq, dk, dv, vl, user_stream, run_stream, alloc, causal, causal_alignment, window,
                      softmax_scale, return_lse, algorithm, out, deterministic):
    """attention() for a packed variable-length batch (the general path: inputs already described)."""
    r = _varlen_prepare(vl, dq, user_stream)
    args = _capi.flash_fwd_args()
    check(_capi.flash_fwd_args_init(ctypes.byref(args)))
    args.q = dq.tensor("q", 3)
    args.k = dk.tensor("k", 3)
    args.v = dv.tensor("v", 3)
    _set_scalar_options(args, causal, causal_alignment, window, softmax_scale, algorithm, deterministic)
    args.stream = run_stream or None
    keep = _varlen_apply(args, r, dq, dk, alloc, user_stream)
    if len(dq.shape) != 3 or len(dk.shape) != 3:
        args.o = args.q  # the library names the problem (it checks each tensor's ndim first)
        check(_capi.flash_fwd(ctypes.byref(args)))
        raise error(_capi.FLASH_ERROR_BAD_SHAPE, "q and k must be 3-d [total, heads, head_dim] in a packed "
                    "variable-length batch")
    total_q, heads_q, head_dim = dq.shape
    if out is None:
        out = alloc.full((total_q, heads_q, head_dim), "like", 0)
    keep.append(_output(out, "out", user_stream))
    args.o = keep[-1].tensor("out", 3)
    lse = None
    if return_lse:
        lse = alloc.full((heads_q, total_q), "float32", float("-inf"))
        keep.append(describe(lse, "lse", user_stream))
        args.lse = keep[-1].tensor("lse", 2)
    ws = _framework_workspace(args, _capi.flash_fwd_workspace_size, alloc)
    check(_capi.flash_fwd(ctypes.byref(args)))
    _last.algorithm_used = args.algorithm_used
    del ws, keep
    return (out, lse) if return_lse else out


def _backward_varlen(descs, vl, grads, user_stream, run_stream, alloc, causal, causal_alignment, window, softmax_scale,
                     algorithm, deterministic):
    """attention_backward() for a packed variable-length batch (the general path: inputs already described)."""
    d_q, d_k, d_v, d_o, d_do, d_lse = descs
    r = _varlen_prepare(vl, d_q, user_stream)
    args = _capi.flash_bwd_args()
    check(_capi.flash_bwd_args_init(ctypes.byref(args)))
    args.q = d_q.tensor("q", 3)
    args.k = d_k.tensor("k", 3)
    args.v = d_v.tensor("v", 3)
    args.o = d_o.tensor("o", 3)
    args.d_o = d_do.tensor("do", 3)
    args.lse = d_lse.tensor("lse", 2)
    _set_scalar_options(args, causal, causal_alignment, window, softmax_scale, algorithm, deterministic)
    args.stream = run_stream or None
    keep = _varlen_apply(args, r, d_q, d_k, alloc, user_stream)
    if len(d_q.shape) != 3 or len(d_k.shape) != 3:
        args.dq, args.dk, args.dv = args.q, args.k, args.v
        check(_capi.flash_bwd(ctypes.byref(args)))
        raise error(_capi.FLASH_ERROR_BAD_SHAPE, "q and k must be 3-d [total, heads, head_dim] in a packed "
                    "variable-length batch")
    outs = []
    for name, given, like in (("dq", grads[0], d_q), ("dk", grads[1], d_k), ("dv", grads[2], d_v)):
        if given is None:
            given = alloc.full(like.shape, "like", 0)  # rows outside every sequence: 0
        keep.append(_output(given, name, user_stream))
        setattr(args, name, keep[-1].tensor(name, 3))
        outs.append(given)
    ws = _framework_workspace(args, _capi.flash_bwd_workspace_size, alloc)
    check(_capi.flash_bwd(ctypes.byref(args)))
    _last.algorithm_used = args.algorithm_used
    del ws, keep
    return tuple(outs)


def attention(q, k, v, *, causal=False, causal_alignment="bottom_right", window=(-1, -1), block_mask=None,
              block_size=None, softmax_scale=None, return_lse=False, algorithm="auto", out=None, stream=None,
              deterministic=False, cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=None, max_seqlen_k=None,
              seqused_k=None):
    """Exact attention O = softmax(softmax_scale * Q K^T + mask) V, computed the FlashAttention way.

    q: [batch, seqlen_q, heads_q, head_dim]; k, v: [batch, seqlen_k, heads_kv, head_dim], heads_q a
    multiple of heads_kv (GQA/MQA). Any strides, but the last dimension must be contiguous.
    numpy arrays run on the CPU backend (float32, float16, and bfloat16 through ml_dtypes); torch tensors,
    CuPy/Numba arrays (__cuda_array_interface__) and CUDA __dlpack__ producers run on their GPU (float16,
    bfloat16), asynchronously on `stream` (a cudaStream_t int, torch.cuda.Stream, cupy stream) or, by
    default, the framework's current stream. The result is the same kind of array as q.

    causal: query i sees keys j <= i + offset, offset = seqlen_k - seqlen_q for causal_alignment
        "bottom_right" (FlashAttention-2, the default) or 0 for "top_left" (PyTorch's is_causal).
    window: (left, right): keys more than `left` before / `right` after the diagonal are masked (-1 =
        unbounded), placed by the same alignment; causal is window right = 0.
    block_mask: a BlockMask, a compact (kv_num_blocks, kv_indices[, block_size]) tuple, a dense boolean
        [B|1, H|1, num_q_blocks, num_kv_blocks] map (True = kept), or FlexAttention's BlockMask (its full and
        partial blocks kept; partial ones only with a noop mask_mod: see BlockMask.from_flex). block_size (64 or
        128, or a pair) is inferred from a dense map's shape when not given; a compact tuple's block_n defaults
        to 128.
    softmax_scale: None = 1/sqrt(head_dim).
    return_lse: also return the fp32 log-sum-exp [batch, heads_q, seqlen_q] (-inf for rows that see no key).
    algorithm: "auto", "cpu", "naive", "sm80", "sm90" (or the FLASH_ALGO_* int).
    out: optional preallocated output (same shape/dtype/device as q).
    deterministic: bitwise-reproducible gradients when the call goes through autograd (the forward always
        is reproducible).

    Packed variable-length batches (flash.h 1.3; FlashAttention's varlen layout): with cu_seqlens_q and cu_seqlens_k
    (int32 [batch + 1] offsets), q is [total_q, heads_q, head_dim], k and v [total_k, heads_kv, head_dim], the result
    [total_q, heads_q, head_dim] and lse [heads_q, total_q]. Sequence i owns query rows cu_seqlens_q[i] ..
    cu_seqlens_q[i+1] - 1 and the key rows cu_seqlens_k[i] .. cu_seqlens_k[i+1] - 1, of which it uses the first
    seqused_k[i] when seqused_k (int32 [batch]) is given; each is its own attention problem (causal and windows
    aligned with its own lengths; zero-length sequences allowed). Rows of the result past the last offset hold 0 (lse
    -inf) when the binding allocates it. Not with block_mask.
        The arrays live on q's device. Host data (lists, numpy, CPU tensors) of any integer dtype is taken when its
        values fit int32 (refused otherwise, never wrapped) and is copied to q's GPU for a GPU call (checked first on
        the host, with the library's rules and messages); GPU arrays must already be int32 on q's device, contiguous.
        max_seqlen_q / max_seqlen_k: at least the longest sequence's queries / keys (they size the GPU grids). When
        None they are computed from the offsets (seqused_k for the keys): on the host for host data, and for GPU
        arrays by ONE DEVICE-TO-HOST COPY, which waits for the device (pass them to avoid it, as a CUDA graph must).

    torch tensors that require grad (in grad mode) go through autograd (libflash.torch): the result has a
    grad_fn whose backward is flash_bwd (lse, if returned, is not differentiable); out= is refused then.

    Returns out, or (out, lse) when return_lse. Raises FlashError on any invalid argument.
    """
    vl = _varlen_opts(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_k)
    if block_mask is None and stream is None and vl is None:
        kind = _fast.KINDS.get(type(q))
        if kind is not None:
            r = _fwd_fast(kind, q, k, v, causal, causal_alignment, window, softmax_scale, algorithm, deterministic,
                          return_lse, out)
            if r is not None:
                return r
    user_stream, (dq, dk, dv), run_stream, alloc = _describe_inputs(q, (("q", q), ("k", k), ("v", v)), stream)
    if vl is not None:
        _refuse_varlen_block_mask(block_mask)
    if _needs_autograd((dq, dk, dv)):
        if out is not None:
            raise RuntimeError("libflash: out= is not supported when an input requires grad (autograd would not "
                               "see the write); drop out= or run under torch.no_grad()")
        from .torch import _attention_autograd

        opts = dict(causal=causal, causal_alignment=causal_alignment, window=window, block_mask=block_mask,
                    block_size=block_size, softmax_scale=softmax_scale, algorithm=algorithm, stream=stream,
                    deterministic=deterministic)
        if vl is not None:
            opts.update(_varlen_resolved(vl, dq, user_stream))
        return _attention_autograd(q, k, v, return_lse, opts)
    if vl is not None:
        return _attention_varlen(q, dq, dk, dv, vl, user_stream, run_stream, alloc, causal, causal_alignment, window,
                                 softmax_scale, return_lse, algorithm, out, deterministic)

    args = _capi.flash_fwd_args()
    check(_capi.flash_fwd_args_init(ctypes.byref(args)))
    args.q = dq.tensor("q", 4)
    args.k = dk.tensor("k", 4)
    args.v = dv.tensor("v", 4)

    if len(dq.shape) != 4 or len(dk.shape) != 4:
        # Let the library name the problem (it checks ndim first); o/lse need a 4-d q to be shaped.
        args.o = args.q
        check(_capi.flash_fwd(ctypes.byref(args)))
        raise error(_capi.FLASH_ERROR_BAD_SHAPE, "q and k must be 4-d [batch, seqlen, heads, head_dim]")
    batch, seqlen_q, heads_q, head_dim = dq.shape
    seqlen_k = dk.shape[1]

    if out is None:
        out = alloc.empty((batch, seqlen_q, heads_q, head_dim), "like")
    args.o = _output(out, "out", user_stream).tensor("out", 4)
    lse = None
    if return_lse:
        lse = alloc.empty((batch, heads_q, seqlen_q), "float32")
        dl = describe(lse, "lse", user_stream)
        args.lse = dl.tensor("lse", 3)

    keep = _set_options(args, dq, (batch, seqlen_q, heads_q, seqlen_k), alloc, run_stream, causal, causal_alignment,
                        window, block_mask, block_size, softmax_scale, algorithm, deterministic)

    ws = _framework_workspace(args, _capi.flash_fwd_workspace_size, alloc)
    # ctypes drops the GIL for the call; the CPU backend runs threaded, GPU calls return at once.
    check(_capi.flash_fwd(ctypes.byref(args)))
    del ws
    _last.algorithm_used = args.algorithm_used
    del keep  # GPU: mask memory came from a stream-ordered allocator on run_stream (see Allocator)
    return (out, lse) if return_lse else out


def attention_backward(q, k, v, o, do, lse, *, causal=False, causal_alignment="bottom_right", window=(-1, -1),
                       block_mask=None, block_size=None, softmax_scale=None, algorithm="auto", deterministic=False,
                       dq=None, dk=None, dv=None, stream=None, cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=None,
                       max_seqlen_k=None, seqused_k=None):
    """Gradients (dq, dk, dv) of O = attention(q, k, v, ...) given dO = dL/dO, computed the FlashAttention
    way: P is recomputed tile by tile from q, k and the forward's log-sum-exp, nothing N x N is stored.

    q, k, v: the forward's inputs; o and lse: its output and fp32 log-sum-exp (attention(...,
    return_lse=True)); do: dL/dO, shaped and typed like o. The mask options (causal, causal_alignment,
    window, block_mask, block_size, softmax_scale) must be the forward's. Arrays are taken as by attention()
    (numpy -> CPU; torch, CuPy, ... on their GPU; any strides with a contiguous last dimension).
    GQA/MQA: dk and dv are shaped like k and v, each the sum over the query heads sharing that head.
    Rows that saw no key get dq = 0; keys no query saw get dk = dv = 0.

    deterministic: bitwise-identical results run to run (FLASH_FLAG_DETERMINISTIC; the default may use
        atomics on the GPU).
    dq, dk, dv: optional preallocated outputs (any strides, contiguous last dimension); each one not given
        is allocated like q (or k, v) with the inputs' framework, on the call's stream.
    stream: as attention(): the given stream, or the framework's current one. GPU calls are asynchronous.
    cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_k: a packed variable-length batch, as attention()
        (the forward's): q, o, do, dq [total_q, heads_q, head_dim]; k, v, dk, dv [total_k, heads_kv, head_dim]; lse
        [heads_q, total_q]. Gradient rows outside every sequence (and, with seqused_k, the unused keys of a slot) are 0
        in the arrays the binding allocates. max_seqlen_* None: computed as attention() computes them (for GPU
        arrays, one device-to-host copy).

    Returns (dq, dk, dv), the same kind of arrays as q. Raises FlashError on any invalid argument.
    """
    vl = _varlen_opts(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_k)
    if block_mask is None and stream is None and _capi.flash_bwd is not None and vl is None:
        kind = _fast.KINDS.get(type(q))
        if kind is not None:
            r = _bwd_fast(kind, q, k, v, o, do, lse, causal, causal_alignment, window, softmax_scale, algorithm,
                          deterministic, dq, dk, dv)
            if r is not None:
                return r
    user_stream, descs, run_stream, alloc = _describe_inputs(
        q, (("q", q), ("k", k), ("v", v), ("o", o), ("do", do), ("lse", lse)), stream)
    d_q, d_k, d_v, d_o, d_do, d_lse = descs
    if _capi.flash_bwd is None:
        raise error(_capi.FLASH_ERROR_ALGORITHM_UNAVAILABLE, "the loaded libflash %s (%s) has no backward pass "
                    "(flash_bwd is in 1.1 and later)" % (version(), _capi.library_path))
    if vl is not None:
        _refuse_varlen_block_mask(block_mask)
        return _backward_varlen(descs, vl, (dq, dk, dv), user_stream, run_stream, alloc, causal, causal_alignment,
                                window, softmax_scale, algorithm, deterministic)

    args = _capi.flash_bwd_args()
    check(_capi.flash_bwd_args_init(ctypes.byref(args)))
    args.q = d_q.tensor("q", 4)
    args.k = d_k.tensor("k", 4)
    args.v = d_v.tensor("v", 4)
    args.o = d_o.tensor("o", 4)
    args.d_o = d_do.tensor("do", 4)
    args.lse = d_lse.tensor("lse", 3)

    if len(d_q.shape) != 4 or len(d_k.shape) != 4:
        # Let the library name the problem (it checks each tensor's ndim first).
        args.dq, args.dk, args.dv = args.q, args.k, args.v
        check(_capi.flash_bwd(ctypes.byref(args)))
        raise error(_capi.FLASH_ERROR_BAD_SHAPE, "q and k must be 4-d [batch, seqlen, heads, head_dim]")
    batch, seqlen_q, heads_q, _ = d_q.shape
    seqlen_k = d_k.shape[1]

    outs = []
    for name, given, like in (("dq", dq, d_q), ("dk", dk, d_k), ("dv", dv, d_v)):
        if given is None:
            given = alloc.empty(like.shape, "like")
        setattr(args, name, _output(given, name, user_stream).tensor(name, 4))
        outs.append(given)

    keep = _set_options(args, d_q, (batch, seqlen_q, heads_q, seqlen_k), alloc, run_stream, causal,
                        causal_alignment, window, block_mask, block_size, softmax_scale, algorithm, deterministic)

    ws = _framework_workspace(args, _capi.flash_bwd_workspace_size, alloc)
    check(_capi.flash_bwd(ctypes.byref(args)))
    _last.algorithm_used = args.algorithm_used
    del keep, ws
    return tuple(outs)


_last = threading.local()


def last_algorithm_used():
    """Name of the algorithm the last successful attention(), attention_backward() or attention_with_kvcache() call
    on this thread ran (e.g. "sm80")."""
    n = _capi.flash_algorithm_name(getattr(_last, "algorithm_used", -1))
    return n.decode() if n else None


# ---- Devices and version ---------------------------------------------------------------------------------
DeviceInfo = namedtuple("DeviceInfo", [
    "device_type", "device_id", "name", "compute_capability", "multiprocessors", "clock_khz", "memory_clock_khz",
    "memory_bus_width_bits", "shared_mem_per_sm", "shared_mem_per_block_optin", "l2_cache_bytes",
    "total_memory_bytes", "algorithms"])


def _algorithm_list(mask):
    return [n for i, n in enumerate(algorithm_names()) if mask & (1 << i)]


def device_info(device_type, device_id=0):
    """DeviceInfo for ("cpu"|"cuda"|FLASH_DEVICE_*, id)."""
    if isinstance(device_type, str):
        device_type = {"cpu": _capi.FLASH_DEVICE_CPU, "cuda": _capi.FLASH_DEVICE_CUDA}[device_type.lower()]
    info = _capi.flash_device_info()
    check(_capi.flash_device_info_init(ctypes.byref(info)))
    device_type = c_int(device_type, "device_type", _capi.FLASH_ERROR_INVALID_ARGUMENT)
    device_id = c_int(device_id, "device_id", _capi.FLASH_ERROR_INVALID_ARGUMENT)
    check(_capi.flash_get_device_info(device_type, device_id, ctypes.byref(info)))
    return DeviceInfo(
        "cuda" if info.device_type == _capi.FLASH_DEVICE_CUDA else "cpu", info.device_id,
        info.name.decode("utf-8", "replace"), (info.cc_major, info.cc_minor), info.multiprocessors, info.clock_khz,
        info.memory_clock_khz, info.memory_bus_width_bits, info.shared_mem_per_sm, info.shared_mem_per_block_optin,
        info.l2_cache_bytes, info.total_memory_bytes, _algorithm_list(info.algorithms))


def device_count(device_type="cuda"):
    if isinstance(device_type, str):
        device_type = {"cpu": _capi.FLASH_DEVICE_CPU, "cuda": _capi.FLASH_DEVICE_CUDA}[device_type.lower()]
    n = ctypes.c_int32(0)
    check(_capi.flash_device_count(c_int(device_type, "device_type", _capi.FLASH_ERROR_INVALID_ARGUMENT),
                                   ctypes.byref(n)))
    return n.value


def devices():
    """DeviceInfo for the CPU and every CUDA device the library can use."""
    out = [device_info("cpu", 0)]
    for i in range(device_count("cuda")):
        try:
            out.append(device_info("cuda", i))
        except FlashError:
            pass
    return out


def version():
    """Version string of the loaded library, e.g. "1.0.0"."""
    return _capi.flash_version_string().decode()


def version_info():
    return (_capi.flash_version_major(), _capi.flash_version_minor(), _capi.flash_version_patch())


def build_info():
    return _capi.flash_build_info().decode()


def compiled_algorithms():
    """Names of the algorithms built into the loaded library."""
    return _algorithm_list(_capi.flash_compiled_algorithms())


def library_path():
    return _capi.library_path
