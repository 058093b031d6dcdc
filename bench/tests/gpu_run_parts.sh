#!/usr/bin/env bash
# gpu_run_parts.sh SOURCE_DIR: scripts/gpu-run refuses a part it does not know (exit 2, naming it
# and the parts), before it touches the device or the build, so a typo cannot run nothing and pass;
# `sanitize` runs memcheck and racecheck; and a failing step fails the run (exit 1): here, without a
# GPU, test_cuda and mhc-bench-cuda first-call cannot pass (with GPU_RUN_TESTS, test_cuda alone).
set -u
out=$(OUT=$(mktemp -d) bash "$1/scripts/gpu-run" tests tetss 2>&1)
rc=$?
[ $rc = 2 ] || { echo "FAIL: exit $rc, expected 2: $out"; exit 1; }
[[ $out == *"unknown part 'tetss'"*"tests memcheck racecheck cli campaign bench torch"* ]] ||
  { echo "FAIL: message: $out"; exit 1; }
# sanitize names both sanitizer parts (without a GPU each fails or is not available: not exit 2)
out=$(OUT=$(mktemp -d) bash "$1/scripts/gpu-run" sanitize 2>&1)
rc=$?
[ $rc != 2 ] || { echo "FAIL: sanitize refused: $out"; exit 1; }
[[ $out == *"memcheck  "*"racecheck  "* ]] || { echo "FAIL: sanitize is not both: $out"; exit 1; }
if command -v nvidia-smi >/dev/null; then
  echo "ok: $out (a GPU is present: the failing-step check is left to the build machine)"
  exit 0
fi
out=$(OUT=$(mktemp -d) bash "$1/scripts/gpu-run" tests 2>&1)
rc=$?
[ $rc = 1 ] || { echo "FAIL: a failing step gave exit $rc, expected 1: $out"; exit 1; }
[[ $out == *"cuda-tests             FAIL"*"first-call             FAIL"*"2 step(s) failed"* ]] ||
  { echo "FAIL: the failing step is not reported: $out"; exit 1; }
# a selection of test_cuda's runs (GPU_RUN_TESTS) runs those alone, without first-call
out=$(OUT=$(mktemp -d) GPU_RUN_TESTS='cuda-fused block' bash "$1/scripts/gpu-run" tests 2>&1)
[[ $out == *"cuda-tests             FAIL"*"1 step(s) failed"* && $out != *first-call* ]] ||
  { echo "FAIL: with GPU_RUN_TESTS, not test_cuda alone: $out"; exit 1; }
echo "ok: unknown part refused; a failing step fails the run; a selection runs test_cuda alone"
