"""libflash against PyTorch's SDPA backends timed interleaved in one process, on the same tensors.

    PYTHONPATH=bindings/python LIBFLASH_PATH=build-h100/libflash.so \
        python3 scripts/interleaved_peers.py [--hdims 64,128,256] [--seqlens 1024,...,16384] [--reps 30] [--json out.json]

Why: fa-bench and ../shared/bench/torch_sdpa.py time each backend in its own run of back-to-back launches, and at
16k the H100's power cap moves a 30-launch median by up to 10% from one run to the next (session 22, s22-12:
the same d128 dense 16k kernel gave medians of 633 and 693 TFLOP/s in one call). Here every round times each
backend once, in alternating order, so a change of clocks falls on all of them alike and the ratio is what is
left. Each timing is preceded, as in triton's do_bench (which torch_sdpa.py uses), by a 256 MB write that
evicts L2, and by a sleep kernel that keeps the GPU busy while Python launches the next call, so the CUDA
events bracket the attention kernel alone.

Grid: batch * seqlen = 16384, heads = 2048 / head_dim, bf16, forward; q, k, v are [batch, heads, seqlen, d]
tensors (SDPA's layout) that libflash reads through transposed views ([batch, seqlen, heads, d], any strides).
TFLOP/s = 4 b h n^2 d (/2 causal) / median time. Also printed: max |O_libflash - O_cudnn| / max |O_cudnn|.
"""
import argparse
import json
import statistics

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import libflash
from interleave import add_icache_argument, time_rounds

BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}


def ints(s):
    return [int(x) for x in s.split(",")]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hdims", type=ints, default=[64, 128, 256])
    ap.add_argument("--seqlens", type=ints, default=[1024, 2048, 4096, 8192, 16384])
    ap.add_argument("--causal", default="0,1")
    ap.add_argument("--peers", default="cudnn,flash")
    ap.add_argument("--algorithm", default="sm90")
    ap.add_argument("--reps", type=int, default=30)
    add_icache_argument(ap)
    ap.add_argument("--sleep", type=int, default=2_000_000, help="GPU cycles of torch.cuda._sleep before each timed call (0: none)")
    ap.add_argument("--json")
    a = ap.parse_args()
    peers = a.peers.split(",")
    cache = torch.empty(256 << 20, dtype=torch.int8, device="cuda")
    rows = []
    print("%4s %6s %6s %10s %10s %s  %s" % ("d", "mask", "seqlen", "libflash", "", "  ".join("%8s %6s" % (p, "ratio") for p in peers),
                                          "max|d|/max vs " + peers[0]), flush=True)
    for d in a.hdims:
        for n in a.seqlens:
            b, h = max(1, 16384 // n), 2048 // d
            for causal in (bool(int(c)) for c in a.causal.split(",")):
                q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
                o_lib = torch.empty_like(q)
                qt, kt, vt, ot = (x.transpose(1, 2) for x in (q, k, v, o_lib))  # [b, n, h, d] views

                def lib():
                    libflash.attention(qt, kt, vt, causal=causal, algorithm=a.algorithm, out=ot)

                def peer(name):
                    with sdpa_kernel([BACKENDS[name]]):
                        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

                fns = {"libflash": lib}
                for name in peers:
                    fns[name] = (lambda name=name: peer(name))
                with torch.no_grad():
                    for fn in fns.values():  # warm-up (and cuDNN's plan build)
                        for _ in range(3):
                            fn()
                    ref = peer(peers[0]).float()
                    lib()
                    torch.cuda.synchronize()
                    err = ((o_lib.float() - ref).abs().max() / ref.abs().max()).item()
                    times = time_rounds(fns, a.reps, cache, a.sleep, icache=a.icache)
                flops = 4 * b * h * n * n * d / (2 if causal else 1)
                row = dict(d=d, n=n, b=b, h=h, causal=causal, reps=a.reps, icache=a.icache, max_rel_err=err,
                           ms={name: statistics.median(t) for name, t in times.items()})
                row["tflops"] = {name: flops / ms / 1e9 for name, ms in row["ms"].items()}
                rows.append(row)
                lt = row["tflops"]["libflash"]
                print("%4d %6s %6d %10.1f %10s %s  %.1e" % (d, "causal" if causal else "dense", n, lt, "TFLOP/s",
                      "  ".join("%8.1f %6.2f" % (row["tflops"][p], lt / row["tflops"][p]) for p in peers), err), flush=True)
                del q, k, v, o_lib, ref
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(device=torch.cuda.get_device_name(), torch=torch.__version__, rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
