"""How precise the diagnosis is on the wrong kernels (bench/README.md, "The diagnosis").

python3 bench/diagnosis.py CASES BIN [BIN2]: every wrong kernel of `BIN mutants --list` that is not
a Block's or a backward's, on the boundary and on the op it first changes (split_sinkhorn or
mixes), and three backward ones, CASES cases each (4 tokens, d = 256, one thread). For each, the
cases that fail, those whose diagnosis names the kernel's catalogued deviation, those that name it
alone, and those that name another deviation; with BIN2, the same beside it (same cases).
"""
import json
import os
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

cases, bins = int(sys.argv[1]), [os.path.abspath(b) for b in sys.argv[2:]]
listing = subprocess.run([bins[0], "mutants", "--list"], capture_output=True, text=True).stdout
runs = []
for line in listing.splitlines():
    m = re.match(r"mutant:(\S+)\s+wrong(?:; diagnosis: (\S+))?", line)
    if not m or m.group(1).startswith(("block_", "backward_")):
        continue
    name, explains = m.group(1), m.group(2) or "none"
    first = "mixes" if re.search(r"rms|d_major|accumulation|products|rsqrt|streams|mixes", name) \
        else "split_sinkhorn"
    runs += [(name, explains, first), (name, explains, "boundary")]
runs += [("backward_bf16_saved_mixes", "none", "mixes_backward"),
         ("backward_tf32_products", "none", "boundary_backward"),
         ("backward_den_without_eps", "none", "mixes_backward")]
out = tempfile.mkdtemp()


def one(job):
    k, (name, explains, op) = job
    f = os.path.join(out, f"{k}_{name}_{op}.json")
    subprocess.run([bins[k], "check", "--kernel", "mutant:" + name, "--op", op, "--cases",
                    str(cases), "--tokens", "4", "--dim", "256", "--threads", "1", "--json", f],
                   capture_output=True, cwd=out)
    failed = named = alone = other = 0
    for c in json.load(open(f))["entries"][0]["cases"]:
        if c["state"] != "fail":
            continue
        failed += 1
        text = c["diagnosis"]
        names = [w for w in re.findall(r"[\w+\-.]+", text.split(" with ", 1)[1]) if w != "or"] \
            if text.startswith("matches the oracle with ") else []
        named += explains in names
        alone += names == [explains]
        other += any(n != explains for n in names)
    return f"{failed} {named} {alone} {other}"


jobs = [(k, r) for r in runs for k in range(len(bins))]
with ThreadPoolExecutor(2) as ex:
    res = list(ex.map(one, jobs))
for k, b in enumerate(bins):
    print(f"BIN{k + 1}: {b}")
print("| kernel (its deviation) | op | " +
      " | ".join(f"BIN{k + 1}: failed, named, alone, other" for k in range(len(bins))) + " |")
print("| --- | --- |" + " --- |" * len(bins))
for i, (name, explains, op) in enumerate(runs):
    cells = res[i * len(bins):(i + 1) * len(bins)]
    print(f"| {name} ({explains}) | {op} | " + " | ".join(cells) + " |")
