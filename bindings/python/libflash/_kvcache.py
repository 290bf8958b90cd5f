"""libflash.attention_with_kvcache() and libflash.combine() (flash_fwd_kvcache and flash_combine, ABI 1.2)."""

import ctypes

import numpy as np

from . import _capi, _fast
from ._arrays import Allocator, Desc, current_stream, describe, kind_of, stream_pointer, to_host
from ._arrays import host_int32 as _host_int32
from ._attention import _algorithm_id, _framework_workspace, _last, _output, _window, version
from ._errors import c_float, c_int, check, error

_ITEMSIZE = {"float32": 4, "float16": 2, "bfloat16": 2}


def _require(fn, what):
    if fn is None:
        raise error(_capi.FLASH_ERROR_ALGORITHM_UNAVAILABLE, "the loaded libflash %s (%s) has no %s (it is in 1.2 and "
                    "later)" % (version(), _capi.library_path, what))


def _refuse_autograd(descs, what):
    """These calls have no backward: a torch input that requires grad (in grad mode) is refused rather than given a
    result silently cut off from the graph."""
    if not any(d.kind == "torch" for d in descs):
        return
    import torch

    if torch.is_grad_enabled() and any(d.kind == "torch" and d.obj.requires_grad for d in descs):
        raise RuntimeError("libflash: %s has no backward, but an input requires grad; run it under torch.no_grad() "
                           "or torch.inference_mode(), or pass detached tensors" % what)


def _run_stream(d0, user_stream):
    if d0.is_cuda:
        return user_stream if user_stream is not None else current_stream(d0)
    return 0


# ---- Index arrays (cache_seqlens, cache_batch_idx, block_table) ------------------------------------------------
def _index_array(x, name, expected, q, alloc, user_stream):
    """(pointer, row stride in elements, keepalive) of an int32 index array shaped `expected` (None: any extent) on
    q's device.

    Host data (a Python int or sequence, numpy, a CPU torch tensor or CPU DLPack array) of any integer dtype is
    range-checked, converted to int32 and made contiguous, then placed where q lives (copied to q's GPU when q is a
    CUDA array, as block masks are). An array on a GPU is used in place: it must be on q's device, int32 (another
    dtype could only be range-checked with a device synchronisation) and contiguous along its last dimension."""
    kind = kind_of(x)
    host = None
    if kind is None or kind == "numpy":
        host = x
    else:
        d = describe(x, name, user_stream)
        if not d.is_cuda:
            if q.is_cuda:
                raise error(_capi.FLASH_ERROR_DEVICE_MISMATCH, "%s is on the CPU but q is on cuda:%d; index arrays "
                            "live on q's device" % (name, q.device_id))
            if not d.dtype.startswith(("int", "uint")):  # (before to_host: numpy has no bfloat16)
                raise error(_capi.FLASH_ERROR_UNSUPPORTED_DTYPE, "%s has dtype %s; index arrays must be int32 (or "
                            "another integer type whose values fit int32)" % (name, d.dtype))
            host = to_host(x, name)
        else:
            if not q.is_cuda or d.device_id != q.device_id:
                where = "cuda:%d" % q.device_id if q.is_cuda else "the CPU"
                raise error(_capi.FLASH_ERROR_DEVICE_MISMATCH, "%s is on cuda:%d but q is on %s; index arrays live on "
                            "q's device" % (name, d.device_id, where))
            if d.dtype != "int32":
                raise error(_capi.FLASH_ERROR_UNSUPPORTED_DTYPE, "%s is a GPU array of dtype %s; GPU index arrays must "
                            "be int32 (convert it, e.g. .to(torch.int32), .astype(cupy.int32))" % (name, d.dtype))
    if host is not None:
        a = _host_int32(host, name)
        if a.ndim == 0 and len(expected) == 1:  # a scalar (cache_seqlens): the same for every sequence
            a = np.full(expected, a, dtype=np.int32)
        _check_shape(a.shape, name, expected)
        try:
            a = alloc.upload_int32(a)
        except TypeError:
            raise TypeError("libflash: cannot copy %s to the GPU for a %s.%s q; pass it as an int32 array on q's device"
                            % (name, type(q.obj).__module__, type(q.obj).__name__)) from None
        d = describe(a, name, user_stream)
    else:
        _check_shape(d.shape, name, expected)
    # Layout: the library reads cache_seqlens[b] / cache_batch_idx[b] at stride 1 and block_table[b, j] at
    # b * block_table_stride + j.
    if len(d.shape) == 1:
        if d.shape[0] > 1 and d.strides[0] != 1:
            raise error(_capi.FLASH_ERROR_BAD_STRIDE, "%s has a stride of %d elements but must be contiguous (stride 1)"
                        % (name, d.strides[0]))
        row_stride = 0
    else:
        if d.shape[1] > 1 and d.strides[1] != 1:
            raise error(_capi.FLASH_ERROR_BAD_STRIDE, "%s has a column stride of %d elements but its rows must be "
                        "contiguous (stride 1)" % (name, d.strides[1]))
        row_stride = d.strides[0] if d.shape[0] > 1 else 0
        if d.shape[0] > 1 and row_stride < d.shape[1]:
            raise error(_capi.FLASH_ERROR_BAD_STRIDE, "%s has a row stride of %d elements, less than its %d columns "
                        "(rows may not overlap or broadcast; pass a contiguous array)" % (name, row_stride, d.shape[1]))
    return d.ptr, row_stride, d


def _shape_str(shape):
    inner = ", ".join("max_pages_per_seq" if s is None else str(s) for s in shape)
    return "(%s%s)" % (inner, "," if len(shape) == 1 else "")


def _check_shape(shape, name, expected):
    if len(shape) != len(expected) or any(e is not None and s != e for s, e in zip(shape, expected)):
        raise error(_capi.FLASH_ERROR_BAD_SHAPE, "%s has shape %s but must be %s (batch = q.shape[0])"
                    % (name, tuple(shape), _shape_str(expected)))
    if any(s <= 0 for s in shape):
        raise error(_capi.FLASH_ERROR_BAD_SHAPE, "%s has shape %s; every extent must be positive"
                    % (name, tuple(shape)))


def _workspace(ws, q, user_stream):
    """(pointer, bytes, keepalive) of a caller's scratch array: any dtype, C-contiguous, on q's device."""
    d = describe(ws, "workspace", user_stream)
    if d.device_type != q.device_type or (q.is_cuda and d.device_id != q.device_id):
        raise error(_capi.FLASH_ERROR_DEVICE_MISMATCH, "workspace is not on the device of q")
    if d.kind == "numpy":
        if not ws.flags.writeable:
            raise error(_capi.FLASH_ERROR_INVALID_ARGUMENT, "workspace is a read-only numpy array")
        contiguous, nbytes = ws.flags.c_contiguous, ws.nbytes
    elif d.kind == "torch":
        contiguous, nbytes = ws.is_contiguous(), ws.numel() * ws.element_size()
    elif hasattr(ws, "nbytes") and hasattr(ws, "flags"):  # CuPy, Numba
        contiguous, nbytes = ws.flags.c_contiguous, int(ws.nbytes)
    else:
        raise TypeError("libflash: workspace must be a numpy array, a torch tensor or a CuPy/Numba array")
    if not contiguous:
        raise error(_capi.FLASH_ERROR_INVALID_ARGUMENT, "workspace must be a contiguous array")
    return d.ptr, int(nbytes), d


# ---- attention_with_kvcache --------------------------------------------------------------------------------------
def _set_kv_options(args, softmax_scale, causal, window, num_splits, algorithm):
    """The option fields of flash_kvcache_args, validated."""
    if softmax_scale is not None:
        softmax_scale = c_float(softmax_scale, "softmax_scale", _capi.FLASH_ERROR_INVALID_ARGUMENT)
        if softmax_scale == 0.0:
            raise error(_capi.FLASH_ERROR_INVALID_ARGUMENT, "softmax_scale is 0; the ABI reads 0 as 'the default "
                        "1/sqrt(head_dim)'. Pass None for the default")
        args.softmax_scale = softmax_scale
    args.causal = 1 if causal else 0
    args.window_left, args.window_right = _window(window)
    args.num_splits = c_int(num_splits, "num_splits", _capi.FLASH_ERROR_INVALID_ARGUMENT)
    args.algorithm = _algorithm_id(algorithm)


_KV = _capi.flash_kvcache_args
_PACK = _fast.TENSOR.pack_into
_K_Q, _K_KC, _K_VC, _K_KN, _K_VN, _K_O, _K_LSE = (
    getattr(_KV, n).offset for n in ("q", "k_cache", "v_cache", "k_new", "v_new", "o", "lse"))
_K_STREAM, _K_WS = _KV.stream.offset, _KV.workspace.offset
_KV_TEMPLATES = {}
_I32_MIN, _I32_MAX = -2 ** 31, 2 ** 31 - 1


def _kv_template(softmax_scale, causal, window, num_splits, algorithm):
    key = (softmax_scale, causal, window, num_splits, algorithm)
    try:
        t = _KV_TEMPLATES.get(key)
    except TypeError:
        key, t = None, None
    if t is None:
        args = _KV()
        check(_capi.flash_kvcache_args_init(ctypes.byref(args)))
        _set_kv_options(args, softmax_scale, causal, window, num_splits, algorithm)
        t = bytes(args)
        if key is not None:
            if len(_KV_TEMPLATES) >= 512:
                _KV_TEMPLATES.clear()
            _KV_TEMPLATES[key] = t
    return t


def _kvcache_fast(kind, q, k_cache, v_cache, k, v, cache_seqlens, block_table, cache_batch_idx, causal, window,
                  softmax_scale, num_splits, return_lse, algorithm):
    """attention_with_kvcache() for arrays of one fast kind with index arrays already int32 on q's device (or an int
    cache_seqlens), results allocated here; None when the general path must take the call."""
    kinds = _fast.KINDS
    if kinds.get(type(k_cache)) is not kind or kinds.get(type(v_cache)) is not kind:
        return None
    appending = k is not None or v is not None
    if appending and (kinds.get(type(k)) is not kind or kinds.get(type(v)) is not kind):
        return None
    if kind.needs_grad(q, k_cache, v_cache, k, v):
        return None  # the general path refuses it
    if appending and kind is _fast.NumpyKind and not (k_cache.flags.writeable and v_cache.flags.writeable):
        return None
    fq = kind.fields(q, 4)
    fkc = kind.fields(k_cache, 4)
    fvc = kind.fields(v_cache, 4)
    if fq is None or fkc is None or fvc is None:
        return None
    fk = fv = None
    if appending:
        fk = kind.fields(k, 4)
        fv = kind.fields(v, 4)
        if fk is None or fv is None:
            return None
    batch, sn, hq, d = fq[5], fq[6], fq[7], fq[8]
    code, dt, di = fq[1], fq[2], fq[3]
    # Index arrays: int32 arrays of this kind on q's device with the shapes the library reads, or an int in range.
    keep = None
    if type(cache_seqlens) is int:
        if not _I32_MIN <= cache_seqlens <= _I32_MAX:
            return None
        if dt == _fast.CPU:
            keep = np.full((batch,), cache_seqlens, np.int32)
            p_seqlens = _fast.np_ptr(keep)
        else:  # a fill on the device, in stream order (no host-to-device copy, nothing to synchronise)
            keep = kind.torch.full((batch,), cache_seqlens, dtype=kind.i32, device=q.device)
            p_seqlens = keep.data_ptr()
    else:
        p_seqlens = kind.int32_ptr(cache_seqlens, (batch,), q)
        if p_seqlens is None:
            return None
    p_batch_idx = None
    if cache_batch_idx is not None:
        p_batch_idx = kind.int32_ptr(cache_batch_idx, (batch,), q)
        if p_batch_idx is None:
            return None
    p_table = None
    table_key = None
    if block_table is not None:
        shape = tuple(getattr(block_table, "shape", ()))
        if len(shape) != 2 or not 0 < shape[1] <= _I32_MAX:
            return None
        p_table = kind.int32_ptr(block_table, (batch, shape[1]), q)
        if p_table is None:
            return None
        if shape[0] > 1:
            row = block_table.strides[0] // 4 if kind is _fast.NumpyKind else block_table.stride(0)
        else:
            row = 0
        table_key = shape
    try:
        tmpl = _kv_template(softmax_scale, causal, window, num_splits, algorithm)
    except Exception:
        return None
    o = kind.empty(q, (batch, sn, hq, d))
    op = kind.ptr(o)
    args = _KV.from_buffer_copy(tmpl)
    _PACK(args, _K_Q, *fq)
    _PACK(args, _K_KC, *fkc)
    _PACK(args, _K_VC, *fvc)
    if appending:
        _PACK(args, _K_KN, *fk)
        _PACK(args, _K_VN, *fv)
    _PACK(args, _K_O, op, code, dt, di, 4, batch, sn, hq, d, sn * hq * d, hq * d, d, 1)
    lse = None
    if return_lse:
        lse = kind.empty_f32(q, (batch, hq, sn))
        _PACK(args, _K_LSE, kind.ptr(lse), _fast.FP32, dt, di, 3, batch, hq, sn, 0, hq * sn, sn, 1, 0)
    args.cache_seqlens = p_seqlens
    if p_batch_idx is not None:
        args.cache_batch_idx = p_batch_idx
    if p_table is not None:
        args.block_table = p_table
        args.max_pages_per_seq = table_key[1]
        args.block_table_stride = row
    if dt == _fast.CUDA:
        _fast.POINTER.pack_into(args, _K_STREAM, kind.raw_stream(di))
        key = (tmpl, fq[1:9], fkc[5:9], fk[5:9] if appending else None, table_key, p_batch_idx is None)
        status, ws = _fast.run_with_workspace(_capi.flash_fwd_kvcache, _capi.flash_fwd_kvcache_workspace_size, args,
                                              _K_WS, key, kind, q, op)
    else:
        status = _capi.flash_fwd_kvcache(args)
    if status:
        check(status)
    _last.algorithm_used = args.algorithm_used
    _last.num_splits_used = args.num_splits_used
    del keep
    return (o, lse) if return_lse else o


def _kvcache_args(q, k_cache, v_cache, k, v, cache_seqlens, block_table, cache_batch_idx, causal, window,
                  softmax_scale, num_splits, return_lse, algorithm, out, stream, workspace):
    """(flash_kvcache_args, out, lse, keepalive, allocator) for a call; raises what the binding or the library
    refuses."""
    _require(_capi.flash_fwd_kvcache, "flash_fwd_kvcache")
    if kind_of(q) is None:
        raise TypeError("libflash: q is a %s.%s; expected a numpy array, a torch tensor, or an array exposing "
                        "__cuda_array_interface__ or __dlpack__" % (type(q).__module__, type(q).__name__))
    user_stream = stream_pointer(stream)
    named = [("q", q), ("k_cache", k_cache), ("v_cache", v_cache)]
    named += [(n, x) for n, x in (("k", k), ("v", v)) if x is not None]
    descs = {n: describe(x, n, user_stream) for n, x in named}
    _refuse_autograd(list(descs.values()), "attention_with_kvcache")
    dq = descs["q"]
    if k is not None or v is not None:
        for name in ("k_cache", "v_cache"):
            x = descs[name].obj
            if descs[name].kind == "numpy" and not x.flags.writeable:
                raise error(_capi.FLASH_ERROR_INVALID_ARGUMENT, "%s is a read-only numpy array, but k and v are "
                            "appended to it in place" % name)
    run_stream = _run_stream(dq, user_stream)
    alloc = Allocator(dq, run_stream)

    args = _capi.flash_kvcache_args()
    check(_capi.flash_kvcache_args_init(ctypes.byref(args)))
    args.q = dq.tensor("q", 4)
    args.k_cache = descs["k_cache"].tensor("k_cache", 4)
    args.v_cache = descs["v_cache"].tensor("v_cache", 4)
    if "k" in descs:
        args.k_new = descs["k"].tensor("k", 4)
    if "v" in descs:
        args.v_new = descs["v"].tensor("v", 4)
    if len(dq.shape) != 4:
        # Let the library name the problem (it checks each tensor's ndim first); o needs a 4-d q to be shaped.
        args.o = args.q
        check(_capi.flash_fwd_kvcache(ctypes.byref(args)))
        raise error(_capi.FLASH_ERROR_BAD_SHAPE, "q must be 4-d [batch, seqlen_new, heads_q, head_dim]")
    batch, seqlen_new, heads_q, head_dim = dq.shape

    if out is None:
        out = alloc.empty((batch, seqlen_new, heads_q, head_dim), "like")
    keep = [descs, _output(out, "out", user_stream)]
    args.o = keep[-1].tensor("out", 4)
    lse = None
    if return_lse:
        lse = alloc.empty((batch, heads_q, seqlen_new), "float32")
        keep.append(describe(lse, "lse", user_stream))
        args.lse = keep[-1].tensor("lse", 3)

    # Index arrays, on q's device.
    if cache_seqlens is None:
        raise error(_capi.FLASH_ERROR_NULL_POINTER, "cache_seqlens is required: the number of keys in the cache of "
                    "each sequence before the call, shape (batch,)")
    args.cache_seqlens, _, d = _index_array(cache_seqlens, "cache_seqlens", (batch,), dq, alloc, user_stream)
    keep.append(d)
    if cache_batch_idx is not None:
        args.cache_batch_idx, _, d = _index_array(cache_batch_idx, "cache_batch_idx", (batch,), dq, alloc,
                                                  user_stream)
        keep.append(d)
    if block_table is not None:
        ptr, row_stride, d = _index_array(block_table, "block_table", (batch, None), dq, alloc, user_stream)
        keep.append(d)
        args.block_table = ptr
        args.max_pages_per_seq = c_int(d.shape[1], "block_table.shape[1] (max_pages_per_seq)",
                                       _capi.FLASH_ERROR_BAD_SHAPE)
        args.block_table_stride = row_stride  # 0: the library's default, max_pages_per_seq

    _set_kv_options(args, softmax_scale, causal, window, num_splits, algorithm)
    args.stream = run_stream or None
    if workspace is not None:
        ptr, nbytes, d = _workspace(workspace, dq, user_stream)
        keep.append(d)
        args.workspace, args.workspace_size = ptr or None, nbytes
    return args, out, lse, keep, alloc


def attention_with_kvcache(q, k_cache, v_cache, *, k=None, v=None, cache_seqlens, block_table=None,
                           cache_batch_idx=None, causal=False, window=(-1, -1), softmax_scale=None, num_splits=0,
                           return_lse=False, algorithm="auto", out=None, stream=None, workspace=None):
    """Attention of new query tokens over a key/value cache, optionally appending the new keys and values to the
    cache first (FlashAttention-2's flash_attn_with_kvcache; flash_fwd_kvcache in flash.h).

    q: [batch, seqlen_new, heads_q, head_dim]. The cache is either
      contiguous: k_cache, v_cache [batch_cache, max_len, heads_kv, head_dim]; sequence i uses cache row
          cache_batch_idx[i] (row i without cache_batch_idx; then batch_cache >= batch), or
      paged: k_cache, v_cache [num_pages, page_size, heads_kv, head_dim] (any page_size >= 1) with block_table
          [batch, max_pages_per_seq]: key position t of sequence i is row t % page_size of page
          block_table[i, t // page_size].
    heads_q must be a multiple of heads_kv (GQA/MQA). Any strides, the last dimension contiguous.
    cache_seqlens: [batch], the keys in each sequence's cache before the call (an int is broadcast to every
        sequence).
    k, v: optional [batch, seqlen_new, heads_kv, head_dim]. When given, THE CACHE IS MODIFIED IN PLACE: sequence i's
        new rows are written into k_cache and v_cache at positions cache_seqlens[i] .. cache_seqlens[i] +
        seqlen_new - 1 (nothing else in the cache is written, cache_seqlens itself is not updated), and the queries
        attend to those keys too. The positions must fit the cache.
    The queries of sequence i attend to its first L_i = cache_seqlens[i] (+ seqlen_new when appending) keys.
    causal / window=(left, right): bottom-right aligned per sequence (query row r sits at key position
        L_i - seqlen_new + r); -1 = unbounded; causal is right = 0. A row that sees no key gets O = 0, LSE = -inf.
    softmax_scale: None = 1/sqrt(head_dim).
    num_splits: split each sequence's keys into that many chunks computed apart and merged (split-KV); 0 = let the
        library choose; at most 256.
    return_lse: also return the fp32 natural-log log-sum-exp [batch, heads_q, seqlen_new].
    algorithm: "auto" or "cpu" (the only one serving this call today; CUDA arrays are refused with
        FLASH_ERROR_ALGORITHM_UNAVAILABLE until the GPU kernels are built).
    out: optional preallocated output shaped and typed like q.
    stream: as attention(): the given stream, or the framework's current one. GPU calls are asynchronous.
    workspace: optional scratch array on q's device (any dtype, contiguous) of at least
        kvcache_workspace_size(...) bytes; None (the default) lets the library allocate what it needs.

    Index arrays (cache_seqlens, cache_batch_idx, block_table) live on q's device. Host data (numpy, lists, CPU
    tensors) of any integer dtype is taken when its values fit int32 (refused otherwise, never wrapped) and copied
    to q's GPU when q is on one; GPU index arrays must already be int32 on q's device, contiguous along their last
    dimension. On the CPU the library checks every value before writing anything (every position read or appended
    inside the cache, every page and cache row in range, no two sequences appending to one slot).

    Not differentiable: torch inputs that require grad (in grad mode) are refused.
    Returns out, or (out, lse) when return_lse. Raises FlashError on any invalid argument.
    """
    if out is None and stream is None and workspace is None and _capi.flash_fwd_kvcache is not None:
        kind = _fast.KINDS.get(type(q))
        if kind is not None:
            r = _kvcache_fast(kind, q, k_cache, v_cache, k, v, cache_seqlens, block_table, cache_batch_idx, causal,
                              window, softmax_scale, num_splits, return_lse, algorithm)
            if r is not None:
                return r
    args, out, lse, keep, alloc = _kvcache_args(q, k_cache, v_cache, k, v, cache_seqlens, block_table,
                                                cache_batch_idx, causal, window, softmax_scale, num_splits, return_lse,
                                                algorithm, out, stream, workspace)
    if workspace is None:
        keep.append(_framework_workspace(args, _capi.flash_fwd_kvcache_workspace_size, alloc))
    # ctypes drops the GIL for the call; the CPU backend runs threaded.
    check(_capi.flash_fwd_kvcache(ctypes.byref(args)))
    _last.algorithm_used = args.algorithm_used
    _last.num_splits_used = args.num_splits_used
    del keep  # GPU: uploaded index arrays came from a stream-ordered allocator on the call's stream
    return (out, lse) if return_lse else out


def kvcache_workspace_size(q, k_cache, v_cache, *, k=None, v=None, cache_seqlens, block_table=None,
                           cache_batch_idx=None, causal=False, window=(-1, -1), softmax_scale=None, num_splits=0,
                           return_lse=False, algorithm="auto"):
    """Bytes of workspace attention_with_kvcache would use for these arguments (0 when none is needed), from
    flash_fwd_kvcache_workspace_size. Nothing is written (the result array is allocated and dropped)."""
    args, _, _, keep, _ = _kvcache_args(q, k_cache, v_cache, k, v, cache_seqlens, block_table, cache_batch_idx, causal,
                                     window, softmax_scale, num_splits, return_lse, algorithm, None, None, None)
    n = ctypes.c_size_t(0)
    check(_capi.flash_fwd_kvcache_workspace_size(ctypes.byref(args), ctypes.byref(n)))
    del keep
    return n.value


def last_num_splits_used():
    """The splits the last successful attention_with_kvcache() call on this thread used (None before any)."""
    return getattr(_last, "num_splits_used", None)


# ---- combine ------------------------------------------------------------------------------------------------------
def _part(d, i):
    """Desc of part i of a stacked array [num_parts, ...] (a view by pointer arithmetic, any array kind)."""
    return Desc(d.obj, d.kind, d.ptr + i * d.strides[0] * _ITEMSIZE.get(d.dtype, 0), d.dtype, d.device_type,
                d.device_id, d.shape[1:], d.strides[1:], keepalive=d.keepalive, cai_stream=d.cai_stream)


def _parts(x, name, ndim, user_stream):
    """Descs of the parts: x is one stacked array [num_parts, ...] or a sequence of arrays."""
    if kind_of(x) is not None:
        d = describe(x, name, user_stream)
        if len(d.shape) != ndim + 1:
            raise error(_capi.FLASH_ERROR_BAD_SHAPE, "%s is one array of %d dimensions; stacked parts must have %d "
                        "(num_parts first)" % (name, len(d.shape), ndim + 1))
        return [_part(d, i) for i in range(d.shape[0])]
    try:
        seq = list(x)
    except TypeError:
        raise TypeError("libflash: %s must be a sequence of arrays or one stacked array, not a %s"
                        % (name, type(x).__name__)) from None
    return [describe(p, "%s[%d]" % (name, i), user_stream) for i, p in enumerate(seq)]


_COMBINE = _capi.flash_combine_args
_C_O, _C_LSE, _C_STREAM = _COMBINE.o.offset, _COMBINE.lse.offset, _COMBINE.stream.offset
_COMBINE_TEMPLATE = []


def _combine_fast(kind, o_parts, lse_parts, return_lse):
    """combine() for sequences of arrays of one fast kind, results allocated here; None for the general path."""
    kinds = _fast.KINDS
    n = len(o_parts)
    fo, fl = [], []
    for p, l in zip(o_parts, lse_parts):
        if kinds.get(type(p)) is not kind or kinds.get(type(l)) is not kind:
            return None
        a, b = kind.fields(p, 4), kind.fields(l, 3)
        if a is None or b is None:
            return None
        fo.append(a)
        fl.append(b)
    if kind.needs_grad(*o_parts, *lse_parts):
        return None  # refused by the general path
    if not _COMBINE_TEMPLATE:
        args = _COMBINE()
        check(_capi.flash_combine_args_init(ctypes.byref(args)))
        _COMBINE_TEMPLATE.append(bytes(args))
    o_arr = (_capi.flash_tensor * n)()
    lse_arr = (_capi.flash_tensor * n)()
    size = ctypes.sizeof(_capi.flash_tensor)
    for i in range(n):
        _PACK(o_arr, i * size, *fo[i])
        _PACK(lse_arr, i * size, *fl[i])
    f0 = fo[0]
    code, dt, di = f0[1], f0[2], f0[3]
    b, s, h, d = f0[5], f0[6], f0[7], f0[8]
    like = o_parts[0]
    out = kind.empty(like, (b, s, h, d))
    args = _COMBINE.from_buffer_copy(_COMBINE_TEMPLATE[0])
    args.num_parts = n
    args.o_parts = ctypes.cast(o_arr, ctypes.POINTER(_capi.flash_tensor))
    args.lse_parts = ctypes.cast(lse_arr, ctypes.POINTER(_capi.flash_tensor))
    _PACK(args, _C_O, kind.ptr(out), code, dt, di, 4, b, s, h, d, s * h * d, h * d, d, 1)
    lse = None
    if return_lse:
        lse = kind.empty_f32(like, (b, h, s))
        _PACK(args, _C_LSE, kind.ptr(lse), _fast.FP32, dt, di, 3, b, h, s, 0, h * s, s, 1, 0)
    if dt == _fast.CUDA:
        _fast.POINTER.pack_into(args, _C_STREAM, kind.raw_stream(di))
    check(_capi.flash_combine(args))
    return (out, lse) if return_lse else out


def combine(o_parts, lse_parts, *, out=None, return_lse=False, stream=None):
    """Merges partial attention results of the same queries over disjoint sets of keys into the result over all of
    them (flash_combine; the merge of split-KV attention):
        M = max_p LSE_p,  w_p = exp(LSE_p - M),  O = sum_p w_p O_p / sum_p w_p,  LSE = M + log(sum_p w_p).

    o_parts: a sequence of num_parts arrays [batch, seqlen, heads, head_dim], one dtype for all (fp32 partials keep
        the most accuracy; fp16, bf16), or one stacked array [num_parts, batch, seqlen, heads, head_dim].
    lse_parts: likewise, fp32 [batch, heads, seqlen] each (or stacked [num_parts, batch, heads, seqlen]), in the
        NATURAL log as attention(..., return_lse=True) returns it (FlashInfer's base-2 LSE: multiply by ln 2 first).
    A part whose LSE is -inf for a row (it saw no key) contributes nothing there (its O is not read); a row where
    every part is -inf gets O = 0 and LSE = -inf. Computed in double, O rounded once.
    out: optional preallocated output [batch, seqlen, heads, head_dim] of any supported dtype; without it the result
        has the parts' dtype and array kind.
    return_lse: also return the merged fp32 LSE [batch, heads, seqlen].
    stream: as attention(). Arrays are taken as by attention() (any strides, contiguous last dimension). CUDA arrays
        are refused with FLASH_ERROR_ALGORITHM_UNAVAILABLE until the GPU kernel is built.

    Returns out, or (out, lse) when return_lse. Raises FlashError on any invalid argument.
    """
    if out is None and stream is None and _capi.flash_combine is not None and type(o_parts) in (list, tuple) \
            and type(lse_parts) in (list, tuple) and o_parts and len(o_parts) == len(lse_parts):
        kind = _fast.KINDS.get(type(o_parts[0]))
        if kind is not None:
            r = _combine_fast(kind, o_parts, lse_parts, return_lse)
            if r is not None:
                return r
    _require(_capi.flash_combine, "flash_combine")
    user_stream = stream_pointer(stream)
    o_descs = _parts(o_parts, "o_parts", 4, user_stream)
    lse_descs = _parts(lse_parts, "lse_parts", 3, user_stream)
    if not o_descs:
        raise error(_capi.FLASH_ERROR_INVALID_ARGUMENT, "o_parts is empty; combine needs at least one part")
    if len(o_descs) != len(lse_descs):
        raise error(_capi.FLASH_ERROR_INVALID_ARGUMENT, "o_parts has %d parts but lse_parts has %d"
                    % (len(o_descs), len(lse_descs)))
    _refuse_autograd(o_descs + lse_descs, "combine")
    d0 = o_descs[0]
    if len(d0.shape) != 4:
        raise error(_capi.FLASH_ERROR_BAD_SHAPE, "o_parts[0] has %d dimensions but must have 4 [batch, seqlen, heads, "
                    "head_dim]" % len(d0.shape))
    run_stream = _run_stream(d0, user_stream)
    alloc = Allocator(d0, run_stream)
    n = len(o_descs)
    o_arr = (_capi.flash_tensor * n)(*[d.tensor("o_parts[%d]" % i, 4) for i, d in enumerate(o_descs)])
    lse_arr = (_capi.flash_tensor * n)(*[d.tensor("lse_parts[%d]" % i, 3) for i, d in enumerate(lse_descs)])

    args = _capi.flash_combine_args()
    check(_capi.flash_combine_args_init(ctypes.byref(args)))
    args.num_parts = c_int(n, "num_parts", _capi.FLASH_ERROR_INVALID_ARGUMENT)
    args.o_parts = ctypes.cast(o_arr, ctypes.POINTER(_capi.flash_tensor))
    args.lse_parts = ctypes.cast(lse_arr, ctypes.POINTER(_capi.flash_tensor))
    batch, seqlen, heads, head_dim = d0.shape
    if out is None:
        out = alloc.empty((batch, seqlen, heads, head_dim), "like")
    keep = [o_descs, lse_descs, o_arr, lse_arr, _output(out, "out", user_stream)]
    args.o = keep[-1].tensor("out", 4)
    lse = None
    if return_lse:
        lse = alloc.empty((batch, heads, seqlen), "float32")
        keep.append(describe(lse, "lse", user_stream))
        args.lse = keep[-1].tensor("lse", 3)
    args.stream = run_stream or None
    check(_capi.flash_combine(ctypes.byref(args)))
    del keep
    return (out, lse) if return_lse else out
