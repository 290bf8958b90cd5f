#!/usr/bin/env python3
"""Simulates the sm90 causal order (shapes.h CausalOrder) on the standard grid: which DRAM reads a tile order costs and
how long the persistent grid takes, before a device call (session 51, perf-log v79).

Model: (batch, head) pairs x query tiles of `rows` rows; tile m visits the key blocks of [0, rows (m + 1)) from the top
down, one block per time unit after a fixed start cost; 132 CTAs take tiles from a counter in the order's sequence. L2 is
one LRU over K/V blocks (K and V of a block together), Q tiles (read at a tile's start) and O tiles (written at its end).
`serpentine` reverses a group's pairs at every second query block (an order idea of session 51; no gain here).

Calibration (d256 causal 1k, ncu s51-7, DRAM read): with a 25 MB LRU the model ranks the measured variants alike --
tail 1 grid 206 MB (measured 247-256), 8 MB groups 214 (273), tail 2 244 (288), 24 MB groups 259 (308), tail 3 288
(346), one group 651 (669) -- 45-60 MB under the measurement throughout. Its makespans are the counter's balance alone:
the 1-grid tail's 1.4% longer one measured 1.3% faster at 1k, where the bytes cost more.

    python3 scripts/sim_causal_order.py [--d 256] [--seqlen 1024] [--l2-mb 25]
"""
import argparse
import heapq
import math
from collections import OrderedDict


def causal_order(num_bh, nm, group, full_groups, serpentine=False):
    """shapes.h CausalOrder::tile for every work index: [(m_block, bh)]."""
    out = []
    for x in range(num_bh * nm):
        per = group * nm
        first, size, r = full_groups * group, num_bh - full_groups * group, x - full_groups * per
        if r < 0:
            g = x // per
            first, size, r = g * group, group, x - g * per
        level, i = r // size, r % size
        out.append((nm - 1 - level, first + (size - 1 - i if serpentine and level % 2 else i)))
    return out


def make_order(num_bh, nm, grid, kv_mb, budget_mb, tail_grids, serpentine=False):
    """shapes.h causal_order: groups within budget_mb of K/V, a last group of at least tail_grids x grid tiles."""
    group = max(1, min(num_bh, int(budget_mb // kv_mb)))
    tail = min(num_bh, math.ceil(tail_grids * grid / nm))
    return causal_order(num_bh, nm, group, max(0, (num_bh - tail) // group), serpentine)


def simulate(order, rows, block_n, kb_block, kb_tile, l2_mb, grid=132, start_cost=1.5):
    """DRAM MB read and the makespan (block steps) of a counter over `order`."""
    cap, used, dram = l2_mb * 1024, 0, 0
    lru = OrderedDict()

    def touch(key, kb, read=True):
        nonlocal used, dram
        if key in lru:
            lru.move_to_end(key)
            return
        dram += kb if read else 0
        lru[key] = kb
        used += kb
        while used > cap:
            used -= lru.popitem(last=False)[1]

    events, seq, nxt, end = [], 0, 0, 0.0

    def start(cta, t):
        nonlocal nxt, seq
        if nxt < len(order):
            m, bh = order[nxt]
            nxt += 1
            touch(("q", bh, m), kb_tile)
            heapq.heappush(events, (t + start_cost, seq, cta, m, bh, math.ceil(rows * (m + 1) / block_n) - 1))
            seq += 1

    for c in range(grid):
        start(c, 0.0)
    while events:
        t, _, cta, m, bh, b = heapq.heappop(events)
        touch(("kv", bh, b), kb_block)
        if b > 0:
            heapq.heappush(events, (t + 1.0, seq, cta, m, bh, b - 1))
            seq += 1
        else:
            touch(("o", bh, m), kb_tile, read=False)
            end = max(end, t + 1.0)
            start(cta, t + 1.0)
    return dram / 1024, end


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--d", type=int, default=256, choices=[64, 128, 256])
    ap.add_argument("--seqlen", type=int, default=1024)
    ap.add_argument("--l2-mb", type=float, default=25)
    a = ap.parse_args()
    rows, block_n = (192, 128) if a.d == 64 else (128, {128: 128, 256: 80}[a.d])
    num_bh, nm = (16384 // a.seqlen) * (2048 // a.d), math.ceil(a.seqlen / rows)
    kv_mb = a.seqlen * a.d * 4 / 2**20
    kb_block, kb_tile = block_n * a.d * 4 / 1024, rows * a.d * 2 / 1024
    print(f"d{a.d} causal {a.seqlen}: {num_bh} pairs x {nm} tiles, K/V {kv_mb:.2f} MB a pair, L2 model {a.l2_mb:g} MB")
    for budget, tail, serp in [(16, 2, False), (16, 1, False), (16, 3, False), (8, 2, False), (8, 1, False),
                               (24, 2, False), (1 << 20, 2, False), (16, 1, True), (16, 2, True)]:
        order = make_order(num_bh, nm, 132, kv_mb, budget, tail, serp)
        dram, span = simulate(order, rows, block_n, kb_block, kb_tile, a.l2_mb)
        name = (f"groups {budget} MB" if budget < 1 << 20 else "one group") + f", tail {tail} grid{'s' if tail > 1 else ''}"
        print(f"  {name + (', serpentine' if serp else ''):38s} DRAM {dram:4.0f} MB, makespan {span:.1f}")


if __name__ == "__main__":
    main()
