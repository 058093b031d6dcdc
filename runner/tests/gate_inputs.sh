#!/usr/bin/env bash
# gate_inputs.sh BIN SOURCE_DIR: suites and baselines that are not what they claim are refused on
# load, before any case runs (exit 2, one line naming the file and what was expected); a baseline
# recorded with other settings does not vouch for a suite.
set -u
bin=$1 src=$2
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
expect2() {  # expect2 PATTERN ARGS...: exit 2 within 20 s, the pattern on stderr
  local pattern=$1
  shift
  timeout 20 "$bin" gate "$@" > "$d/out" 2> "$d/err"
  local rc=$?
  [ $rc -eq 2 ] && grep -q -- "$pattern" "$d/err" || fail "gate $*: exit $rc, expected 2 and /$pattern/: $(cat "$d/err")"
  grep -q "cases each" "$d/out" && fail "gate $*: cases ran before the input was refused"
  echo "ok: $pattern"
}
suite=$src/gate/default.suite base=$src/gate/baseline.json
printf 'kernels cpu\nops pre\ncases 1\ntokens 1\ndim 16\n' > "$d/small.suite"

expect2 "not a regular file (a device" --suite /dev/zero --baseline "$base"
mkfifo "$d/fifo"
expect2 "not a regular file (a FIFO)" --suite "$suite" --baseline "$d/fifo"
: > "$d/empty.suite"
expect2 "no settings" --suite "$d/empty.suite" --baseline "$base"
printf 'kernels cpu\ncases 1\nkernels cpu-fused\n' > "$d/twice.suite"
expect2 "twice.suite:3: 'kernels' is set again (line 1 set it)" --suite "$d/twice.suite" --baseline "$base"
edit() {  # edit OUT PYTHON: the shipped baseline changed by PYTHON (b is the JSON)
  /usr/bin/python3 - "$base" "$1" "$2" <<'PY'
import json, sys
b = json.load(open(sys.argv[1]))
first = next(iter(b["entries"].values()))
stage = next(iter(first["stages"].values()))
exec(sys.argv[3])
json.dump(b, open(sys.argv[2], "w"))
PY
}
edit "$d/abc.json" 'stage["ratio_max"] = "abc"'
expect2 "/ratio_max: expected a ratio" --suite "$suite" --baseline "$d/abc.json"
edit "$d/huge.json" 'b["allowance"] = 1e308'
expect2 "/allowance: expected a number in" --suite "$suite" --baseline "$d/huge.json"
edit "$d/nostages.json" 'first["stages"] = {}'
expect2 "/stages: expected an object of at least one stage" --suite "$suite" --baseline "$d/nostages.json"
edit "$d/negative.json" 'stage["states"]["pass"] = -3'
expect2 "/states/pass: expected a count" --suite "$suite" --baseline "$d/negative.json"
edit "$d/bogus_state.json" 'stage["states"]["bogus"] = 1'
expect2 "/states/bogus: expected a state's name" --suite "$suite" --baseline "$d/bogus_state.json"
edit "$d/negative_error.json" 'stage["errors"] = [-1.0] * len(stage["errors"])'
expect2 "/errors/0: expected an error >= 0" --suite "$suite" --baseline "$d/negative_error.json"
edit "$d/string_error.json" 'stage["errors"] = ["abc"]'
expect2 "/errors/0: expected an error >= 0" --suite "$suite" --baseline "$d/string_error.json"
edit "$d/long_errors.json" 'stage["errors"] = [0.0] * (first["cases"] + 1)'
expect2 "/errors: expected an array of at most the entry's cases" --suite "$suite" \
  --baseline "$d/long_errors.json"
edit "$d/null.json" 'b["entries"] = None'
expect2 "/entries: expected an object" --suite "$suite" --baseline "$d/null.json"
# The shipped baseline (dim 5120) for a dim-16 suite: its entries are new, the gate fails.
"$bin" gate --suite "$d/small.suite" --baseline "$base" > "$d/out" 2>&1; rc=$?
[ $rc -eq 1 ] && grep -q "NEW gate cpu pre fp32 hc_eps=1e-06 tokens=1 cases=1 dim=16" "$d/out" ||
  fail "a dim-16 suite against a dim-5120 baseline: exit $rc: $(tail -3 "$d/out")"
echo "gate inputs: ok"
