"""Shared by scripts/interleaved_peers.py and scripts/interleaved_masks.py: time several GPU calls in alternating rounds."""
import torch


def add_icache_argument(ap):
    """The scripts' --icache option (time_rounds' icache)."""
    ap.add_argument("--icache", default="warm", choices=["warm", "mixed"],
                    help="warm: each timed call right after an untimed one of the same fn (its code cached, as do_bench); "
                         "mixed: the rule before session 50")


def add_round_arguments(ap, reps=40):
    """The interleaved scripts' shared options: --reps, --seed, --sleep (GPU cycles of torch.cuda._sleep before each timed
    call), --icache and --json."""
    ap.add_argument("--reps", type=int, default=reps)
    ap.add_argument("--seed", type=int, default=24301)
    ap.add_argument("--sleep", type=int, default=2_000_000, help="GPU cycles of torch.cuda._sleep before each timed call (0: none)")
    add_icache_argument(ap)
    ap.add_argument("--json")


def time_rounds(fns, reps, cache, sleep, clean=None, icache="warm"):
    """{name: [ms per round]} for fns, a {name: callable} dict. Each round calls every fn once, in list order on even
    rounds and reversed on odd ones, so a change of clocks falls on all alike. Each call is preceded by a write of
    `cache` (evicting L2, as triton's do_bench) and, with sleep > 0, by that many GPU cycles of torch.cuda._sleep,
    which keeps the GPU busy while Python launches the call: the CUDA events bracket the call alone. With `clean` (a
    second buffer of L2's size or more), that buffer is read after the write, so the call starts with L2 holding clean
    lines only (as under ncu's cache control) instead of the write's dirty ones, whose write-back to DRAM then overlaps
    the call (session 44: what that costs the short block-sparse calls).

    icache (session 50): "warm" calls each fn once more, untimed, right before its cache write, so that the timed call
    finds its own code in the SMs' instruction caches -- as triton's do_bench (torch_sdpa.py, the anchors' figures) and
    fa-bench time a function, repeated. "mixed", the rule before: a call finds the previous call's code there, its own
    only where the alternation puts a fn twice in a row (the first and last of the list, at every round's turn). A launch
    whose code is not cached measured up to 3% slower (sm90_dev s50-2/3: the d64 two-ring kernel at 4k s = .1, 2.3 us;
    d64 causal 1k 1.4%, d128 0.1-0.3%)."""
    times = {name: [] for name in fns}
    order = list(fns)
    for r in range(reps):
        marks = []
        for name in (order if r % 2 == 0 else order[::-1]):
            if icache == "warm":
                fns[name]()
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
