#!/usr/bin/env bash
# formats.sh MHC_VERIFY SOURCE_DIR: every subcommand writes its reports; each must check out
# (check_reports.py: JSON against the schema, JUnit counts, HTML well-formed with plots).
set -u
bin=$1 src=$2
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
check="/usr/bin/python3 $src/reports/tests/check_reports.py $src/reports/schema/mhc-report-1.json"
fail=0
run() {  # run NAME EXPECTED_RC PLOTS(plots|-) ARGS...
  local name=$1 want=$2 plots=
  [ "$3" = plots ] && plots=--plots
  shift 3
  "$bin" "$@" --json "$d/$name.json" --md "$d/$name.md" --html "$d/$name.html" --junit "$d/$name.xml" \
    > "$d/$name.out" 2>&1
  local rc=$?
  if [ "$rc" -ne "$want" ]; then echo "FAIL $name: exit $rc, expected $want"; cat "$d/$name.out"; fail=1; return; fi
  if ! $check --json "$d/$name.json" --junit "$d/$name.xml" --html "$d/$name.html" $plots \
    --md "$d/$name.md"; then
    echo "FAIL $name: reports"; fail=1; return
  fi
  echo "ok $name"
}
printf 'not hdf5' > "$d/bad.h5"
run check 0 plots check --kernel cpu-fused --op boundary --cases 2 --tokens 3 --dim 256
run check_fail 1 plots check --kernel mutant:col_eps_outside --op split_sinkhorn --cases 2 --tokens 2 --hc-eps 0.01 --save-failures ''
run check_block 0 plots check --kernel cpu --op block --cases 1 --tokens 3 --dim 32 --heads 2 --head-dim 4 --experts 3 --inter 8
run compare 0 plots compare "$src"/fixtures/data/*.h5
run compare_invalid 2 plots compare "$src/fixtures/data/v41_pre_fp32.h5" "$d/bad.h5"
run selfcheck 0 - selfcheck --cases 2 --n 3 --dim 17 --iters 5
run fuzz 0 plots fuzz sinkhorn --cases 5000
# A self-test as expected is condensed, without plots (render_html.cpp).
run mutants 0 - mutants --cases 10
run capture 0 - capture --kernel cpu --op pre --dim 64 --out "$d/cap.h5"
# The failing check: its JSON names the failing case, its REPRO and the first divergent stage.
/usr/bin/python3 - "$d/check_fail.json" <<'PY' || fail=1
import json, sys
r = json.load(open(sys.argv[1]))
e = r["entries"][0]
c = [c for c in e["cases"] if c["state"] == "fail"]
assert r["exit_code"] == 1 and r["complete"] and not e["ok"], "verdict"
assert c and c[0]["repro"].startswith("mhc-verify check --kernel mutant:col_eps_outside"), "repro"
assert c[0]["first_divergent"] == "comb", c[0]["first_divergent"]
assert e["sinkhorn"] and len(e["sinkhorn"][0]["residual"]) == 2 * 20, "sinkhorn curve"
print("ok check_fail contents")
PY
# merge: the parts as one report; a part read back and written again keeps its entries exactly.
run merged 1 plots merge "$d/check.json" "$d/check_fail.json" "$d/compare.json" "$d/mutants.json"
"$bin" merge "$d/check.json" --json "$d/again.json" > /dev/null || fail=1
/usr/bin/python3 - "$d/check.json" "$d/again.json" <<'PY' || fail=1
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
assert a["entries"] == b["entries"], "entries changed in the round trip"
print("ok merge round trip")
PY
exit $fail
