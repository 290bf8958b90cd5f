"""One launch of libflash (sm90) and one of SDPA's cuDNN backend on the same d128 dense problem, for Nsight Compute
(session 22: interleaved, cuDNN is 2-3% ahead at d128 dense; this profiles both kernels in one process).

    PYTHONPATH=bindings/python LIBFLASH_PATH=build-h100 ncu --profile-from-start off --section SpeedOfLight \
        --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section WarpStateStats \
        python3 scripts/ncu_peer_pair.py [--d 128] [--n 8192] [--causal 0]
"""
import argparse

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import libflash

ap = argparse.ArgumentParser()
ap.add_argument("--d", type=int, default=128)
ap.add_argument("--n", type=int, default=8192)
ap.add_argument("--causal", type=int, default=0)
a = ap.parse_args()
b, h = max(1, 16384 // a.n), 2048 // a.d
q, k, v = (torch.randn(b, h, a.n, a.d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
o = torch.empty_like(q)
qt, kt, vt, ot = (x.transpose(1, 2) for x in (q, k, v, o))


def ours():
    libflash.attention(qt, kt, vt, causal=bool(a.causal), algorithm="sm90", out=ot)


def cudnn():
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        F.scaled_dot_product_attention(q, k, v, is_causal=bool(a.causal))


with torch.no_grad():
    for _ in range(3):
        ours()
        cudnn()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    ours()
    cudnn()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()
