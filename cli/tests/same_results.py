#!/usr/bin/python3
"""same_results.py A.json B.json [ID ...]: two reports of one campaign (run whole and merged from
its shards, or run on different thread counts) hold the same results: the same entries (as a set,
by id: shards list theirs in turn), each with the same cases, verdicts, stage aggregates, plots'
samples, Sinkhorn curves and facts; the same exit code and summary. The metadata (command line,
times, threads, shard) may differ, and so may the cases' judgement times and a shard's REPRO
lines by their ` --shards 1` (which pins a rerun unsharded in the shard's environment). The
entries IDs are of kernels that are not deterministic by design (a sum in an order drawn anew on
every call): for them the verdicts must agree, case by case, not the values."""
import json
import sys

whole, merged = (json.load(open(p)) for p in sys.argv[1:3])
assert merged["complete"], "the merged report is incomplete"
for key in ("exit_code", "summary"):
    assert whole[key] == merged[key], (key, whole[key], merged[key])
a = {e["id"]: e for e in whole["entries"]}
b = {e["id"]: e for e in merged["entries"]}
assert a.keys() == b.keys(), ("entries", sorted(a.keys() ^ b.keys()))
for e in list(a.values()) + list(b.values()):  # timing fields
    for c in e["cases"]:
        c.pop("seconds", None)
        if c.get("repro", "").endswith(" --shards 1"):
            c["repro"] = c["repro"][:-len(" --shards 1")]
for id_, e in a.items():
    if id_ in sys.argv[3:]:
        states = lambda x: [(c["index"], c["state"]) for c in x["cases"]]
        assert states(e) == states(b[id_]) and e["ok"] == b[id_]["ok"], (id_, "verdicts")
        continue
    for key in e:
        assert e[key] == b[id_][key], (id_, key, e[key], b[id_][key])
cases = sum(len(e["cases"]) for e in a.values())
print("same results: %d entries, %d cases" % (len(a), cases))
