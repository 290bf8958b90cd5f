"""Turning array objects into flash_tensor descriptors, and allocating results like the input.

Supported inputs, recognised by type(x).__module__ before anything is imported:
  numpy.ndarray                      -> CPU                         (kind "numpy")
  torch.Tensor (CPU or CUDA)         -> its device                  (kind "torch")
  cupy.ndarray                       -> CUDA, __cuda_array_interface__ (kind "cupy")
  numba CUDA device arrays           -> CUDA, __cuda_array_interface__ (kind "numba")
  anything else with __cuda_array_interface__                        (kind "cai")
  anything else with __dlpack__ / __dlpack_device__ (JAX, ...)      (kind "dlpack")
A framework module is imported only when the input came from it (it is then already in sys.modules).
"""

import ctypes
import sys

import numpy as np

from . import _capi, _fast
from ._errors import c_int, error

# DLPack device codes (flash.h follows them: CPU 1, CUDA 2).
_DL_CPU = 1
_DL_CUDA = 2
_DL_CUDA_HOST = 3
_DL_CUDA_MANAGED = 13

_I32_MIN, _I32_MAX = -2 ** 31, 2 ** 31 - 1

_FLASH_DTYPES = {"float32": _capi.FLASH_DTYPE_FP32, "float16": _capi.FLASH_DTYPE_FP16, "bfloat16": _capi.FLASH_DTYPE_BF16}


def _module(x):
    return type(x).__module__ or ""


def kind_of(x):
    mod = _module(x)
    if mod == "numpy" or mod.startswith("numpy."):
        return "numpy"
    if mod == "torch" or mod.startswith("torch."):
        return "torch"
    if mod == "cupy" or mod.startswith("cupy.") or mod.startswith("cupy_"):
        return "cupy"
    if (mod == "numba" or mod.startswith("numba.")) and hasattr(x, "__cuda_array_interface__"):
        return "numba"
    if "numpy" in sys.modules and isinstance(x, np.ndarray):  # subclasses defined elsewhere
        return "numpy"
    if hasattr(x, "__cuda_array_interface__"):
        return "cai"
    if hasattr(x, "__dlpack__") and hasattr(x, "__dlpack_device__"):
        return "dlpack"
    return None


class Desc:
    """What the library needs to know about one array, plus what keeps its memory alive."""

    __slots__ = ("obj", "kind", "ptr", "dtype", "device_type", "device_id", "shape", "strides", "keepalive",
                 "cai_stream")

    def __init__(self, obj, kind, ptr, dtype, device_type, device_id, shape, strides, keepalive=None, cai_stream=None):
        self.obj = obj
        self.kind = kind
        self.ptr = int(ptr or 0)
        self.dtype = dtype  # a name: "float32", "float16", "bfloat16", "int32", "bool", ...
        self.device_type = device_type
        self.device_id = int(device_id)
        self.shape = tuple(int(s) for s in shape)
        self.strides = tuple(int(s) for s in strides)  # in elements
        self.keepalive = keepalive
        self.cai_stream = cai_stream

    @property
    def is_cuda(self):
        return self.device_type == _capi.FLASH_DEVICE_CUDA

    def flash_dtype(self, name):
        code = _FLASH_DTYPES.get(self.dtype)
        if code is None:
            raise error(_capi.FLASH_ERROR_UNSUPPORTED_DTYPE,
                        "%s.dtype is %s, which libflash does not take (float32 on the CPU, float16, bfloat16)"
                        % (name, self.dtype))
        return code

    def tensor(self, name, ndim_expected):
        """A flash_tensor for this array. Shapes the struct cannot hold, or that are empty, are refused
        here with the library's codes; everything else (ndim, strides, dtype agreement) the library checks."""
        if len(self.shape) > 4:
            raise error(_capi.FLASH_ERROR_BAD_SHAPE, "%s has %d dimensions but must have %d"
                        % (name, len(self.shape), ndim_expected))
        for i, s in enumerate(self.shape):
            if s <= 0:
                raise error(_capi.FLASH_ERROR_BAD_SHAPE, "%s.shape[%d] is %d but must be positive" % (name, i, s))
        t = _capi.flash_tensor()
        t.data = self.ptr or None
        t.dtype = self.flash_dtype(name)
        t.device_type = self.device_type
        t.device_id = c_int(self.device_id, name + ".device_id", _capi.FLASH_ERROR_INVALID_ARGUMENT) if self.is_cuda else 0
        t.ndim = len(self.shape)
        for i, (s, st) in enumerate(zip(self.shape, self.strides)):
            t.shape[i] = c_int(s, "%s.shape[%d]" % (name, i), _capi.FLASH_ERROR_BAD_SHAPE, 64)
            t.strides[i] = c_int(st, "%s.strides[%d]" % (name, i), _capi.FLASH_ERROR_BAD_STRIDE, 64)
        return t


def _elem_strides(byte_strides, itemsize, name):
    out = []
    for s in byte_strides:
        if s % itemsize:
            raise error(_capi.FLASH_ERROR_BAD_STRIDE,
                        "%s has a stride of %d bytes, not a multiple of its element size %d" % (name, s, itemsize))
        out.append(s // itemsize)
    return tuple(out)


def _contiguous_strides(shape):
    strides, acc = [], 1
    for s in reversed(shape):
        strides.append(acc)
        acc *= max(int(s), 1)
    return tuple(reversed(strides))


def _describe_numpy(x, name):
    dtype = x.dtype.name if x.dtype.isnative else "%s (non-native byte order)" % x.dtype.name
    return Desc(x, "numpy", x.ctypes.data, dtype, _capi.FLASH_DEVICE_CPU, 0, x.shape,
                _elem_strides(x.strides, x.itemsize, name), keepalive=x)


_TORCH_DTYPES = {"torch.float32": "float32", "torch.float16": "float16", "torch.bfloat16": "bfloat16",
                 "torch.int32": "int32", "torch.bool": "bool", "torch.float64": "float64", "torch.int64": "int64"}


def _describe_torch(x, name):
    dev = x.device
    if dev.type == "cuda":
        device_type, device_id = _capi.FLASH_DEVICE_CUDA, dev.index if dev.index is not None else 0
    elif dev.type == "cpu":
        device_type, device_id = _capi.FLASH_DEVICE_CPU, 0
    else:
        raise error(_capi.FLASH_ERROR_INVALID_ARGUMENT, "%s is on torch device %s; libflash takes cpu or cuda" % (name, dev))
    dtype = _TORCH_DTYPES.get(str(x.dtype), str(x.dtype).replace("torch.", ""))
    return Desc(x, "torch", x.data_ptr(), dtype, device_type, device_id, tuple(x.shape), tuple(x.stride()), keepalive=x)


def _describe_cai(x, name, kind):
    cai = x.__cuda_array_interface__
    if cai.get("mask") is not None:
        raise error(_capi.FLASH_ERROR_INVALID_ARGUMENT, "%s is a masked CUDA array; libflash takes plain arrays" % name)
    dt = np.dtype(cai["typestr"])
    shape = tuple(cai["shape"])
    strides = cai.get("strides")
    strides = _contiguous_strides(shape) if strides is None else _elem_strides(strides, dt.itemsize, name)
    ptr = cai["data"][0]
    if kind == "cupy":
        device_id = x.device.id
    else:
        device_id = _cuda_pointer_device(ptr)
    dtype = dt.name if dt.kind in "fiub" else "unsupported(%s)" % cai["typestr"]
    return Desc(x, kind, ptr, dtype, _capi.FLASH_DEVICE_CUDA, device_id, shape, strides, keepalive=x,
                cai_stream=cai.get("stream"))


# ---- DLPack, read through ctypes (no compiled extension) ----------------------------------------------
class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32), ("dtype", _DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


_PyCapsule_GetPointer = ctypes.pythonapi.PyCapsule_GetPointer
_PyCapsule_GetPointer.restype = ctypes.c_void_p
_PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]

_DL_CODES = {(2, 32): "float32", (2, 16): "float16", (4, 16): "bfloat16", (0, 32): "int32", (0, 64): "int64",
             (1, 8): "bool", (6, 8): "bool", (2, 64): "float64"}


def _describe_dlpack(x, name, stream):
    dev_type, dev_id = x.__dlpack_device__()
    dev_type = int(dev_type)
    if dev_type == _DL_CUDA:
        # Consumer's stream per the DLPack protocol: 1 = legacy default, else the cudaStream_t.
        capsule = x.__dlpack__(stream=(stream or 1))
        device_type = _capi.FLASH_DEVICE_CUDA
    elif dev_type in (_DL_CPU, _DL_CUDA_HOST):
        capsule = x.__dlpack__()
        device_type = _capi.FLASH_DEVICE_CPU
    else:
        raise error(_capi.FLASH_ERROR_INVALID_ARGUMENT,
                    "%s is on DLPack device type %d; libflash takes CPU (1) or CUDA (2) arrays" % (name, dev_type))
    # The capsule keeps ownership: while it lives the tensor lives; when it is collected unconsumed its
    # destructor calls the producer's deleter. We only read the struct and keep the capsule alive.
    addr = _PyCapsule_GetPointer(capsule, b"dltensor")
    t = _DLManagedTensor.from_address(addr).dl_tensor
    ndim = t.ndim
    shape = tuple(t.shape[i] for i in range(ndim))
    strides = tuple(t.strides[i] for i in range(ndim)) if t.strides else _contiguous_strides(shape)
    if t.dtype.lanes != 1:
        dtype = "unsupported(vector)"
    else:
        dtype = _DL_CODES.get((t.dtype.code, t.dtype.bits), "unsupported(code %d, %d bits)" % (t.dtype.code, t.dtype.bits))
    ptr = (t.data or 0) + t.byte_offset
    return Desc(x, "dlpack", ptr, dtype, device_type, dev_id if device_type == _capi.FLASH_DEVICE_CUDA else 0,
                shape, strides, keepalive=(x, capsule))


def describe(x, name, stream_hint=None):
    """Desc for x. `stream_hint` is the stream the work will run on (used for DLPack producers)."""
    kind = kind_of(x)
    if kind == "numpy":
        return _describe_numpy(x, name)
    if kind == "torch":
        import torch

        _fast.register_torch(torch)  # later calls with torch tensors may take the fast path
        if isinstance(x, torch.Tensor):
            return _describe_torch(x, name)
    if kind in ("cupy", "numba", "cai"):
        return _describe_cai(x, name, kind)
    if kind == "dlpack" or hasattr(x, "__dlpack__"):
        return _describe_dlpack(x, name, stream_hint)
    raise TypeError("libflash: %s is a %s.%s; expected a numpy array, a torch tensor, or an array exposing "
                    "__cuda_array_interface__ or __dlpack__" % (name, _module(x), type(x).__name__))


# ---- CUDA driver helper (generic __cuda_array_interface__ arrays do not say which device they are on) --
_libcuda = None


def _cuda_pointer_device(ptr):
    global _libcuda
    try:
        if _libcuda is None:
            _libcuda = ctypes.CDLL("libcuda.so.1")
            _libcuda.cuInit(0)
        ordinal = ctypes.c_int(0)
        CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9
        r = _libcuda.cuPointerGetAttribute(ctypes.byref(ordinal), CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                           ctypes.c_uint64(ptr))
        return ordinal.value if r == 0 else 0
    except (OSError, AttributeError):
        return 0


# ---- Streams --------------------------------------------------------------------------------------------
def stream_pointer(stream):
    """cudaStream_t (as an int) from an int, a torch.cuda.Stream, a CuPy stream or a Numba stream."""
    if stream is None:
        return None
    if isinstance(stream, bool):
        raise TypeError("libflash: stream must be a stream object or a cudaStream_t integer, not a bool")
    if isinstance(stream, int):
        return stream
    for attr in ("cuda_stream", "ptr"):  # torch.cuda.Stream / cupy.cuda.Stream
        v = getattr(stream, attr, None)
        if isinstance(v, int):
            return v
    h = getattr(stream, "handle", None)  # numba.cuda stream: handle is a ctypes c_void_p
    if h is not None:
        v = getattr(h, "value", h)
        return int(v or 0)
    raise TypeError("libflash: cannot get a cudaStream_t from a %s; pass an int, a torch.cuda.Stream or a "
                    "cupy.cuda.Stream" % type(stream).__name__)


def current_stream(desc):
    """The framework's current stream for a CUDA input."""
    if desc.kind == "torch":
        import torch

        return torch.cuda.current_stream(desc.obj.device).cuda_stream
    if desc.kind == "cupy":
        import cupy

        with cupy.cuda.Device(desc.device_id):
            return cupy.cuda.get_current_stream().ptr
    if desc.cai_stream is not None:  # CAI v3: the stream the producer works on
        return int(desc.cai_stream)
    return 0


# ---- Allocation like the input ----------------------------------------------------------------------------
class Allocator:
    """Allocates outputs (and uploads mask arrays) with the framework of `like`, on its device and in the
    stream the call will run on, so stream-ordered allocators hand the memory over safely."""

    def __init__(self, like, stream):
        self.like = like
        self.stream = stream

    def _torch_ctx(self):
        import contextlib

        import torch

        d = self.like
        if not d.is_cuda:
            return contextlib.nullcontext()
        dev = d.obj.device
        if self.stream == torch.cuda.current_stream(dev).cuda_stream:
            return torch.cuda.device(dev)
        s = torch.cuda.default_stream(dev) if self.stream == 0 else torch.cuda.ExternalStream(self.stream, device=dev)
        return torch.cuda.stream(s)

    def empty(self, shape, dtype):
        """dtype: "like" (the input's dtype) or "float32"."""
        d = self.like
        if not d.is_cuda and d.kind != "torch":  # numpy, or a CPU DLPack producer: numpy out
            if dtype != "like":
                npdt = np.dtype(np.float32)
            else:
                npdt = d.obj.dtype if d.kind == "numpy" else _numpy_dtype(d.dtype)
            return np.empty(shape, dtype=npdt)
        if d.kind == "torch":
            import torch

            tdt = d.obj.dtype if dtype == "like" else torch.float32
            with self._torch_ctx():
                return torch.empty(shape, dtype=tdt, device=d.obj.device)
        if d.kind == "cupy":
            import cupy

            cdt = d.obj.dtype if dtype == "like" else cupy.float32
            with cupy.cuda.Device(d.device_id), _cupy_stream(self.stream):
                return cupy.empty(shape, dtype=cdt)
        if d.kind == "numba":
            from numba import cuda

            ndt = d.obj.dtype if dtype == "like" else np.float32
            with cuda.gpus[d.device_id]:
                return cuda.device_array(shape, dtype=ndt)
        raise TypeError("libflash: cannot allocate the result for a %s.%s input on the GPU; pass out= (and use "
                        "return_lse=False) or use torch/cupy arrays" % (_module(d.obj), type(d.obj).__name__))

    def full(self, shape, dtype, value):
        """empty() filled with `value` (in the stream order of the call, like empty())."""
        d = self.like
        if d.kind == "torch":
            import torch

            tdt = d.obj.dtype if dtype == "like" else torch.float32
            with self._torch_ctx():
                return torch.full(shape, value, dtype=tdt, device=d.obj.device)
        if d.kind == "cupy":
            import cupy

            cdt = d.obj.dtype if dtype == "like" else cupy.float32
            with cupy.cuda.Device(d.device_id), _cupy_stream(self.stream):
                return cupy.full(shape, value, dtype=cdt)
        if d.kind == "numba":
            from numba import cuda

            ndt = d.obj.dtype if dtype == "like" else np.float32
            with cuda.gpus[d.device_id]:
                return cuda.to_device(np.full(shape, value, dtype=ndt))
        x = self.empty(shape, dtype)  # numpy (or the TypeError naming what cannot be allocated)
        x[...] = value
        return x

    def upload_int32(self, arr):
        """A device (or host) copy of a host int32 numpy array, for mask arrays."""
        d = self.like
        arr = np.ascontiguousarray(arr, dtype=np.int32)
        if not d.is_cuda:
            return arr
        if d.kind == "torch":
            import torch

            with self._torch_ctx():
                return torch.from_numpy(arr).to(d.obj.device, non_blocking=False)
        if d.kind == "cupy":
            import cupy

            with cupy.cuda.Device(d.device_id), _cupy_stream(self.stream):
                return cupy.asarray(arr)
        if d.kind == "numba":
            from numba import cuda

            with cuda.gpus[d.device_id]:
                return cuda.to_device(arr)
        raise TypeError("libflash: cannot upload a block mask for a %s.%s input; pass the compact form as device "
                        "int32 arrays" % (_module(d.obj), type(d.obj).__name__))


class _StreamHandle:
    """A raw cudaStream_t under the CUDA stream protocol (__cuda_stream__ gives (version 0, the handle)), which CuPy 14's
    Stream.from_external takes."""

    __slots__ = ("ptr",)

    def __init__(self, ptr):
        self.ptr = ptr

    def __cuda_stream__(self):
        return (0, self.ptr)


def _cupy_stream(ptr):
    import cupy

    if ptr == cupy.cuda.get_current_stream().ptr:
        import contextlib

        return contextlib.nullcontext()
    if ptr == 0:
        return cupy.cuda.Stream.null
    if hasattr(cupy.cuda.Stream, "from_external"):  # CuPy >= 14, where ExternalStream is deprecated
        return cupy.cuda.Stream.from_external(_StreamHandle(ptr))
    return cupy.cuda.ExternalStream(ptr)


def _numpy_dtype(name):
    if name == "bfloat16":
        import ml_dtypes  # optional; only reached for bf16 CPU arrays from a non-numpy producer

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def host_int32(a, name):
    """A C-contiguous int32 numpy copy (or view) of host integer data, refusing what int32 cannot hold: astype would
    wrap (a cache length of 2**32 + 5 would become 5)."""
    a = np.asarray(a)
    if a.dtype.kind not in "iu":
        raise error(_capi.FLASH_ERROR_UNSUPPORTED_DTYPE, "%s has dtype %s; index arrays must be int32 (or another "
                    "integer type whose values fit int32)" % (name, a.dtype))
    if a.dtype != np.int32 and a.size:
        lo, hi = int(a.min()), int(a.max())
        bad = lo if lo < _I32_MIN else hi if hi > _I32_MAX else None
        if bad is not None:
            raise error(_capi.FLASH_ERROR_INVALID_ARGUMENT, "%s holds %d, which does not fit int32" % (name, bad))
    a = a.astype(np.int32, copy=False)
    return np.ascontiguousarray(a) if a.ndim else a  # (ascontiguousarray makes a 0-d array 1-d)


def to_host(x, name):
    """A numpy copy of an array of any supported kind (used for dense block maps)."""
    kind = kind_of(x)
    if kind is None:
        return np.asarray(x)
    if kind == "numpy":
        return x
    if kind == "torch":
        return x.detach().cpu().numpy()
    if kind == "cupy":
        import cupy

        return cupy.asnumpy(x)
    if kind == "numba":
        return x.copy_to_host()
    if kind == "dlpack" and int(x.__dlpack_device__()[0]) == _DL_CPU:
        return np.from_dlpack(x) if hasattr(np, "from_dlpack") else np.asarray(x)
    raise TypeError("libflash: cannot read the %s (a %s.%s) on the host" % (name, _module(x), type(x).__name__))
