#!/usr/bin/env bash
# gpu_plugin.sh MHC_VERIFY PLUGIN HOSTILE: the example CUDA plug-in (device memory) passes hc_pre
# and hc_post in fp32 and bf16 in worker processes, and says it has no split_sinkhorn; the hostile
# plug-in taking device memory and crashing on its second call fails that case and the run goes
# on; a gate of our CUDA kernels and a device plug-in, even with --no-isolate, runs all in workers
# (this process holds no CUDA context, so no warning of an unisolated plug-in) and both pass.
# Exit 77 without a CUDA device.
set -u
bin=$1 plugin=$2 hostile=$3
out=$("$bin" check --kernel "plugin:$plugin" --op pre --cases 1 --tokens 1 --dim 8 2>&1)
if [ $? -eq 2 ] && printf '%s' "$out" | grep -q "no CUDA device"; then echo "SKIP: no CUDA device"; exit 77; fi
for op in pre post; do
  for prec in fp32 bf16; do
    "$bin" check --kernel "plugin:$plugin" --op $op --precision $prec --cases 2 --tokens 5 | tail -1 |
      grep -q "check: PASS" || { echo "FAIL: $op $prec"; exit 1; }
  done
done
"$bin" check --kernel "plugin:$plugin" --op split_sinkhorn --cases 1 2>&1 | grep -q "has no split_sinkhorn" ||
  { echo "FAIL: missing entry point not reported"; exit 1; }
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
MHC_HOSTILE_DEVICE=1 MHC_HOSTILE=segv MHC_HOSTILE_COUNT=$d/count \
  "$bin" check --kernel "plugin:$hostile" --op pre --cases 3 --tokens 2 --dim 8 > "$d/out" 2>&1
rc=$?
cat "$d/out"
[ $rc -eq 1 ] || { echo "FAIL: a crashing device plug-in: exit $rc, expected 1"; exit 1; }
grep -q "FAIL case 1 .*the kernel's worker died of SIGSEGV" "$d/out" &&
  grep -q "check: FAIL (3 of 3 cases failed)" "$d/out" ||
  { echo "FAIL: the crash of a device plug-in was not its case's failure"; exit 1; }
printf 'kernels cuda-fused plugin:%s\nops pre\ncases 1\ntokens 2\ndim 8\n' "$plugin" > "$d/suite"
"$bin" gate --suite "$d/suite" --baseline "$d/base.json" --update --no-isolate > "$d/out" 2>&1
rc=$?
cat "$d/out"
[ $rc -eq 0 ] && ! grep -q "unprotected" "$d/out" ||
  { echo "FAIL: gate of cuda-fused and a device plug-in: exit $rc, or a plug-in ran unisolated"; exit 1; }
echo "gpu plug-in: ok"
