#!/usr/bin/env python3
"""scripts/sass_marks.py SASS.txt NAME -- for each kernel in a cuobjdump -sass listing whose mangled name contains NAME:
its spills (LDL/STL) against the landmarks around them (USETMAXREG, HGMMA groups, their waits, named barriers, branches),
one line per landmark with runs of HGMMAs collapsed, so where a spill sits -- prologue, loop, epilogue -- can be read off."""
import re
import sys

name = sys.argv[2] if len(sys.argv) > 2 else ""
fn, funcs = None, []
for line in open(sys.argv[1], errors="replace"):
    m = re.search(r"Function : (\S+)", line)
    if m:
        fn = m.group(1)
        funcs.append((fn, []))
        continue
    m = re.search(r"/\*([0-9a-f]{4,})\*/\s+(.*?);", line)
    if m and fn:
        funcs[-1][1].append((m.group(1), m.group(2).strip()))
marks = re.compile(r"LDL|STL|USETMAXREG|HGMMA|WARPGROUP\.DEPBAR|BAR\.SYNC|BAR\.ARV|SYNCS|BRA|EXIT")
for fn, ins in funcs:
    if "fwd_kernel" not in fn or name not in fn:
        continue
    spills = sum(1 for _, x in ins if re.search(r"\b(LDL|STL)", x))
    print(f"== {fn}\n   {len(ins)} instructions, {spills} LDL/STL")
    last = None
    for addr, x in ins:
        if not marks.search(x):
            continue
        op = x.split()[0] if not x.startswith("@") else x.split()[1]
        key = op.split(".")[0] + (".gsb0" if "gsb0" in x else "")
        if key == last and key.startswith("HGMMA"):
            continue  # a run of HGMMAs: its first and the group's gsb0 closer only
        last = key
        print(f"   {addr}  {x[:110]}")
