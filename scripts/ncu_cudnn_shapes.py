"""SDPA's cuDNN backend alone on the standard grid's short problems, one launch each inside the profiler range, for
Nsight Compute's launch statistics (session 32: what tile, grid and occupancy cuDNN picks where it leads libflash).

    ncu --profile-from-start off --section LaunchStats --section Occupancy --section SpeedOfLight \
        python3 scripts/ncu_cudnn_shapes.py d64c1024 d256c1024 ...   (dNNN, c causal / n dense, seqlen)
"""
import re
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

problems = []
for arg in sys.argv[1:]:
    m = re.fullmatch(r"d(\d+)([cn])(\d+)", arg)
    problems.append((int(m.group(1)), m.group(2) == "c", int(m.group(3))))
with torch.no_grad(), sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
    for d, causal, n in problems:
        b, h = max(1, 16384 // n), 2048 // d
        q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        for _ in range(3):
            F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        torch.cuda.synchronize()
        # Timed too (CUDA events, median of 20), to tie the profiled kernel to its time outside the profiler.
        ts = []
        for _ in range(20):
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            e1.record()
            torch.cuda.synchronize()
            ts.append(e0.elapsed_time(e1))
        ts.sort()
        print(f"d{d} {'causal' if causal else 'dense'} {n}: cuDNN median {ts[10]:.4f} ms", flush=True)
        torch.cuda.cudart().cudaProfilerStart()
        F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStop()
