"""libflash: exact attention (the FlashAttention algorithm) over libflash's stable C ABI, through ctypes.

    import libflash
    o = libflash.attention(q, k, v, causal=True)          # numpy -> CPU; torch/CuPy CUDA -> GPU
    o, lse = libflash.attention(q, k, v, return_lse=True)
    dq, dk, dv = libflash.attention_backward(q, k, v, o, do, lse)   # gradients given dO
    o = libflash.attention_with_kvcache(q, k_cache, v_cache, k=k_new, v=v_new, cache_seqlens=lens)  # decode
    o, lse = libflash.combine([o1, o2], [lse1, lse2], return_lse=True)  # merge split-KV partials
    o = libflash.attention(q, k, v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k)   # packed variable-length batch
    libflash.devices(), libflash.version()

FlashAttention-2 drop-in for PyTorch, with autograd: ``from libflash.torch import flash_attn_func`` (and
``flash_attn_varlen_func``, ``flash_attn_with_kvcache``).
Ring attention across processes (torch.distributed, context parallelism): ``from libflash.distributed import
ring_attention, zigzag_split, zigzag_unsplit``.
The shared library is found through LIBFLASH_PATH, a copy in libflash/lib/, or the system loader.
"""

from . import _capi as capi  # the raw ctypes layer (structs, constants, functions)
from ._attention import (DeviceInfo, algorithm_names, attention, attention_backward, build_info, compiled_algorithms,
                         device_count, device_info, devices, last_algorithm_used, library_path, version, version_info)
from ._errors import FlashError
from ._kvcache import attention_with_kvcache, combine, kvcache_workspace_size, last_num_splits_used
from ._mask import BlockMask

__version__ = "1.3.0"  # of this binding; version() is the loaded library's

__all__ = [
    "attention", "attention_backward", "attention_with_kvcache", "combine", "kvcache_workspace_size",
    "last_num_splits_used", "BlockMask", "FlashError", "DeviceInfo", "devices", "device_info", "device_count", "version",
    "version_info", "build_info", "compiled_algorithms", "algorithm_names", "last_algorithm_used", "library_path",
    "capi",
]
