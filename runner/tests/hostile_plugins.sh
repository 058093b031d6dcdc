#!/usr/bin/env bash
# hostile_plugins.sh BIN PLUGIN: for each misbehaviour of the hostile plug-in (its third call:
# case 1's first run), `check` on 3 cases exits 1 (not 0, not a crash): cases 0 and 2 pass, case 1
# fails with what happened; misbehaving on a case's second run fails that case too; `gate` does
# not exit 0 and its JUnit file counts the failure.
set -u
bin=$1 plugin=$2
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
fail() { echo "FAIL: $*"; cat "$d/out"; exit 1; }
run=(check --kernel "plugin:$plugin" --op pre --cases 3 --tokens 2 --dim 8 --kernel-timeout 3)
# past and far write beside right outputs: 2 x 8 floats end against a page no access may touch.
# forge and forgelong write a result into the worker's shared memory themselves: none of the op's
# outputs, or lengths beyond the bytes written; the case fails, nothing is read past the result.
for mode in segv:SIGSEGV abort:SIGABRT fpe:SIGFPE stack:SIGSEGV hang:"time limit of 3 s" \
  exit0:"ended its process (exit code 0)" ignore:"time limit of 3 s" past:SIGSEGV far:SIGSEGV \
  forge:"the kernel's trace has no stage y, an output of pre" \
  forgelong:"the kernel's worker left a malformed result"; do
  name=${mode%%:*} want=${mode#*:}
  rm -f "$d/count"
  MHC_HOSTILE_COUNT=$d/count MHC_HOSTILE=$name timeout 60 "$bin" "${run[@]}" --json "$d/$name.json" > "$d/out" 2>&1
  rc=$?
  [ $rc -eq 1 ] || fail "$name: exit $rc, expected 1"
  grep -q "FAIL case 1 (seed 2): first divergent stage 'kernel': .*$want" "$d/out" ||
    fail "$name: no failure naming '$want'"
  grep -q "check: FAIL (1 of 3 cases failed)" "$d/out" || fail "$name: the other cases did not pass"
  echo "ok: $name"
done
# A kernel that forks a process and returns right outputs: the case passes, and what it forked
# is killed with its worker (else it held the worker's pipe until the time limit, then stayed).
rm -f "$d/count" "$d/pid"
MHC_HOSTILE_COUNT=$d/count MHC_HOSTILE=forkhang MHC_HOSTILE_PIDFILE=$d/pid timeout 60 "$bin" \
  "${run[@]}" > "$d/out" 2>&1
rc=$?
sleep 0.5
alive() {  # a process that exists and is not a zombie (an init that reaps no orphans keeps those)
  [ "$(awk '/^State:/ {print $2}' "/proc/$1/status" 2>/dev/null)" ] &&
    [ "$(awk '/^State:/ {print $2}' "/proc/$1/status" 2>/dev/null)" != Z ]
}
if [ -s "$d/pid" ] && alive "$(cat "$d/pid")"; then
  kill -9 "$(cat "$d/pid")"
  fail "forkhang: the process it forked outlived its worker"
fi
[ -s "$d/pid" ] || fail "forkhang: the forked process never ran"
[ $rc -eq 0 ] && grep -q "check: PASS (0 of 3 cases failed)" "$d/out" || fail "forkhang: exit $rc"
echo "ok: forkhang"
# A kernel that signals its process group ends its worker, not the harness (the group is the
# worker's own).
rm -f "$d/count"
MHC_HOSTILE_COUNT=$d/count MHC_HOSTILE=killgroup timeout 60 "$bin" "${run[@]}" > "$d/out" 2>&1
rc=$?
[ $rc -eq 1 ] || fail "killgroup: exit $rc, expected 1"
grep -q "FAIL case 1 (seed 2): first divergent stage 'kernel': the kernel's worker died of SIGTERM" \
  "$d/out" || fail "killgroup: no failure naming SIGTERM"
echo "ok: killgroup"
# What a plug-in prints goes to stderr: stdout has the harness's lines only.
rm -f "$d/count"
MHC_HOSTILE_COUNT=$d/count MHC_HOSTILE=stdout timeout 60 "$bin" "${run[@]}" > "$d/out" 2> "$d/err"
rc=$?
[ $rc -eq 0 ] || fail "stdout: exit $rc, expected 0"
grep -q "REPRO: rm -rf /" "$d/out" && fail "stdout: the plug-in's lines are on the harness's stdout"
grep -q "REPRO: rm -rf /" "$d/err" || fail "stdout: the plug-in's lines are lost"
echo "ok: stdout"
# SIGINT while a plug-in runs: the run ends as interrupted (130), its report says so too.
rm -f "$d/count"
MHC_HOSTILE_COUNT=$d/count MHC_HOSTILE=hang MHC_HOSTILE_AT=0 timeout --preserve-status -k 30 -s INT 2 "$bin" "${run[@]}" \
  --json "$d/int.json" > "$d/out" 2>&1
rc=$?
[ $rc -eq 130 ] || fail "SIGINT during a call: exit $rc, expected 130"
grep -q '"exit_code": 130' "$d/int.json" || fail "SIGINT during a call: the report's exit code"
echo "ok: SIGINT during a call"
# A write just before an output's start lands in its canary, checked after the call.
rm -f "$d/count"
MHC_HOSTILE_COUNT=$d/count MHC_HOSTILE=before timeout 60 "$bin" "${run[@]}" > "$d/out" 2>&1
[ $? -eq 1 ] || fail "before: exit $?, expected 1"
grep -q "FAIL case 1 (seed 2): first divergent stage 'kernel': .*hc_pre wrote before the start of its output 1 (16 floats)" \
  "$d/out" || fail "before: no failure naming the output"
grep -q "check: FAIL (1 of 3 cases failed)" "$d/out" || fail "before: the other cases did not pass"
echo "ok: before"
rm -f "$d/count"
MHC_HOSTILE_COUNT=$d/count MHC_HOSTILE=segv MHC_HOSTILE_AT=1 timeout 60 "$bin" "${run[@]}" > "$d/out" 2>&1
[ $? -eq 1 ] || fail "segv on a second run: exit $?, expected 1"
grep -q "FAIL case 0 (seed 1): first divergent stage 'kernel': on a second run of the case: .*SIGSEGV" \
  "$d/out" || fail "segv on a second run: case 0 not failed with it"
echo "ok: segv on a second run"
# Wrong on a case's second run only: both runs are judged, and the case fails.
rm -f "$d/count"
MHC_HOSTILE_COUNT=$d/count MHC_HOSTILE=wrong MHC_HOSTILE_AT=3 timeout 60 "$bin" "${run[@]}" > "$d/out" 2>&1
[ $? -eq 1 ] || fail "wrong on a second run: exit $?, expected 1"
grep -q "FAIL case 1 (seed 2): first divergent stage 'y'" "$d/out" ||
  fail "wrong on a second run: case 1 not failed at y"
grep -q "on the second run: " "$d/out" || fail "wrong on a second run: the reason does not say so"
grep -q "check: FAIL (1 of 3 cases failed; non-deterministic" "$d/out" ||
  fail "wrong on a second run: the summary"
echo "ok: wrong on a second run"
# Misbehaving while its table is read: the harness says so and exits 2, the way it does for a
# plug-in that cannot be loaded. (A hang there is killed after 10 s: not run here, for time.)
for mode in segv:SIGSEGV abort:SIGABRT exit0:"ended its process (exit code 0)"; do
  name=${mode%%:*} want=${mode#*:}
  MHC_HOSTILE_LOAD=$name timeout 60 "$bin" "${run[@]}" > "$d/out" 2>&1
  rc=$?
  [ $rc -eq 2 ] || fail "load $name: exit $rc, expected 2"
  grep -q "plug-in $plugin .*$want.* while its table was read" "$d/out" ||
    fail "load $name: no error naming the plug-in and '$want'"
  echo "ok: load $name"
done
printf 'kernels plugin:%s\nops pre\ncases 3\ntokens 2\ndim 8\n' "$plugin" > "$d/suite"
MHC_HOSTILE=none "$bin" gate --suite "$d/suite" --baseline "$d/base.json" --update > "$d/out" 2>&1 ||
  fail "recording the baseline"
rm -f "$d/count"
MHC_HOSTILE_COUNT=$d/count MHC_HOSTILE=exit0 "$bin" gate --suite "$d/suite" --baseline "$d/base.json" --junit "$d/j.xml" \
  --kernel-timeout 3 > "$d/out" 2>&1
rc=$?
[ $rc -eq 1 ] || fail "gate with exit(0) in a kernel: exit $rc, expected 1"
grep -q 'failures="[1-9]' "$d/j.xml" || fail "the JUnit file does not count the failure"
echo "hostile plug-ins: ok"
