"""The second tier's false alarms, measured: every legitimate kernel (ours and the catalogue's) on
generated V4.1-size cases of each op the tier models, in parallel shards of `mhc-verify check`,
then per kernel, op and stage the largest z (max and root mean square) and the stages flagged;
per op and stage, how many judgements' largest z exceed 1, 1.5, 2, 2.5 and 3 (the tail the
limits stand on), and the largest fraction of its bound a legitimate kernel used (error / bound,
every stage: how far below the bounds a threshold could go at all).

python3 bench/calibrate_noise.py MHC_VERIFY [cases per shard] [shards] [jobs] [kernels...]
Prints one line per (kernel, op, stage) and a total; exit 1 if any legitimate stage was flagged.
The environment's OPS (comma-separated) and PRECISION (a declaration) choose the ops (default
every op the tier models, and pre and post) and the declaration (default fp32).
"""
import collections
import concurrent.futures
import json
import os
import subprocess
import sys
import tempfile

BIN = sys.argv[1]
CASES = int(sys.argv[2]) if len(sys.argv) > 2 else 100
SHARDS = int(sys.argv[3]) if len(sys.argv) > 3 else 1
JOBS = int(sys.argv[4]) if len(sys.argv) > 4 else os.cpu_count()
LEGIT = ["cpu", "cpu-fused"] + [
    line.split()[0] for line in
    subprocess.run([BIN, "mutants", "--list"], capture_output=True, text=True).stdout.splitlines()
    if line.split()[1:2] == ["legitimate"]]
KERNELS = sys.argv[5:] or LEGIT
# pre, post: the bounds only
OPS = os.environ.get("OPS", "split_sinkhorn,mixes,boundary,pre,post,pre_backward,post_backward"
                     ).split(",")
PRECISION = os.environ.get("PRECISION", "fp32")
tmp = tempfile.mkdtemp()


def shard(job):
    kernel, op, s = job
    out = f"{tmp}/{kernel.replace(':', '_')}_{op}_{s}.json"
    # seeds: shard s covers [1 + s * CASES, (s + 1) * CASES]
    p = subprocess.run([BIN, "check", "--kernel", kernel, "--op", op, "--cases", str(CASES),
                        "--tokens", "4", "--seed", str(1 + s * CASES), "--threads", "1",
                        "--precision", PRECISION, "--save-failures", "",
                        "--json", out], capture_output=True, text=True)
    if p.returncode not in (0, 1):
        raise RuntimeError(f"{kernel} {op} shard {s}: exit {p.returncode}: {p.stderr[-500:]}")
    return kernel, op, out


stats = collections.defaultdict(lambda: {"n": 0, "flagged": 0, "z_max": 0.0, "z_rms": 0.0,
                                         "other_fail": 0, "unmodelled": 0})
LEVELS = (1, 1.5, 2, 2.5, 3)
tail = collections.defaultdict(lambda: [0] * (len(LEVELS) + 1))  # (op, stage): judged, > levels
bound_used = collections.defaultdict(lambda: (0.0, ""))  # (op, stage): largest ratio, kernel
jobs = [(k, op, s) for k in KERNELS for op in OPS for s in range(SHARDS)]
with concurrent.futures.ThreadPoolExecutor(JOBS) as pool:
    for kernel, op, path in pool.map(shard, jobs):
        for entry in json.load(open(path))["entries"]:
            for case in entry["cases"]:
                for st in case["stages"]:
                    a = stats[(kernel, op, st["stage"])]
                    if st["state"] == "fail" and st["rule"] != "noise":
                        a["other_fail"] += 1
                    r = st.get("ratio_max")
                    if r is not None and r > bound_used[(op, st["stage"])][0]:
                        bound_used[(op, st["stage"])] = (r, f"{kernel} seed {case['seed']}")
                    n = st.get("noise")
                    if n is None:
                        continue
                    if n["elements"] == 0:
                        a["unmodelled"] += 1
                        continue
                    a["n"] += 1
                    a["flagged"] += st["rule"] == "noise"
                    a["z_max"] = max(a["z_max"], n["z_max"])
                    a["z_rms"] = max(a["z_rms"], n["z_rms"])
                    t = tail[(op, st["stage"])]
                    t[0] += 1
                    for i, level in enumerate(LEVELS):
                        t[i + 1] += n["z_max"] > level
for (op, stage), t in sorted(tail.items()):
    print(f"tail {op:15s} {stage:14s} judged {t[0]:6d} max z above " +
          " ".join(f"{level}: {c}" for level, c in zip(LEVELS, t[1:])))
for (op, stage), (r, who) in sorted(bound_used.items()):
    print(f"bound used {op:15s} {stage:14s} largest error / bound {r:.3g} ({who})")
total = collections.Counter()
for (kernel, op, stage), a in sorted(stats.items()):
    if a["n"] == 0 and a["unmodelled"] == 0:
        continue
    print(f"{kernel:34s} {op:15s} {stage:14s} judged {a['n']:6d} unmodelled {a['unmodelled']:5d} "
          f"flagged {a['flagged']:4d} other fails {a['other_fail']:3d} "
          f"max z {a['z_max']:.3g} max rms {a['z_rms']:.3g}")
    total["judged"] += a["n"]
    total["flagged"] += a["flagged"]
    total["unmodelled"] += a["unmodelled"]
    total["other_fail"] += a["other_fail"]
    total["z_max"] = max(total["z_max"], a["z_max"])
    total["z_rms"] = max(total["z_rms"], a["z_rms"])
print(f"total: {total['judged']} stage judgements by the second tier ({total['unmodelled']} "
      f"unmodelled), {total['flagged']} flagged; largest z {total['z_max']:.3g}, largest rms "
      f"{total['z_rms']:.3g}; {total['other_fail']} stages failed by other rules")
sys.exit(1 if (total["flagged"] or total["other_fail"]) and all(k in LEGIT for k in KERNELS)
         else 0)
