#!/usr/bin/env python3
"""One table of the boundary on the GPU from scripts/gpu-run's outputs: mhc-bench-cuda's rows
(bench.txt), PyTorch eager and torch.compile (torch.txt, bench/torch_boundary.py's lines) and the
differential campaigns' verdicts (campaign-*.txt), from one or more output folders (parts run
separately), with the tensor-copy shape that the device's bf16 rows from 16384 tokens ran (chosen
there by timing). A PyTorch cell reads 'oom' where PyTorch ran out of the device's memory at that
size, '-' where it was not timed. Usage: gpu_table.py OUT_DIR..."""
import glob
import os
import sys

outs = sys.argv[1:]


def lines(name):
    found = []
    for out in outs:
        path = os.path.join(out, name)
        if os.path.exists(path):
            found += open(path, errors="replace").read().splitlines()
    return found


ours = {}  # (dtype, tokens) -> columns of mhc-bench-cuda's first table
for line in lines("bench.txt"):
    f = line.split()
    if len(f) not in (11, 12, 14) or f[0] not in ("fp32", "bf16") or not f[1].isdigit():
        continue
    try:  # the first table's rows; the sweep's rows have words among their fields
        values = [float(v) for v in f[2:]]
    except ValueError:
        continue
    ours[(f[0], int(f[1]))] = dict(zip(
        ["fused", "unsplit", "repack", "base", "floor", "launch", "over", "fraction", "copy",
         "same copy", "queued", "host"], values))  # older runs' rows lack the last two or three
backward = {}  # (dtype, gradients, tokens) -> columns of mhc-bench-cuda's backward table
for line in lines("bench.txt"):
    f = line.split()
    if len(f) == 6:  # rows before the backward took bf16 streams: fp32
        f = ["fp32"] + f
    if len(f) == 7 and f[0] in ("fp32", "bf16") and f[1] in ("deterministic", "atomics") \
            and f[2].isdigit():
        backward[(f[0], f[1], int(f[2]))] = dict(
            zip(["ms", "floor", "over", "fraction"], map(float, f[3:])))
torch = {}  # (mode, dtype, tokens) -> ms, or "oom"; mode: eager, compile, backward-eager, ...
for line in lines("torch.txt"):  # also '<name> unavailable (PyTorch ...)': no row
    f = line.split()
    if len(f) >= 3 and f[0].startswith("torch-") and f[1].isdigit():
        parts = f[0].split("-")
        mode, dt = "-".join(parts[1:-2]), parts[-2]
        torch[(mode, {"float32": "fp32", "bfloat16": "bf16"}.get(dt, dt), int(f[1]))] = \
            "oom" if f[2] == "out-of-memory" else float(f[2]) * 1e3

print("== the boundary on the GPU, n=4 d=5120 (ms: CUDA events, median; floor: max(empty kernel, "
      "bytes / copy bandwidth); copy: fraction of copy bandwidth at (2n+2)d stream elements a token; "
      "same copy: a device-to-device copy of the same bytes, /copy: fused over it; queued: the "
      "device's time a call, calls queued back to back, median of 5 rounds; host: the host's time "
      "to queue a call, its clock)")
head = ("dtype", "tokens", "fused", "floor", "/floor", "copy", "same copy", "/copy", "queued",
        "host", "unsplit", "repacked", "eager", "compile", "x eager", "x compile")
print("%-5s %7s %9s %9s %7s %6s %9s %6s %9s %9s %9s %9s %9s %9s %8s %9s" % head)


def ms(v):  # a time, "oom" (PyTorch ran out of the device's memory) or none
    return "%9.4f" % v if isinstance(v, float) else "%9s" % (v or "-")


def ratio(a, b):
    return "%.1fx" % (a / b) if isinstance(a, float) and b else "-"


for dt in ("fp32", "bf16"):
    for T in sorted({k[1] for k in ours if k[0] == dt}):
        r = ours[(dt, T)]
        e, c = torch.get(("eager", dt, T)), torch.get(("compile", dt, T))
        same = r.get("same copy")
        print("%-5s %7d %s %s %7.2f %6.2f %s %6s %s %s %s %s %s %s %8s %9s" % (
            dt, T, ms(r["fused"]), ms(r["floor"]), r["over"], r["fraction"], ms(same),
            "%.2f" % (r["fused"] / same) if same else "-", ms(r.get("queued")),
            ms(r.get("host")), ms(r["unsplit"]), ms(r["repack"]), ms(e), ms(c),
            ratio(e, r["fused"]), ratio(c, r["fused"])))
for line in dict.fromkeys(l for l in lines("bench.txt") if l.startswith("fused bf16 from")):
    print(line)  # which tensor-copy shape this device's bf16 rows from 16384 tokens ran
if not torch:
    print("(PyTorch: not run, or no CUDA device for it)")
for dt in ("fp32", "bf16"):  # a table per stream dtype, its rows as mhc-bench-cuda's less dtype
    rows = sorted((k[1:], r) for k, r in backward.items() if k[0] == dt)
    if not rows:
        continue
    print("== the boundary's backward, %s streams (ms; PyTorch: autograd's backward alone)" % dt)
    print("%-13s %7s %9s %9s %7s %6s %9s %9s %8s %9s" % (
        "gradients", "tokens", "ms", "floor", "/floor", "copy", "eager", "compile", "x eager",
        "x compile"))
    for (kind, T), r in rows:
        e, c = torch.get(("backward-eager", dt, T)), torch.get(("backward-compile", dt, T))
        print("%-13s %7d %s %s %7.2f %6.2f %s %s %8s %9s" % (
            kind, T, ms(r["ms"]), ms(r["floor"]), r["over"], r["fraction"], ms(e), ms(c),
            ratio(e, r["ms"]), ratio(c, r["ms"])))
for path in sorted(p for out in outs for p in glob.glob(os.path.join(out, "campaign-*.txt"))):
    verdict = [l for l in open(path, errors="replace").read().splitlines() if l.startswith("check:")]
    print("campaign %-28s %s" % (os.path.basename(path)[9:-4], verdict[-1] if verdict else "no verdict"))
