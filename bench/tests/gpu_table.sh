#!/usr/bin/env bash
# gpu_table.sh SOURCE_DIR: bench/gpu_table.py merges scripts/gpu-run's outputs into one table.
# On a made-up run (two sizes per precision, eager for all, torch.compile for some, one campaign
# passing and one failing, the backward at one size a precision) every row carries our times and
# the PyTorch ones of the same dtype and size, with the speedups eager / fused and compile / fused
# computed here by hand; a size PyTorch ran out of memory at reads 'oom', with no speedup, a
# PyTorch without torch.compile ('unavailable') leaves its column empty, a row with the copy of
# the same bytes (and the fused call over it, by hand) and the queued call's device and host
# times shows them ('-' for rows of runs before they were timed), and the tensor-copy shape the
# device's bf16 rows ran is named.
set -u
src=$1
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
fail() { echo "FAIL: $*"; cat "$d/table" 2>/dev/null; exit 1; }
cat > "$d/bench.txt" <<'T'
device NVIDIA H200; boundary n=4 d=5120; CUDA events, median of 50
dtype   tokens  fused ms   unsplit    repack   base ms  floor ms    launch  /floor  fraction copy GB/s same copy    queued      host
fp32         1    0.0100    0.1500    0.1600    0.1800    0.0050    0.0050    2.00      0.00    4200.0    0.0090    0.0080    0.0070
fp32     16384    1.0000    1.0000    1.0100   12.0000    0.8000    0.0050    1.25      0.80    4200.0
bf16         1    0.0080    0.1100    0.1200    0.1800    0.0050    0.0050    1.60      0.00    4200.0    0.0060
bf16     16384    0.5000    0.5000    0.5100   12.0000    0.4000    0.0050    1.25      0.80    4200.0
fused bf16 from 16384 tokens: tb32 cw128 s2 tma, the fastest tensor-copy shape here

gradients      tokens         ms   floor ms  /floor  fraction
deterministic    1024     2.0000     0.5000    4.00      0.25
atomics          1024     1.0000     0.5000    2.00      0.50
bf16   atomics          2048     0.8000     0.2500    3.20      0.31

dtype   tokens splits config                                 ms  fraction  same
fp32     16384   auto shipped (tb32 cw32 s3 L2:256)      1.0000      0.80   yes
T
cat > "$d/torch.txt" <<'T'
torch-eager-float32-cuda 1 0.0012000 833
torch-eager-float32-cuda 16384 0.0110000 1489454
torch-eager-bfloat16-cuda 1 0.0016000 625
torch-eager-bfloat16-cuda 16384 0.0150000 1092266
torch-compile-float32-cuda 1 0.0005000 2000
torch-compile-float32-cuda 16384 0.0025000 6553600
torch-backward-eager-float32-cuda 1024 0.0100000 102400
torch-backward-compile-float32-cuda 1024 0.0040000 256000
torch-backward-eager-bfloat16-cuda 2048 out-of-memory
torch-backward-compile-bfloat16-cuda unavailable (PyTorch 1.13.0a0)
T
printf 'check: PASS (0 of 1000 cases failed)\n' > "$d/campaign-fp32.txt"
printf 'noise\ncheck: FAIL (2 of 1000 cases failed)\n' > "$d/campaign-bf16.txt"
/usr/bin/python3 "$src/bench/gpu_table.py" "$d" > "$d/table" 2>&1 || fail "exit $?"
row() { grep -E "^$1 +$2 " "$d/table" | tr -s ' '; }
# fp32 at 1 token: over the copy 0.0100 / 0.0090 = 1.11; eager 1.2 ms / 0.01 = 120x; compile
# 0.5 / 0.01 = 50x
[ "$(row fp32 1)" = "fp32 1 0.0100 0.0050 2.00 0.00 0.0090 1.11 0.0080 0.0070 0.1500 0.1600 1.2000 0.5000 120.0x 50.0x" ] ||
  fail "fp32 1: $(row fp32 1)"
# bf16 at 1 token: the copy (0.0080 / 0.0060 = 1.33), not the queued call (eager 1.6 / 0.008 =
# 200x)
[ "$(row bf16 1)" = "bf16 1 0.0080 0.0050 1.60 0.00 0.0060 1.33 - - 0.1100 0.1200 1.6000 - 200.0x -" ] ||
  fail "bf16 1: $(row bf16 1)"
# fp32 at 16384 tokens: 11 / 1 = 11x, 2.5 / 1 = 2.5x
[ "$(row fp32 16384)" = "fp32 16384 1.0000 0.8000 1.25 0.80 - - - - 1.0000 1.0100 11.0000 2.5000 11.0x 2.5x" ] ||
  fail "fp32 16384: $(row fp32 16384)"
# bf16: eager only (15 / 0.5 = 30x), no compile timing: '-'
[ "$(row bf16 16384)" = "bf16 16384 0.5000 0.4000 1.25 0.80 - - - - 0.5000 0.5100 15.0000 - 30.0x -" ] ||
  fail "bf16 16384: $(row bf16 16384)"
# the shape the bf16 rows from 16384 tokens ran, as mhc-bench-cuda chose it on the device
grep -q "^fused bf16 from 16384 tokens: tb32 cw128 s2 tma" "$d/table" || fail "the bf16 shape"
grep -q "^campaign fp32 .*check: PASS (0 of 1000" "$d/table" || fail "fp32 campaign verdict"
grep -q "^campaign bf16 .*check: FAIL (2 of 1000" "$d/table" || fail "bf16 campaign verdict"
[ "$(grep -c -E '^(fp32|bf16) ' "$d/table")" = 4 ] || fail "not one row per dtype and size"
# the backward: autograd 10 ms / 2 ms = 5x, compiled 4 / 2 = 2x; atomics 10x and 4x
[ "$(row deterministic 1024)" = "deterministic 1024 2.0000 0.5000 4.00 0.25 10.0000 4.0000 5.0x 2.0x" ] ||
  fail "backward: $(row deterministic 1024)"
[ "$(row atomics 1024)" = "atomics 1024 1.0000 0.5000 2.00 0.50 10.0000 4.0000 10.0x 4.0x" ] ||
  fail "backward atomics: $(row atomics 1024)"
# bf16's backward: autograd out of memory, no compiled timing
[ "$(row atomics 2048)" = "atomics 2048 0.8000 0.2500 3.20 0.31 oom - - -" ] ||
  fail "backward bf16: $(row atomics 2048)"
echo "ok: gpu_table.py merged 4 + 3 rows, 8 PyTorch timings, an out-of-memory, a PyTorch without compile, the bf16 shape and 2 campaign verdicts"
