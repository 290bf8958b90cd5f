#!/usr/bin/env python3
"""scripts/sass_overlap.py SASS.txt -- for each sm90 forward kernel in a cuobjdump -sass listing: where the
steady-state loop's softmax sits. Counts the MUFU.EX2 between the loop's `WARPGROUP.DEPBAR.LE gsb0, 0x1` (S_j
ready) and the next `WARPGROUP.DEPBAR.LE gsb0, 0x0` (P_{j-1} V_{j-1} done): the exps that overlap the P V, and
those after it. (perf-log v24: ptxas had put the whole softmax after the second wait.)
parse_sass is shared with scripts/sass_marks.py."""
import re
import sys


def parse_sass(path):
    """The kernels of a cuobjdump -sass listing: [(mangled name, [(address, instruction), ...]), ...]."""
    funcs = []
    for line in open(path, errors="replace"):
        m = re.search(r"Function : (\S+)", line)
        if m:
            funcs.append((m.group(1), []))
            continue
        m = re.search(r"/\*([0-9a-f]{4,})\*/\s+(.*?);", line)
        if m and funcs:
            funcs[-1][1].append((m.group(1), m.group(2).strip()))
    return funcs


def main():
    for fn, body in parse_sass(sys.argv[1]):
        if "fwd_kernel" not in fn:
            continue
        ins = [x for _, x in body]
        for i, x in enumerate(ins):
            if "WARPGROUP.DEPBAR.LE gsb0, 0x1" in x:
                j = next((k for k in range(i + 1, len(ins)) if "WARPGROUP.DEPBAR.LE gsb0, 0x0" in ins[k]), None)
                if j is None:
                    continue
                k_end = next((k for k in range(j + 1, len(ins)) if "HGMMA" in ins[k] or "BAR.SYNC" in ins[k]), len(ins))
                before = sum("MUFU.EX2" in y for y in ins[i:j])
                after = sum("MUFU.EX2" in y for y in ins[j:k_end])
                print(f"{fn[:150]}\n    between waits: {j - i} instructions, {before} MUFU.EX2; after the wait<0>: {after} MUFU.EX2")
                break


if __name__ == "__main__":
    main()
