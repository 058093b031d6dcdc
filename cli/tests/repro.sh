#!/usr/bin/env bash
# repro.sh BIN ARGS...: a failing `check` prints a REPRO line per failing case; running that line
# must fail again with the same FAIL line (same seed, same element values).
set -u
bin=$1
shift
out=$("$bin" "$@")
rc=$?
[ "$rc" -eq 1 ] || { echo "FAIL: expected exit 1, got $rc"; echo "$out"; exit 1; }
fail=$(echo "$out" | grep -m1 '^FAIL case')
repro=$(echo "$out" | grep -m1 '^REPRO: ')
[ -n "$repro" ] || { echo "FAIL: no REPRO line"; exit 1; }
echo "$repro"
args=${repro#REPRO: mhc-verify }
again=$("$bin" $args)
rc=$?
[ "$rc" -eq 1 ] || { echo "FAIL: the REPRO line exited $rc"; exit 1; }
# Same failure, up to the case index (the rerun's only case is case 0).
strip() { sed -E 's/^FAIL case [0-9]+ //'; }
if [ "$(echo "$fail" | strip)" != "$(echo "$again" | grep -m1 '^FAIL case' | strip)" ]; then
  echo "FAIL: the REPRO run failed differently:"; echo "$fail"; echo "$again" | grep -m1 '^FAIL case'; exit 1
fi
echo "ok: $fail"
