#!/usr/bin/env bash
# interrupt.sh MHC_VERIFY SOURCE_DIR SIGNAL: a long check interrupted by SIGNAL (INT or TERM) once
# its report holds a finished case: it exits 128 + signal, its summary says it was interrupted, and
# it leaves a valid report of the finished cases, marked incomplete and interrupted.
set -u
bin=$1 src=$2 sig=$3
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
"$bin" check --kernel cpu --op boundary --cases 100000 --tokens 2 --dim 512 --json "$d/r.json" \
  --junit "$d/r.xml" > "$d/out" 2>&1 &
pid=$!
for _ in $(seq 1 300); do  # up to 30 s for the first cases to reach the report
  grep -q '"index": 1,' "$d/r.json" 2>/dev/null && break
  sleep 0.1
done
kill -s "$sig" $pid
wait $pid
rc=$?
want=$([ "$sig" = INT ] && echo 130 || echo 143)
[ $rc -eq "$want" ] || { echo "FAIL: exit $rc, expected $want"; cat "$d/out"; exit 1; }
# The summary says the run was interrupted, not that it passed.
grep -Eq "^check: INTERRUPTED by SIG$sig \(0 of [0-9]+ cases failed\)" "$d/out" && ! grep -q "^check: PASS" "$d/out" ||
  { echo "FAIL: the summary does not say the run was interrupted"; cat "$d/out"; exit 1; }
/usr/bin/python3 "$src/reports/tests/check_reports.py" "$src/reports/schema/mhc-report-1.json" \
  --json "$d/r.json" --junit "$d/r.xml" || exit 1
# A CI page that reads the JUnit file shows the run as an error, not as its passing cases.
grep -q "<error message=\"the run was interrupted by SIG$sig" "$d/r.xml" ||
  { echo "FAIL: the JUnit file does not say the run was interrupted"; cat "$d/r.xml"; exit 1; }
/usr/bin/python3 - "$d/r.json" "SIG$sig" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
cases = r["entries"][0]["cases"]
assert r["complete"] is False and r["interrupted"] == sys.argv[2], (r["complete"], r["interrupted"])
assert 2 <= len(cases) < 100000 and [c["index"] for c in cases] == list(range(len(cases)))
assert all(c["state"] == "pass" for c in cases)
print(f"interrupted by {sys.argv[2]} after {len(cases)} cases: report valid")
PY
