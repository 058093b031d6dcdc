#!/usr/bin/env bash
# test_cuda_args.sh TEST_CUDA: test_cuda's arguments are read, and its runs named, before it looks
# for a device, so that a sanitizer's run of a few named runs cannot start the whole suite by a
# typo: --help teaches (exit 0); an option it does not know, an empty text, or a text that no run
# has is refused (exit 2, named, nothing run); --list names the runs a selection takes. The
# expected names come from the suite's loops: the Block runs at d = 5120 and 48, the "same bits
# twice" runs at 2 precisions x 3 widths.
set -u
fail() { echo "FAIL: $*"; exit 1; }
out=$("$1" --help 2>&1) && [[ $out == *"usage: test_cuda [--list] [TEXT...]"* ]] ||
  fail "--help: $out"
for bad in --shard "-x" "" "  "; do
  out=$("$1" "cuda-fused" "$bad" 2>&1)
  rc=$?
  [ $rc = 2 ] || fail "'$bad' gave exit $rc, expected 2: $out"
  [[ $out == *"unknown argument '$bad'"* ]] || fail "the message does not name '$bad': $out"
done
out=$("$1" "cuda-fused" "cuda-fused blok" 2>/dev/null)
rc=$?
[ $rc = 2 ] && [ -z "$out" ] || fail "a text that no run has: exit $rc, output '$out'"
[[ $("$1" "cuda-fused blok" 2>&1) == *"no run's name contains 'cuda-fused blok'"* ]] ||
  fail "the message does not name the text"
out=$("$1" --list "cuda-fused  block bf16")
[ "$out" = $'cuda-fused block bf16 d=5120\ncuda-fused block bf16 d=48' ] || fail "--list block: $out"
n=$("$1" --list "bits twice" | wc -l)
[ "$n" = 6 ] || fail "--list 'bits twice' printed $n names, expected 6"
all=$("$1" --list)
[ -n "$all" ] && [ -z "$(sort <<< "$all" | uniq -d)" ] || fail "run names are not distinct"
echo "ok: --help, --list, and bad arguments and unknown texts refused with exit 2"
