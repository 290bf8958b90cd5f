#!/usr/bin/env python3
"""scripts/sass_marks.py SASS.txt NAME -- for each sm90 forward kernel in a cuobjdump -sass listing whose mangled name
contains NAME: its spills (LDL/STL) against the landmarks around them (USETMAXREG, HGMMA groups, their waits, named
barriers, mbarrier operations, branches), one line per landmark with runs of HGMMAs collapsed, so where a spill sits --
producer, prologue, loop, epilogue -- can be read off. (device-sm90.sh: sass-marks, sass-dev-rings.)"""
import re
import sys

from sass_overlap import parse_sass

name = sys.argv[2] if len(sys.argv) > 2 else ""
marks = re.compile(r"LDL|STL|USETMAXREG|HGMMA|WARPGROUP\.DEPBAR|BAR\.SYNC|BAR\.ARV|SYNCS|BRA|EXIT")
for fn, ins in parse_sass(sys.argv[1]):
    if "fwd_kernel" not in fn or name not in fn:
        continue
    spills = sum(1 for _, x in ins if re.search(r"\b(LDL|STL)", x))
    print(f"== {fn}\n   {len(ins)} instructions, {spills} LDL/STL")
    last = None
    for addr, x in ins:
        if not marks.search(x):
            continue
        op = x.split()[1] if x.startswith("@") else x.split()[0]
        key = op.split(".")[0] + (".gsb0" if "gsb0" in x else "")
        if key == last and key.startswith("HGMMA"):
            continue  # a run of HGMMAs: its first and the group's gsb0 closer only
        last = key
        print(f"   {addr}  {x[:110]}")
