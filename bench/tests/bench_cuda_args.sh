#!/usr/bin/env bash
# bench_cuda_args.sh MHC_BENCH_CUDA: mhc-bench-cuda refuses repeats that are not a positive
# integer and a mode other than `table` or `sweep` (exit 2, naming what it got), before it looks
# for a device, so that a typo cannot run the whole benchmark.
set -u
for args in "0" "20 sweeep" "20 tabel"; do
  out=$("$1" $args 2>&1)
  rc=$?
  [ $rc = 2 ] || { echo "FAIL: '$args' gave exit $rc, expected 2: $out"; exit 1; }
  bad=${args##* }
  [[ $out == *"'$bad'"* ]] || { echo "FAIL: '$args': the message does not name '$bad': $out"; exit 1; }
done
echo "ok: bad repeats and modes refused with exit 2"
