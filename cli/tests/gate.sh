#!/usr/bin/env bash
# gate.sh MHC_VERIFY LIBDIR: the CI gate on the example plug-ins, as a kernel repository would use
# it: record a baseline with the faithful plug-in, then gate the same path holding (1) the same
# kernel: pass; (2) the planted bug (eps inside the softmax division): fail on verdicts, with REPRO
# lines; (3) the faithful kernel against a baseline whose ratios were 10x smaller: REGRESSED;
# (4) the faithful kernel against a baseline whose errors were 10x smaller (ratios unchanged):
# REGRESSED on the error, however far below the bound; (5) a kernel the baseline has never seen:
# its entries NEW, not REGRESSED; (6) the same plug-in moved: its baseline still applies.
set -u
bin=$1 lib=$2
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
fail() { echo "FAIL: $*"; cat "$d/out" 2>/dev/null; exit 1; }
cat > "$d/suite" <<'SUITE'
ops split_sinkhorn boundary pre   # the pieces the planted bug touches, and one it does not
hc-eps 1e-6 1e-2
cases 2
tokens 3
dim 512
SUITE
cp "$lib/mhc_example.so" "$d/kernels.so"
gate() { "$bin" gate --suite "$d/suite" --kernel "plugin:$d/kernels.so" "$@" > "$d/out" 2>&1; }
gate --baseline "$d/base.json" --update; [ $? -eq 0 ] || fail "update"
gate --baseline "$d/base.json" --junit "$d/pass.xml"; [ $? -eq 0 ] || fail "faithful plug-in did not pass"
grep -q "gate: PASS" "$d/out" || fail "no PASS line"
cp "$lib/mhc_example_planted_bug.so" "$d/kernels.so"
gate --baseline "$d/base.json" --junit "$d/bug.xml"; [ $? -eq 1 ] || fail "planted bug not caught"
grep -q "first divergent stage 'comb'" "$d/out" || fail "not caught at comb"
grep -q "REPRO: mhc-verify check --kernel plugin:$d/kernels.so --op split_sinkhorn" "$d/out" || fail "no REPRO"
grep -q "DIAGNOSIS: matches the oracle with softmax_eps_in_sum" "$d/out" || fail "not diagnosed"
# the planted bug may not touch pre: those entries must still pass
grep -Eq "gate plugin:.* pre fp32 hc_eps=1e-06 .* +2 +0 " "$d/out" || fail "pre should pass"
cp "$lib/mhc_example.so" "$d/kernels.so"
/usr/bin/python3 - "$d/base.json" "$d/small.json" <<'PY'
import json, sys
b = json.load(open(sys.argv[1]))
for e in b["entries"].values():
    for s in e["stages"].values():
        s["ratio_max"] = s["ratio_max"] / 10 if isinstance(s["ratio_max"], float) else s["ratio_max"]
json.dump(b, open(sys.argv[2], "w"))
PY
gate --baseline "$d/small.json"; [ $? -eq 1 ] || fail "regression not caught"
grep -q "^REGRESSED gate plugin:.* stage .*: ratio_max .* -> " "$d/out" || fail "no REGRESSED line"
grep -q "^  REPRO: mhc-verify check --kernel plugin:" "$d/out" || fail "no REPRO for the regression"
/usr/bin/python3 - "$d/base.json" "$d/quiet.json" <<'PY'
import json, sys
b = json.load(open(sys.argv[1]))
for e in b["entries"].values():
    for s in e["stages"].values():
        s["errors"] = [x / 10 if isinstance(x, float) else x for x in s["errors"]]
json.dump(b, open(sys.argv[2], "w"))
PY
gate --baseline "$d/quiet.json"; [ $? -eq 1 ] || fail "a 10x error growth not caught"
grep -q "^REGRESSED gate plugin:.* stage .*: error grew .*x (normwise" "$d/out" || fail "no error line"
! grep -q ": ratio_max .* -> " "$d/out" || fail "the ratios did not change"
cp "$lib/mhc_example_planted_bug.so" "$d/other.so"
"$bin" gate --suite "$d/suite" --kernel "plugin:$d/other.so" --baseline "$d/base.json" > "$d/out" 2>&1
[ $? -eq 1 ] || fail "an entry without baseline passed"
grep -Eq "^gate plugin:example-planted-bug .* NEW$" "$d/out" || fail "no NEW in the table"
! grep -q "REGRESSED" "$d/out" || fail "a new entry called REGRESSED"
# Entries are the plug-in's name in its table: the same library elsewhere, by a relative path,
# meets its baseline; two libraries of one name in one run are refused.
mkdir "$d/moved" && cp "$lib/mhc_example.so" "$d/moved/renamed.so"
(cd "$d" && "$bin" gate --suite suite --kernel plugin:moved/renamed.so --baseline base.json) > "$d/out" 2>&1
[ $? -eq 0 ] || fail "the same plug-in at another path did not meet its baseline"
grep -Eq "^gate plugin:example pre fp32 hc_eps=1e-06 " "$d/out" || fail "entry not named by the table"
"$bin" gate --suite "$d/suite" --kernel "plugin:$d/moved/renamed.so" --kernel "plugin:$d/kernels.so" \
  --baseline "$d/base.json" > "$d/out" 2>&1
[ $? -eq 2 ] || fail "two plug-ins of one name accepted"
grep -q "are both plugin:example to the baseline" "$d/out" || fail "the collision is not named"
# --update refuses to record failing verdicts
cp "$lib/mhc_example_planted_bug.so" "$d/kernels.so"
gate --baseline "$d/bad.json" --update; [ $? -eq 1 ] && [ ! -e "$d/bad.json" ] || fail "recorded a failing baseline"
echo "gate: ok"
