#!/usr/bin/env bash
# sinkhorn.sh BIN SOURCE_DIR: mhc-verify sinkhorn map|captured|gain and the fuzz's theory.
# - map: three shards merged, and two threads, give the unsharded map cell for cell;
# - captured: on a split_sinkhorn fixture of 64 tokens, every reported distance, rounds-needed
#   and near-permutation figure equals an independent numpy Sinkhorn (sinkhorn_check.py); with a
#   NaN or infinite hc_scale, refused (exit 2) rather than read as converged;
# - captured and gain on a stack our kernel captured: a site per layer and sublayer, and the
#   captured combs' composite gains equal numpy's products of the file's combs; without combs in
#   the file, the oracle's curve alone;
# - gain on a generated stack: the oracle's and the kernel's curves, one value per site;
# - fuzz: the worst cases' theory is certified in MPFR, and no rate disagrees with the theory.
set -u
bin=$1
src=$2
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
fail() { echo "FAIL: $*"; cat "$d/out" 2>/dev/null; exit 1; }
check=(/usr/bin/python3 "$src/cli/tests/sinkhorn_check.py")

map=(sinkhorn map --cases 30 --scales 1 10 --rounds 5 20)
"$bin" "${map[@]}" --threads 1 --json "$d/map.json" > "$d/out" 2>&1 || fail "map: exit $?"
grep -q "near-permutation" "$d/out" || fail "map: no table"
"$bin" "${map[@]}" --threads 2 --json "$d/map2.json" > "$d/out" 2>&1 || fail "map --threads 2"
for i in 0 1 2; do
  TEST_TOTAL_SHARDS=3 TEST_SHARD_INDEX=$i "$bin" "${map[@]}" --json "$d/s$i.json" > "$d/out" 2>&1 ||
    fail "map shard $i"
done
"$bin" merge "$d"/s?.json --json "$d/merged.json" > "$d/out" 2>&1 || fail "merge of the map"
# Rounds given out of order measure the same rounds.
"$bin" sinkhorn map --cases 30 --scales 1 10 --rounds 20 5 --json "$d/unordered.json" \
  > "$d/out" 2>&1 || fail "map --rounds 20 5"
"${check[@]}" map "$d/map.json" "$d/map2.json" "$d/merged.json" "$d/unordered.json" > "$d/out" 2>&1 ||
  fail "map cells"

"${check[@]}" write "$src" "$d/split.h5" > "$d/out" 2>&1 || fail "writing the fixture"
"$bin" sinkhorn captured "$d/split.h5" --max-rounds 100000 --json "$d/cap.json" > "$d/out" 2>&1 ||
  fail "captured: exit $?"
"${check[@]}" captured "$d/split.h5" "$d/cap.json" > "$d/out" 2>&1 || fail "captured figures"
# A NaN or an infinity in the logits' sources compares false everywhere: refused, not "converged".
for v in nan inf; do
  /usr/bin/python3 - "$d/split.h5" "$d/$v.h5" $v > "$d/out" 2>&1 <<'PY' || fail "writing $v.h5"
import shutil, sys, h5py
shutil.copy(sys.argv[1], sys.argv[2])
with h5py.File(sys.argv[2], "r+") as f:
    f["params/hc_scale"][2] = float(sys.argv[3])
PY
  "$bin" sinkhorn captured "$d/$v.h5" > "$d/out" 2>&1
  [ $? -eq 2 ] && grep -q "token 0: the comb's logits are not finite" "$d/out" ||
    fail "captured with hc_scale $v"
done

"$bin" capture --kernel cpu --op stack --layers 3 --tokens 3 --batch 2 --dim 16 --heads 2 \
  --head-dim 4 --experts 4 --top-k 2 --inter 8 --captured-sublayers --out "$d/stack.h5" \
  > "$d/out" 2>&1 || fail "capture of a stack"
"$bin" sinkhorn captured "$d/stack.h5" --json "$d/stack_cap.json" > "$d/out" 2>&1 ||
  fail "captured stack: exit $?"
"$bin" sinkhorn gain "$d/stack.h5" --json "$d/gain.json" > "$d/out" 2>&1 || fail "gain: exit $?"
"${check[@]}" gain "$d/stack.h5" "$d/gain.json" "$d/stack_cap.json" > "$d/out" 2>&1 ||
  fail "gain of the captured combs"

# A capture without combs (a model captured by its modules): the oracle's curve alone.
/usr/bin/python3 - "$d/stack.h5" "$d/nocomb.h5" > "$d/out" 2>&1 <<'PY' || fail "removing the combs"
import shutil, sys, h5py
shutil.copy(sys.argv[1], sys.argv[2])
with h5py.File(sys.argv[2], "r+") as f:
    trace = f["outputs/trace"]
    for name in [k for k in trace if k.endswith(".comb")]:
        del trace[name]
PY
"$bin" sinkhorn gain "$d/nocomb.h5" --json "$d/nocomb.json" > "$d/out" 2>&1 ||
  fail "gain without combs: exit $?"
/usr/bin/python3 -c "import json, sys; (e,) = json.load(open(sys.argv[1]))['entries']; \
assert [g['label'] for g in e['gains']] == ['oracle'], e['gains']" "$d/nocomb.json" > "$d/out" 2>&1 ||
  fail "gain without combs: curves"

"$bin" sinkhorn gain --layers 4 --dim 16 --heads 2 --head-dim 4 --experts 4 --inter 8 \
  --positions 3 --kernel cpu --kernel cpu-fused --json "$d/gen.json" > "$d/out" 2>&1 ||
  fail "generated gain: exit $?"
/usr/bin/python3 - "$d/gen.json" > "$d/out" 2>&1 <<'PY' || fail "generated gain curves"
import json, sys
(e,) = json.load(open(sys.argv[1]))["entries"]
labels = [g["label"] for g in e["gains"]]
assert labels == ["oracle", "kernel cpu", "kernel cpu-fused"], labels
assert all(len(g[k]) == 8 for g in e["gains"] for k in ("forward", "backward", "spectral"))
PY

"$bin" sinkhorn map extra.h5 > "$d/out" 2>&1; [ $? -eq 2 ] || fail "map with a file: not exit 2"
# Bad input: exit 2 and one line on stderr naming the file, nothing of it on stdout.
"$bin" sinkhorn captured "$src/fixtures/data/v41_pre_fp32.h5" > "$d/out" 2> "$d/err"
[ $? -eq 2 ] && grep -q "^mhc-verify: error: .*v41_pre_fp32.h5: no case of an op with a comb" "$d/err" &&
  ! grep -q "no case of an op" "$d/out" || fail "a file without a comb"
"$bin" sinkhorn gain "$src/fixtures/data/v41_pre_fp32.h5" > "$d/out" 2> "$d/err"
[ $? -eq 2 ] && grep -q "^mhc-verify: error: .*v41_pre_fp32.h5: no block or stack case" "$d/err" &&
  ! grep -q "no block or stack case" "$d/out" || fail "gain: a file without a stack"

"$bin" fuzz sinkhorn --cases 20000 --keep 3 --save-failures "$d/f" --json "$d/fuzz.json" \
  > "$d/out" 2>&1 || fail "fuzz: exit $?"
/usr/bin/python3 - "$d/fuzz.json" > "$d/out" 2>&1 <<'PY' || fail "fuzz theory facts"
import json, sys
(e,) = json.load(open(sys.argv[1]))["entries"]
facts = dict(e["facts"]) if isinstance(e["facts"], list) else e["facts"]
print(facts)
assert int(facts["theory_checked"]) == 20000 // 64 + 1
assert int(facts["theory_disagreements"]) == 0 and int(facts["theory_failed"]) == 0
theory = [v for k, v in facts.items() if k.startswith("theory_") and k[7:].isdigit()]
assert len(theory) == 3 and all("certified yes" in t for t in theory), theory
PY
echo "sinkhorn: map, captured, gain and the fuzz's theory as derived"
