#!/usr/bin/env bash
# shards.sh MHC_VERIFY SOURCE_DIR: campaigns run as shards, each a separate process that finds its
# index the way its scheduler gives it, then merged: the merged report equals the unsharded one
# (same_results.py) for check (cases), gate (the suite's runs), compare (files) and mutants
# (kernels). merge names a missing shard and refuses a shard or a report given twice; malformed or
# contradicting shard variables are bad input.
set -u
bin=$1 src=$2
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
fail() { echo "FAIL: $*"; cat "$d/out" 2>/dev/null; exit 1; }
clean() { env -u TEST_TOTAL_SHARDS -u TEST_SHARD_INDEX -u SLURM_ARRAY_TASK_ID -u SLURM_ARRAY_TASK_COUNT \
  -u SLURM_ARRAY_TASK_MIN -u SLURM_ARRAY_TASK_STEP -u JOB_COMPLETION_INDEX "$@"; }
equal() { /usr/bin/python3 "$src/cli/tests/same_results.py" "$@" || fail "merged != unsharded: $*"; }

# check, 3 shards of a Slurm array --array=1-3 (task IDs from 1): a kernel that fails some cases,
# so that failures, REPROs and Sinkhorn curves cross shards.
check=(check --kernel mutant:post_without_factor2 --op split_sinkhorn --cases 7 --tokens 2 --save-failures "")
clean "$bin" "${check[@]}" --json "$d/check.json" > "$d/out" 2>&1; [ $? -eq 1 ] || fail "check whole"
for id in 1 2 3; do
  clean SLURM_ARRAY_TASK_ID=$id SLURM_ARRAY_TASK_MIN=1 SLURM_ARRAY_TASK_COUNT=3 \
    "$bin" "${check[@]}" --json "$d/check$id.json" > "$d/out" 2>&1
  grep -q "shard $((id - 1)) of 3 (SLURM_ARRAY_TASK_ID=$id)" "$d/out" || fail "no shard line"
done
clean "$bin" merge "$d/check3.json" "$d/check1.json" "$d/check2.json" --json "$d/check-m.json" > "$d/out" 2>&1
[ $? -eq 1 ] || fail "merged check should fail as the whole does"
equal "$d/check.json" "$d/check-m.json"
# A shard missing, a shard given twice.
clean "$bin" merge "$d/check1.json" "$d/check3.json" > "$d/out" 2>&1; [ $? -eq 1 ] || fail "missing shard passed"
grep -q "^MISSING shard 1 of 3 of " "$d/out" || fail "the missing shard is not named"
cp "$d/check1.json" "$d/check1-copy.json"
clean "$bin" merge "$d/check1.json" "$d/check1-copy.json" > "$d/out" 2>&1; [ $? -eq 2 ] || fail "a shard twice"
grep -q "are both shard 0 of 3" "$d/out" || fail "the repeated shard is not named"

# gate, 4 shards of a Kubernetes Indexed Job (the count passed with --shards).
cat > "$d/suite" <<'SUITE'
kernels cpu cpu-fused
ops split_sinkhorn pre
hc-eps 1e-6 1e-2
cases 2
tokens 2
dim 64
SUITE
gate=(gate --suite "$d/suite" --baseline "$d/base.json")
clean "$bin" "${gate[@]}" --update > "$d/out" 2>&1 || fail "gate update"
clean "$bin" "${gate[@]}" --json "$d/gate.json" > "$d/out" 2>&1 || fail "gate whole"
for k in 0 1 2 3; do
  clean JOB_COMPLETION_INDEX=$k "$bin" "${gate[@]}" --shards 4 --json "$d/gate$k.json" > "$d/out" 2>&1 \
    || fail "gate shard $k"
done
clean "$bin" merge "$d"/gate[0-3].json --json "$d/gate-m.json" > "$d/out" 2>&1 || fail "gate merge"
equal "$d/gate.json" "$d/gate-m.json"
# Passing shards with one missing: the merge fails, and its report and JUnit say it is incomplete
# (a CI page reading the JUnit file must not show green).
clean "$bin" merge "$d"/gate[0-2].json --json "$d/gate-3.json" --junit "$d/gate-3.xml" > "$d/out" 2>&1
[ $? -eq 1 ] && grep -q "^MISSING shard 3 of 4 of " "$d/out" || fail "a passing merge with a shard missing"
grep -q '"complete": false' "$d/gate-3.json" || fail "the merge of a missing shard says complete"
grep -q '<error message="a part of the merge did not finish, or is missing' "$d/gate-3.xml" ||
  fail "the JUnit of a merge with a shard missing has no error"
clean JOB_COMPLETION_INDEX=0 "$bin" "${gate[@]}" --shards 4 --update > "$d/out" 2>&1
[ $? -eq 2 ] && grep -q "run it unsharded" "$d/out" || fail "a sharded --update was accepted"

# compare of the shipped fixtures, 2 shards from TEST_TOTAL_SHARDS/TEST_SHARD_INDEX.
files=("$src"/fixtures/data/*.h5)
clean "$bin" compare "${files[@]}" --json "$d/cmp.json" > "$d/out" 2>&1 || fail "compare whole"
for k in 0 1; do
  clean TEST_TOTAL_SHARDS=2 TEST_SHARD_INDEX=$k "$bin" compare "${files[@]}" --json "$d/cmp$k.json" \
    > "$d/out" 2>&1 || fail "compare shard $k"
done
clean "$bin" merge "$d/cmp0.json" "$d/cmp1.json" --json "$d/cmp-m.json" > "$d/out" 2>&1 || fail "compare merge"
equal "$d/cmp.json" "$d/cmp-m.json"
# One unsharded report twice, by its name or through a link: its cases would count twice.
ln -s "$d/cmp.json" "$d/cmp-link.json"
for again in "$d/cmp.json" "$d/cmp-link.json"; do
  clean "$bin" merge "$d/cmp.json" "$again" > "$d/out" 2>&1; [ $? -eq 2 ] || fail "a report twice: $again"
  grep -q "are the same report" "$d/out" || fail "the repeated report is not named"
done

# mutants, 3 shards (Slurm, --array=0-4:2: task IDs 0, 2, 4), judged on 2 threads.
mut=(mutants --cases 10 --kill-budget 10 --threads 2)
clean "$bin" "${mut[@]}" --json "$d/mut.json" > "$d/out" 2>&1; rc=$?
for id in 0 2 4; do
  clean SLURM_ARRAY_TASK_ID=$id SLURM_ARRAY_TASK_STEP=2 SLURM_ARRAY_TASK_COUNT=3 \
    "$bin" "${mut[@]}" --json "$d/mut$id.json" > "$d/out" 2>&1
done
clean "$bin" merge "$d"/mut[024].json --json "$d/mut-m.json" > "$d/out" 2>&1; [ $? -eq $rc ] || fail "mutants merge exit"
equal "$d/mut.json" "$d/mut-m.json" variant:backward_atomics "variant:backward_atomics as bf16"

# The shard variables, malformed or contradicting: exit 2, named.
expect2() {
  local want=$1; shift
  clean "$@" > "$d/out" 2>&1; [ $? -eq 2 ] && grep -q -- "$want" "$d/out" || fail "not refused: $*"
}
one=("$bin" check --op pre --cases 2 --tokens 1 --dim 8)
expect2 "gives no shard count: pass --shards N" JOB_COMPLETION_INDEX=1 "${one[@]}"
expect2 "SLURM_ARRAY_TASK_COUNT is not" SLURM_ARRAY_TASK_ID=1 "${one[@]}"
expect2 "is not MIN + k STEP" SLURM_ARRAY_TASK_ID=3 SLURM_ARRAY_TASK_STEP=2 SLURM_ARRAY_TASK_COUNT=3 "${one[@]}"
expect2 "two shard indices" TEST_TOTAL_SHARDS=2 TEST_SHARD_INDEX=0 JOB_COMPLETION_INDEX=0 "${one[@]}"
expect2 "contradicts SLURM_ARRAY_TASK_ID" SLURM_ARRAY_TASK_ID=0 SLURM_ARRAY_TASK_COUNT=2 "${one[@]}" --shards 3
expect2 "outside 0..1" TEST_TOTAL_SHARDS=2 TEST_SHARD_INDEX=2 "${one[@]}"
expect2 "TEST_TOTAL_SHARDS=0: a campaign has at least one shard" TEST_TOTAL_SHARDS=0 TEST_SHARD_INDEX=0 "${one[@]}"
expect2 "SLURM_ARRAY_TASK_COUNT=0: a campaign" SLURM_ARRAY_TASK_ID=0 SLURM_ARRAY_TASK_COUNT=0 "${one[@]}"
expect2 "not a count or index" TEST_TOTAL_SHARDS=two TEST_SHARD_INDEX=0 "${one[@]}"
# --shards 1: the whole campaign, whatever the environment says.
clean SLURM_ARRAY_TASK_ID=1 SLURM_ARRAY_TASK_COUNT=2 "${one[@]}" --shards 1 > "$d/out" 2>&1 || fail "--shards 1"
grep -q "check: PASS (0 of 2 cases failed)" "$d/out" || fail "--shards 1 did not run every case"
echo "shards: ok"
