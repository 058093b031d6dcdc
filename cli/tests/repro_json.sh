#!/usr/bin/env bash
# repro_json.sh BIN ARGS...: the run's JSON report (ARGS plus --json) holds a failing case whose
# REPRO line, run in the same environment (a shard's, when the test sets one), fails again.
set -u
bin=$1
shift
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
"$bin" "$@" --json "$d/r.json" > "$d/out" 2>&1
repro=$(/usr/bin/python3 - "$d/r.json" <<'PY'
import json, sys
for e in json.load(open(sys.argv[1]))["entries"]:
    for c in e["cases"]:
        if c["state"] == "fail" and c["repro"]:
            print(c["repro"])
            sys.exit(0)
PY
)
[ -n "$repro" ] || { echo "FAIL: no failing case with a REPRO line"; cat "$d/out"; exit 1; }
echo "REPRO: $repro"
eval "\"\$bin\" ${repro#mhc-verify }" > "$d/again" 2>&1  # the line is quoted for the shell
rc=$?
[ "$rc" -eq 1 ] || { echo "FAIL: the REPRO line exited $rc"; cat "$d/again"; exit 1; }
grep -m1 '^FAIL case' "$d/again"
