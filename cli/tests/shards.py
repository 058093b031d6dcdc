#!/usr/bin/python3
"""shards.py A.json B.json: the reports of fuzz shards 0 and 1 of 2 each tried their 3000 cases,
every case they report (the worst ones) is one of their own: i % 2 == shard, and together they
ran the kernels on the cases an unsharded run of 6000 would: i % 64 == 0, 94 of them."""
import json
import sys

for shard, path in enumerate(sys.argv[1:3]):
    e = json.load(open(path))["entries"][0]
    s, f = e["settings"], e["facts"]
    assert (s["shard"], s["shards"], f["cases"]) == (str(shard), "2", "3000"), (path, s, f)
    worst = [int(v.split(":")[0].split()[1]) for k, v in f.items() if k.startswith("worst_row_")]
    assert worst and all(i % 2 == shard for i in worst), (path, worst)
kernel_cases = [int(json.load(open(p))["entries"][0]["facts"]["kernel_cases"]) for p in sys.argv[1:3]]
assert kernel_cases == [len(range(0, 6000, 64)), 0], kernel_cases  # the multiples of 64 are even
print("shards: disjoint")
