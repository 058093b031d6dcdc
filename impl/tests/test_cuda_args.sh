#!/usr/bin/env bash
# test_cuda_args.sh TEST_CUDA: test_cuda's arguments are read before it looks for a device, so
# that a sanitizer's run of a few named runs cannot start the whole suite by a typo: --help
# teaches (exit 0), an option it does not know or an empty text is refused (exit 2, named).
set -u
out=$("$1" --help 2>&1)
rc=$?
[ $rc = 0 ] && [[ $out == *"usage: test_cuda [TEXT...]"* ]] ||
  { echo "FAIL: --help gave exit $rc: $out"; exit 1; }
for bad in --shard "-x" "" "  "; do
  out=$("$1" "cuda-fused" "$bad" 2>&1)
  rc=$?
  [ $rc = 2 ] || { echo "FAIL: '$bad' gave exit $rc, expected 2: $out"; exit 1; }
  [[ $out == *"unknown argument '$bad'"* ]] ||
    { echo "FAIL: the message does not name '$bad': $out"; exit 1; }
done
echo "ok: --help, and unknown options and empty texts refused with exit 2"
