#!/usr/bin/env bash
# s51-6: the final revision: fa-bench on the standard grid (sm90, checked), then torch_sdpa.py in the same call, and the table.
set -uo pipefail
export OUT
[ -f build-h100/cli/fa-bench ] || bash scripts/device-sm90.sh build 2>&1 | grep -E "build:|C75" | head
bash scripts/device-sm90.sh bench peers table 2>&1 | tail -45
