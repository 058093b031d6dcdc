#!/usr/bin/python3
"""shards.py A.json B.json: the reports of fuzz shards 0 and 1 of 2 each tried their 3000 cases,
and every case they report (the worst ones) is one of their own: i % 2 == shard."""
import json
import sys

for shard, path in enumerate(sys.argv[1:3]):
    e = json.load(open(path))["entries"][0]
    s, f = e["settings"], e["facts"]
    assert (s["shard"], s["shards"], f["cases"]) == (str(shard), "2", "3000"), (path, s, f)
    worst = [int(v.split(":")[0].split()[1]) for k, v in f.items() if k.startswith("worst_row_")]
    assert worst and all(i % 2 == shard for i in worst), (path, worst)
print("shards: disjoint")
