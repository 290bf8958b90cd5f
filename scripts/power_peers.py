"""libflash and PyTorch's cuDNN backend each run back to back (as fa-bench and do_bench time them) while nvidia-smi samples
the SM clock and the board's power draw: does one of them draw more power per call, and so run at a lower clock?

    PYTHONPATH=bindings/python:scripts LIBFLASH_PATH=build-h100 python3 scripts/power_peers.py [--problems 128:16384:0,...]
        [--seconds 2] [--rounds 2]

Why (session 54): at 16k fa-bench's back-to-back medians put d128 dense 5-11% below the interleaved figure (which
sleeps between calls), where cuDNN's do_bench figures match its interleaved ones; and a round of tiles ran faster on
fewer SMs (scripts/interleaved_grid.py). Each problem (d:seqlen:causal, standard grid) runs each backend for --seconds
of back-to-back calls, each after a 256 MB write (L2 flushed, as do_bench and fa-bench), alternating backends over
--rounds rounds; the samples (every 20 ms) inside a window, less its first quarter (the clock settling), give the mean
SM clock and power; CUDA events give the median time of a call.
"""
import argparse
import statistics
import subprocess
import threading
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import libflash


def sampler(samples, stop):
    p = subprocess.Popen(["nvidia-smi", "--query-gpu=clocks.sm,power.draw", "--format=csv,noheader,nounits", "-lms", "20"],
                         stdout=subprocess.PIPE, text=True)
    try:
        for line in p.stdout:
            if stop.is_set():
                break
            try:
                clk, pw = (float(x) for x in line.split(","))
            except ValueError:
                continue
            samples.append((time.monotonic(), clk, pw))
    finally:
        p.terminate()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--problems", default="128:16384:0,128:1024:0,64:16384:0,256:16384:0")
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    samples, stop = [], threading.Event()
    th = threading.Thread(target=sampler, args=(samples, stop), daemon=True)
    th.start()
    time.sleep(1.0)
    cache = torch.empty(256 << 20, dtype=torch.int8, device="cuda")
    print("%4s %6s %6s %-9s %9s %9s %9s %8s" % ("d", "seqlen", "causal", "backend", "ms", "TFLOP/s", "SM MHz", "W"), flush=True)
    try:
        for spec in a.problems.split(","):
            d, n, causal = (int(x) for x in spec.split(":"))
            b, h = max(1, 16384 // n), 2048 // d
            q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
            o = torch.empty_like(q)
            qt, kt, vt, ot = (x.transpose(1, 2) for x in (q, k, v, o))

            def lib():
                libflash.attention(qt, kt, vt, causal=bool(causal), algorithm="sm90", out=ot)

            def cudnn():
                with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                    return F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal))

            fns = {"libflash": lib, "cudnn": cudnn}
            flops = 4 * b * h * n * n * d / (2 if causal else 1)
            with torch.no_grad():
                for fn in fns.values():
                    for _ in range(3):
                        fn()
                torch.cuda.synchronize()
                for r in range(a.rounds):
                    for name in (list(fns) if r % 2 == 0 else list(fns)[::-1]):
                        fn, times = fns[name], []
                        t0 = time.monotonic()
                        while time.monotonic() - t0 < a.seconds:
                            marks = []
                            for _ in range(10):
                                cache.zero_()
                                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                                e0.record()
                                fn()
                                e1.record()
                                marks.append((e0, e1))
                            torch.cuda.synchronize()
                            times += [e0.elapsed_time(e1) for e0, e1 in marks]
                        t1 = time.monotonic()
                        win = [s for s in samples if t0 + (t1 - t0) / 4 <= s[0] <= t1]
                        clk = statistics.mean(s[1] for s in win) if win else float("nan")
                        pw = statistics.mean(s[2] for s in win) if win else float("nan")
                        ms = statistics.median(times)
                        print("%4d %6d %6d %-9s %9.4f %9.1f %9.0f %8.1f" % (d, n, causal, name, ms, flops / ms / 1e9, clk, pw),
                              flush=True)
                        time.sleep(0.5)
            del q, k, v, o
    finally:
        stop.set()


if __name__ == "__main__":
    main()
