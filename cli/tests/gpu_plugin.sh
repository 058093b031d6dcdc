#!/usr/bin/env bash
# gpu_plugin.sh MHC_VERIFY PLUGIN: the example CUDA plug-in (device memory) passes hc_pre and
# hc_post in fp32 and bf16, and says it has no split_sinkhorn. Exit 77 without a CUDA device.
set -u
bin=$1 plugin=$2
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
echo "gpu plug-in: ok"
