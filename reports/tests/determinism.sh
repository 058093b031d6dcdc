#!/usr/bin/env bash
# determinism.sh MHC_VERIFY: the same command twice gives byte-identical JSON once the timing
# fields (meta.started, meta.finished, meta.wall_s, each case's seconds) are blanked; 1 and 2
# threads give the same entries (the whole report but meta and those times).
set -eu
bin=$1
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
args=(check --kernel cpu-fused --op boundary --cases 2 --tokens 5 --dim 256 --seed 11)
margs=(check --kernel mutant:rms_of_sum --op mixes --cases 2 --tokens 3 --dim 64 --save-failures '')
# The same path each time: the command line is part of the report.
run() { "$bin" "$@" --json "$d/r.json" > /dev/null || true; }
run "${args[@]}" --threads 1 && mv "$d/r.json" "$d/a.json"
run "${args[@]}" --threads 1 && mv "$d/r.json" "$d/b.json"
run "${args[@]}" --threads 2 && mv "$d/r.json" "$d/c.json"
run "${margs[@]}" --threads 1 && mv "$d/r.json" "$d/m1.json"
run "${margs[@]}" --threads 2 && mv "$d/r.json" "$d/m2.json"
blank() { sed -E 's/^( *"(started|finished|wall_s|seconds)": ).*$/\1null,/' "$1"; }
cmp <(blank "$d/a.json") <(blank "$d/b.json")
entries() { /usr/bin/python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); del r["meta"]
for e in r["entries"]:
    for c in e["cases"]: del c["seconds"]
print(json.dumps(r, sort_keys=True))' "$1"; }
cmp <(entries "$d/a.json") <(entries "$d/c.json")
cmp <(entries "$d/m1.json") <(entries "$d/m2.json")
grep -q '"state": "fail"' "$d/m1.json"
# The blanking is what makes them equal: the raw files differ only in those lines.
diff "$d/a.json" "$d/b.json" | grep '^[<>]' | grep -vE '"(started|finished|wall_s|seconds)"' && exit 1
echo "deterministic: ok"
