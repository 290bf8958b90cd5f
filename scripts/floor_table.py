#!/usr/bin/env python3
"""Issue 7's block-sparse cells against their memory floor.

    floor_table.py IO_FLOOR_GRID.txt FA_BENCH.json [FA_BENCH.json ...]

IO_FLOOR_GRID.txt is the output of `io_floor REPS grid` (libflash/cuda/sm90/dev/io_floor.cu): for every cell, a kernel
that only moves the cell's bytes (Q, the listed K and V blocks, O) in the same layout and tile order, in two
arrangements. The floor of a cell is the faster arrangement's median. The fa-bench JSONs give the dense and block-sparse
times of the same shapes (issue 7's masks run, and any other batch). Prints, per cell, the limit (s + 0.05), the
fa-bench ratio, the floor as a ratio of the same dense time, and the kernel's time over the floor.
The limit's s is the density of the map fa-bench ran (its JSON's block_sparse.block_density). fa-bench's maps have,
since session 66, the asked-for density to the nearest block of the whole map (102 / 1024 at 4k s = .1); io_floor's
grid draws the same maps since session 67 (grids from before, e.g. session 62's, rounded each row on its own: 3 / 32).
Where the two maps' densities differ, the row says "floor of another map": its floor is then a lower bound of another
problem, not of this one.
"""
import json
import re
import sys


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    floor, floor_density, density = {}, {}, {}
    pat = re.compile(r"^\s*d(\d+) b(\d+) (\d+)k s=([0-9.]+) \((\d+)/(\d+)\) (\S+)\s+median\s+([0-9.]+)")
    for line in open(sys.argv[1]):
        m = pat.match(line)
        if not m:
            continue
        d, b, nk, s = int(m.group(1)), int(m.group(2)), int(m.group(3)), float(m.group(4))
        key = (d, b, nk * 1024, s)
        floor[key] = min(floor.get(key, 1e30), float(m.group(8)))
        floor_density[key] = int(m.group(5)) / int(m.group(6))
    times = {}
    for path in sys.argv[2:]:
        for r in json.load(open(path))["results"]:
            if r.get("time_ms_median") is None:
                continue
            times[(r["head_dim"], r["batch"], r["seqlen_q"], r["mask"])] = r["time_ms_median"] * 1000.0
            if r.get("block_sparse"):
                density[(r["head_dim"], r["batch"], r["seqlen_q"], r["mask"])] = r["block_sparse"]["block_density"]
    print("cell                      limit   fa-bench   floor   kernel/floor   (us: kernel, floor, dense)")
    for (d, b, n, s) in sorted(floor, key=lambda k: (-k[0], k[1], k[2], k[3])):
        dense = times.get((d, b, n, "none"))
        sparse = times.get((d, b, n, "block-sparse:%g:128" % s))
        if dense is None or sparse is None:
            continue
        f = floor[(d, b, n, s)]
        real = density.get((d, b, n, "block-sparse:%g:128" % s), s)
        lim = real + 0.05
        flag = " over" if sparse / dense > lim else ""
        other = "  floor of another map (%.4f against %.4f)" % (floor_density[(d, b, n, s)], real) \
            if abs(floor_density[(d, b, n, s)] - real) > 5e-4 else ""
        print("d%-3d b%d %2dk s=%-4g          %.4f  %.4f%-5s  %.4f   %.3f          (%.1f, %.1f, %.1f)%s"
              % (d, b, n // 1024, s, lim, sparse / dense, flag, f / dense, sparse / f, sparse, f, dense, other))


if __name__ == "__main__":
    main()
