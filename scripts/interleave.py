"""Shared by scripts/interleaved_peers.py and scripts/interleaved_masks.py: time several GPU calls in alternating rounds."""
import torch


def time_rounds(fns, reps, cache, sleep, clean=None):
    """{name: [ms per round]} for fns, a {name: callable} dict. Each round calls every fn once, in list order on even
    rounds and reversed on odd ones, so a change of clocks falls on all alike. Each call is preceded by a write of
    `cache` (evicting L2, as triton's do_bench) and, with sleep > 0, by that many GPU cycles of torch.cuda._sleep,
    which keeps the GPU busy while Python launches the call: the CUDA events bracket the call alone. With `clean` (a
    second buffer of L2's size or more), that buffer is read after the write, so the call starts with L2 holding clean
    lines only (as under ncu's cache control) instead of the write's dirty ones, whose write-back to DRAM then overlaps
    the call (session 44: what that costs the short block-sparse calls)."""
    times = {name: [] for name in fns}
    order = list(fns)
    for r in range(reps):
        marks = []
        for name in (order if r % 2 == 0 else order[::-1]):
            cache.zero_()
            if clean is not None:
                clean.sum(dtype=torch.int32)
            if sleep > 0:
                torch.cuda._sleep(sleep)
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            fns[name]()
            e1.record()
            marks.append((name, e0, e1))
        torch.cuda.synchronize()
        for name, e0, e1 in marks:
            times[name].append(e0.elapsed_time(e1))
    return times
