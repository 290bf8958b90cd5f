#!/bin/sh
# expect_refusal.sh FA_BENCH EXPECTED ARGS...: runs `FA_BENCH run ARGS...` and passes when it is refused as bad usage
# (exit 2) with a message that contains EXPECTED (a fixed string).
exe=$1 expected=$2
shift 2
out=$("$exe" run "$@" 2>&1)
rc=$?
printf '%s\n' "$out"
if [ "$rc" -ne 2 ]; then
  echo "expect_refusal: exit status $rc, expected 2 (a usage error)"
  exit 1
fi
if ! printf '%s\n' "$out" | grep -qF -- "$expected"; then
  echo "expect_refusal: the message does not say: $expected"
  exit 1
fi
