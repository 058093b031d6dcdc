#!/usr/bin/env bash
# bench_cuda_args.sh MHC_BENCH_CUDA: mhc-bench-cuda refuses repeats that are not a positive
# integer, a mode other than `table`, `sweep` or `movement`, and token counts the sweep does not
# have or given to another mode (exit 2, naming what it got), before it looks for a device, so
# that a typo cannot run the whole benchmark.
set -u
for args in "0" "20 sweeep" "20 tabel" "20 movment" "1 sweep 8,300" "1 sweep 8," "1 table 8"; do
  out=$("$1" $args 2>&1)
  rc=$?
  [ $rc = 2 ] || { echo "FAIL: '$args' gave exit $rc, expected 2: $out"; exit 1; }
  bad=${args##* }
  bad=${bad##*,}
  [[ $out == *"'$bad'"* ]] || { echo "FAIL: '$args': the message does not name '$bad': $out"; exit 1; }
done
echo "ok: bad repeats and modes refused with exit 2"
# Each mode is accepted: with no device visible, it gets as far as looking for one (exit 77).
for mode in table sweep movement; do
  out=$(CUDA_VISIBLE_DEVICES= "$1" 20 $mode 2>&1)
  rc=$?
  [ $rc = 77 ] || { echo "FAIL: mode '$mode' gave exit $rc, expected 77 (no device): $out"; exit 1; }
done
out=$(CUDA_VISIBLE_DEVICES= "$1" 1 sweep 8,256 2>&1)
rc=$?
[ $rc = 77 ] || { echo "FAIL: 'sweep 8,256' gave exit $rc, expected 77 (no device): $out"; exit 1; }
out=$(CUDA_VISIBLE_DEVICES= "$1" first-call 2>&1)
rc=$?
[ $rc = 77 ] || { echo "FAIL: 'first-call' gave exit $rc, expected 77 (no device): $out"; exit 1; }
# first-call's token count: from 16384 (where the tensor copies start) to 262144 (27 GB of inputs
# and outputs), one number
for args in "first-call 16383" "first-call 262145" "first-call 2e4" "first-call 20000 3"; do
  out=$("$1" $args 2>&1)
  rc=$?
  [ $rc = 2 ] && [[ $out == *"'${args##* }'"* ]] ||
    { echo "FAIL: '$args' gave exit $rc, expected 2 naming '${args##* }': $out"; exit 1; }
done
echo "ok: table, sweep (and sweep at some of its sizes), movement and first-call accepted; a"
echo "    first-call token count out of 16384-262144, not a number, or followed by more refused"
