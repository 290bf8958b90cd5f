#!/usr/bin/env bash
# s53-9: the final revision: fa-bench standard grid, then torch_sdpa.py, then the table (issue 9's same-run figures).
export OUT; [ -f build-h100/cli/fa-bench ] || bash scripts/device-sm90.sh build > /dev/null 2>&1; bash scripts/device-sm90.sh bench peers table
