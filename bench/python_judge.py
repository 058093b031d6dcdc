"""In-process mhc_verify.judge against the file path (write a fixture, run `mhc-verify compare`)
on the same case: a 4-token fp32 boundary at V4.1 sizes (d=5120), our cpu kernel's outputs.

PYTHONPATH=build/python python3 bench/python_judge.py build/bin/mhc-verify [repeats]
Prints the median wall time of each path and their ratio."""
import statistics
import subprocess
import sys
import tempfile
import time

import h5py

import mhc_verify

BIN = sys.argv[1]
REPEATS = int(sys.argv[2]) if len(sys.argv) > 2 else 20
tmp = tempfile.mkdtemp()
case = f"{tmp}/case.h5"
subprocess.run([BIN, "capture", "--op", "boundary", "--tokens", "4", "--out", case], check=True,
               capture_output=True)
with h5py.File(case) as f:
    config = {k: v.item() for k, v in f["config"].attrs.items()}
    inputs = {k: f["inputs"][k][()] for k in f["inputs"]}
    params = {k: f["params"][k][()] for k in f["params"]}
    outputs = {k: f["outputs"][k][()] for k in f["outputs"]}


def in_process():
    assert mhc_verify.judge("boundary", config, inputs, outputs, params, save_dir=None).passed


def through_a_file():
    path = f"{tmp}/again.h5"
    with h5py.File(path, "w") as f:  # what a test writing fixtures by hand does
        f.attrs.update({"schema": "mhc-fixture/1", "op": "boundary", "precision": "fp32"})
        f.create_group("config").attrs.update(config)
        for group, tensors in (("inputs", inputs), ("params", params), ("outputs", outputs)):
            for k, v in tensors.items():
                f[f"{group}/{k}"] = v
    p = subprocess.run([BIN, "compare", path], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr


def median_ms(fn):
    fn()
    times = []
    for _ in range(REPEATS):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


a, b = median_ms(in_process), median_ms(through_a_file)
print(f"judge in process: {a:.2f} ms; fixture + compare: {b:.2f} ms; ratio {b / a:.1f}x "
      f"(median of {REPEATS})")


def conversion_only():  # the same arrays through the Python side, judging only `x` (no projection)
    assert mhc_verify.judge("boundary", config, inputs, {"x": outputs["x"]}, params,
                            save_dir=None).passed


c = median_ms(conversion_only)
print(f"judging only x (hc_post, no 20480-term projection): {c:.2f} ms")
