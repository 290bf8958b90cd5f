#!/usr/bin/env python3
"""Host cost per call of the Python binding: N back-to-back calls on tiny problems (so the work itself is small and
the binding's Python shows), the median over R repeats, in microseconds per call.

    LIBFLASH_PATH=build/libflash.so PYTHONPATH=bindings/python python3 scripts/host_cost.py [--calls N] [--repeats R]
        [--json FILE] [--only numpy,torch,cuda] [--profile TEXT,...]

CPU rows (numpy and torch CPU tensors) run with one library thread (LIBFLASH_NUM_THREADS=1 unless set) and one torch
thread. With a CUDA GPU, torch and a CUDA build of libflash, the CUDA rows run too, and in the same process PyTorch's
own scaled_dot_product_attention (its flash backend) and, when installed, flash_attn.flash_attn_func, for comparison:
each timed as N calls followed by one synchronize, fp16 [1, 128, 8, 64] (small enough that the GPU waits on the host).
Rows whose API the loaded binding lacks are skipped, so the script also measures older bindings (PYTHONPATH pointing at
an exported copy). Take numbers on an idle machine (`uptime` load < 1) and compare medians.

--profile TEXT[,TEXT...]: after timing each row whose name contains one of the TEXTs, run it N more times under
cProfile and print the functions that took the most time of their own (where the per-call microseconds go).
"""

import argparse
import cProfile
import io
import json
import os
import pstats
import statistics
import sys
import time

os.environ.setdefault("LIBFLASH_NUM_THREADS", "1")


def bench(fn, calls, repeats, sync=None):
    for _ in range(max(50, calls // 10)):
        fn()
    if sync:
        sync()
    per_call = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        if sync:
            sync()
        per_call.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(per_call), min(per_call)


def profile(fn, calls, sync=None, top=25):
    """cProfile of `calls` calls of fn: the top functions by their own time, per call of fn."""
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        fn()
    if sync:
        sync()
    prof.disable()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(top)
    print(out.getvalue(), flush=True)


def numpy_rows(libflash, np):
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 8, 2, 16)).astype(np.float32) for _ in range(3))
    o, lse = libflash.attention(q, k, v, return_lse=True)
    do = rng.standard_normal(o.shape).astype(np.float32)
    kc, vc = np.zeros((1, 64, 2, 16), np.float32), np.zeros((1, 64, 2, 16), np.float32)
    lens = np.array([32], np.int32)
    parts = [o, o]
    lses = [lse, lse]
    rows = [
        ("numpy attention fp32 [1,8,2,16]", lambda: libflash.attention(q, k, v)),
        ("numpy attention causal, return_lse", lambda: libflash.attention(q, k, v, causal=True, return_lse=True)),
        ("numpy attention_backward", lambda: libflash.attention_backward(q, k, v, o, do, lse)),
    ]
    if hasattr(libflash, "attention_with_kvcache"):
        rows.append(("numpy attention_with_kvcache decode",
                     lambda: libflash.attention_with_kvcache(q[:, :1], kc, vc, cache_seqlens=lens)))
        rows.append(("numpy combine 2 parts", lambda: libflash.combine(parts, lses)))
    return rows


def torch_cpu_rows(libflash, torch):
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 8, 2, 16, generator=g) for _ in range(3))
    o, lse = libflash.attention(q, k, v, return_lse=True)
    do = torch.randn(o.shape, generator=g)
    from libflash.torch import flash_attn_func

    qg, kg, vg = (x.clone().requires_grad_(True) for x in (q, k, v))
    rows = [
        ("torch-cpu attention fp32 [1,8,2,16]", lambda: libflash.attention(q, k, v)),
        ("torch-cpu flash_attn_func (no grad)", lambda: flash_attn_func(q, k, v)),
        ("torch-cpu flash_attn_func fwd (requires_grad)", lambda: flash_attn_func(qg, kg, vg)),
        ("torch-cpu attention_backward", lambda: libflash.attention_backward(q, k, v, o, do, lse)),
    ]
    if hasattr(libflash, "attention_with_kvcache"):
        kc, vc = torch.zeros(1, 64, 2, 16), torch.zeros(1, 64, 2, 16)
        lens = torch.tensor([32], dtype=torch.int32)
        rows.append(("torch-cpu attention_with_kvcache decode",
                     lambda: libflash.attention_with_kvcache(q[:, :1], kc, vc, cache_seqlens=lens)))
    sdpa = getattr(torch.nn.functional, "scaled_dot_product_attention", None)
    if sdpa is not None:
        qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
        rows.append(("torch-cpu F.scaled_dot_product_attention (reference)", lambda: sdpa(qt, kt, vt)))
    return rows


def cuda_rows(libflash, torch):
    import libflash.torch as lt

    dev = torch.device("cuda", torch.cuda.current_device())
    g = torch.Generator(device=dev).manual_seed(0)
    shape = (1, 128, 8, 64)
    q, k, v = (torch.randn(shape, generator=g, device=dev, dtype=torch.float16) for _ in range(3))
    qg, kg, vg = (x.clone().requires_grad_(True) for x in (q, k, v))
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))  # SDPA's [b, h, s, d] views of the same memory
    F = torch.nn.functional
    rows = [
        ("cuda libflash.attention fp16 [1,128,8,64]", lambda: libflash.attention(q, k, v)),
        ("cuda libflash.torch.flash_attn_func (no grad)", lambda: lt.flash_attn_func(q, k, v)),
        ("cuda libflash.torch.flash_attn_func fwd (requires_grad)", lambda: lt.flash_attn_func(qg, kg, vg)),
    ]
    if getattr(lt, "custom_op_available", lambda: False)():
        ops = torch.ops.libflash
        rows.append(("cuda torch.ops.libflash.fwd (custom op, eager)",
                     lambda: ops.fwd(q, k, v, None, False, -1, -1, False)))

        def via_op():
            saved, lt.custom_op_mode = lt.custom_op_mode, "always"
            try:
                return lt.flash_attn_func(qg, kg, vg)
            finally:
                lt.custom_op_mode = saved

        rows.append(("cuda flash_attn_func via custom op (requires_grad)", via_op))
    sdpa = getattr(F, "scaled_dot_product_attention", None)
    if sdpa is not None:
        from contextlib import nullcontext

        try:
            from torch.nn.attention import SDPBackend, sdpa_kernel

            flash_only = lambda: sdpa_kernel([SDPBackend.FLASH_ATTENTION])  # noqa: E731
        except ImportError:
            flash_only = nullcontext

        def sdpa_flash():
            with flash_only():
                return sdpa(qt, kt, vt)

        qgt, kgt, vgt = (x.transpose(1, 2) for x in (qg, kg, vg))
        rows.append(("cuda torch SDPA (default backend choice)", lambda: sdpa(qt, kt, vt)))
        rows.append(("cuda torch SDPA fwd (requires_grad, default choice)", lambda: sdpa(qgt, kgt, vgt)))
        rows.append(("cuda torch SDPA (flash backend, in sdpa_kernel)", sdpa_flash))
        if getattr(lt, "sdpa_impl_available", lambda: False)():
            # Timed with the implementation active for the whole row (main() switches it on and off around it).
            rows.append(("cuda SDPA flash backend -> libflash (activated)", sdpa_flash, "sdpa-libflash"))
            # The same without the sdpa_kernel context manager (about 30 us of its own on torch 2.11): what a model
            # calling F.scaled_dot_product_attention pays when SDPA's own choice is the flash backend.
            rows.append(("cuda SDPA default choice, libflash activated", lambda: sdpa(qt, kt, vt), "sdpa-libflash"))
    try:
        from flash_attn import flash_attn_func as fa2

        rows.append(("cuda flash_attn.flash_attn_func", lambda: fa2(q, k, v)))
    except ImportError:
        pass
    return rows


def with_libflash_sdpa(torch, fn):
    """fn() with torch.nn.attention.activate_flash_attention_impl("libflash") in force."""
    import libflash.torch as lt

    attn = torch.nn.attention
    attn.activate_flash_attention_impl(lt.SDPA_IMPL_NAME)
    try:
        return fn()
    finally:
        restore = getattr(attn, "restore_flash_attention_impl", None)
        if restore is None:
            from torch.nn.attention import _registry

            restore = _registry.restore_flash_attention_impl
        restore()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--json", help="write the rows here")
    ap.add_argument("--only", default="numpy,torch,cuda", help="comma-separated: numpy, torch, cuda")
    ap.add_argument("--profile", help="cProfile the rows whose name contains this text (comma-separated: any of them)")
    a = ap.parse_args()
    only = set(a.only.split(","))

    import numpy as np

    import libflash

    results = []
    meta = {"libflash": libflash.version(), "binding": getattr(libflash, "__file__", "?"),
            "LIBFLASH_NUM_THREADS": os.environ.get("LIBFLASH_NUM_THREADS"), "python": sys.version.split()[0],
            "numpy": np.__version__, "loadavg": os.getloadavg() if hasattr(os, "getloadavg") else None}

    def run(rows, sync=None):
        for name, fn, *how in rows:
            def measure():
                r = bench(fn, a.calls, a.repeats, sync)
                if a.profile and any(p in name for p in a.profile.split(",")):
                    print("%-60s %9.2f us/call  (min %.2f); cProfile of %d calls:" % ((name,) + r + (a.calls,)))
                    profile(fn, a.calls, sync)
                return r

            if how == ["sdpa-libflash"]:
                med, best = with_libflash_sdpa(torch, measure)
            else:
                med, best = measure()
            results.append({"name": name, "median_us": round(med, 2), "min_us": round(best, 2)})
            print("%-60s %9.2f us/call  (min %.2f)" % (name, med, best), flush=True)

    if "numpy" in only:
        run(numpy_rows(libflash, np))
    torch = None
    if "torch" in only or "cuda" in only:
        try:
            import torch
        except ImportError:
            print("(torch not installed: no torch rows)")
    if torch is not None:
        meta["torch"] = torch.__version__
        if "torch" in only:
            run(torch_cpu_rows(libflash, torch))
        if "cuda" in only:
            if torch.cuda.is_available() and libflash.device_count("cuda") > 0:
                meta["gpu"] = torch.cuda.get_device_name()
                run(cuda_rows(libflash, torch), sync=torch.cuda.synchronize)
            else:
                print("(no CUDA device for torch and libflash: no CUDA rows)")
    meta["loadavg_after"] = os.getloadavg() if hasattr(os, "getloadavg") else None
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"meta": meta, "rows": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
