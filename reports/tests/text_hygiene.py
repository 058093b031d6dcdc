"""Bytes from outside never break a run or its reports, and never reach the terminal raw.

text_hygiene.py BIN FIXTURE [PLUGIN HOSTILE]: FIXTURE is a passing capture. Its copy is named with a
newline, an ESC sequence, a byte that is not UTF-8, a right-to-left override and U+FFFE, and its
producer attribute holds bytes that are not UTF-8; `compare` must still pass it (exit 0), write
JSON that parses, JUnit XML and HTML that are well-formed UTF-8, and print the name escaped (no
forged line of its own). PLUGIN (the planted-bug example) copied to such a name: `check` prints
its path escaped, and the failing cases it saves have names no shell or terminal acts on. HOSTILE
(runner/tests/hostile_plugin.c) declaring such a name: `gate` prints it escaped.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

import h5py
import numpy as np

BIN, FIXTURE = sys.argv[1], sys.argv[2]
tmp = tempfile.mkdtemp(prefix="mhc_text_")
name = os.path.join(tmp.encode(), b"x\nPASS fake\x1b[31m \xff\xe2\x80\xae\xef\xbf\xbe.h5")
shutil.copy(FIXTURE, name)
with h5py.File(name, "r+") as f:
    f.attrs["producer"] = np.bytes_(b"torch \xff\xfe run")
out = {k: os.path.join(tmp, "r." + k) for k in ("json", "xml", "html", "md")}
p = subprocess.run([BIN.encode(), b"compare", name, b"--json", out["json"].encode(), b"--junit",
                    out["xml"].encode(), b"--html", out["html"].encode(), b"--md", out["md"].encode()],
                   capture_output=True)
stdout = p.stdout.decode("utf-8", "replace")
problems = []
if p.returncode != 0:
    problems.append(f"exit {p.returncode}: {p.stderr!r}")
if any(line.startswith("PASS fake") for line in stdout.splitlines()) or b"\x1b" in p.stdout:
    problems.append("the name reached the terminal raw: " + repr(stdout))
if "x\\x0APASS fake\\x1B[31m \\xFF\\u202E\\uFFFE.h5" not in stdout:
    problems.append("the name is not printed escaped: " + repr(stdout))
try:
    report = json.load(open(out["json"], encoding="utf-8"))
    producer = report["entries"][0]["facts"]["producer"]
    if "\\xFF\\xFE" not in producer:
        problems.append("JSON producer not escaped: " + repr(producer))
except Exception as e:  # noqa: BLE001
    problems.append(f"JSON: {e}")
try:
    ET.parse(out["xml"])
except Exception as e:  # noqa: BLE001
    problems.append(f"JUnit: {e}")
for k in ("html", "md"):
    try:
        open(out[k], encoding="utf-8").read()
    except Exception as e:  # noqa: BLE001
        problems.append(f"{k}: {e}")

if len(sys.argv) > 3:  # check and gate on a plug-in whose path is hostile
    kernel = os.path.join(tmp.encode(), b"k\x1b]0;title\x07\xe2\x80\xae\xc2\x9b31m.so")
    shutil.copy(sys.argv[3], kernel)
    saved = os.path.join(tmp, "saved")
    p = subprocess.run([BIN.encode(), b"check", b"--kernel", b"plugin:" + kernel, b"--op",
                        b"split_sinkhorn", b"--cases", b"1", b"--tokens", b"2", b"--hc-eps",
                        b"0.01", b"--save-failures", saved.encode()], capture_output=True)
    if p.returncode != 1:
        problems.append(f"check of the planted bug: exit {p.returncode}: {p.stderr!r}")
    for raw in (b"\x1b", b"\x07", b"\xe2\x80\xae", b"\xc2\x9b"):
        if raw in p.stdout:
            problems.append(f"check printed {raw!r} raw: {p.stdout!r}")
    for f in os.listdir(saved) if os.path.isdir(saved) else []:
        if any(not (c.isascii() and (c.isalnum() or c in "._+=,-")) for c in f):
            problems.append(f"check saved a case as {f!r}")
    if not os.path.isdir(saved) or not os.listdir(saved):
        problems.append("check saved no failing case")
    # Two plug-ins whose paths differ in a character the saved name replaces: two files.
    two = os.path.join(tmp, "two")
    for k in ("k\u00e4.so", "k\u00f6.so"):
        shutil.copy(sys.argv[3], os.path.join(tmp, k))
        subprocess.run([BIN, "check", "--kernel", "plugin:" + os.path.join(tmp, k), "--op",
                        "split_sinkhorn", "--cases", "1", "--tokens", "2", "--hc-eps", "0.01",
                        "--save-failures", two], capture_output=True)
    if len(os.listdir(two)) != 2:
        problems.append(f"two plug-ins' failures saved as {os.listdir(two)}")
    # A kernel that cannot run the op: the reason names its path, escaped.
    lacking = os.path.join(tmp.encode(), b"h\x1b[31m\xe2\x80\xae.so")
    shutil.copy(sys.argv[4], lacking)
    p = subprocess.run([BIN.encode(), b"check", b"--kernel", b"plugin:" + lacking, b"--op", b"post",
                        b"--cases", b"1", b"--tokens", b"2", b"--dim", b"8"], capture_output=True)
    if b"SKIPPED case 0" not in p.stdout or b"\x1b" in p.stdout or b"\xe2\x80\xae" in p.stdout:
        problems.append(f"check of a plug-in without the op: {p.stdout!r}")
    suite, base = os.path.join(tmp, "s.suite"), os.path.join(tmp, "b.json")
    with open(suite, "w") as f:
        f.write(f"kernels plugin:{sys.argv[4]}\nops pre\ncases 1\ntokens 2\ndim 16\n")
    gate = [BIN, "gate", "--suite", suite, "--baseline", base]
    env = dict(os.environ)  # without MHC_HOSTILE, a faithful hc_pre
    subprocess.run(gate + ["--update"], capture_output=True, env=env)  # a baseline without it
    env["MHC_HOSTILE_NAME"] = os.fsdecode(b"k\x1b]0;title\x07\xe2\x80\xae\xc2\x9b31m")
    p = subprocess.run(gate, capture_output=True, env=env)
    if p.returncode != 1 or b"NEW gate plugin:k\\x1B]0;title" not in p.stdout:
        problems.append(f"gate of the planted bug: exit {p.returncode}: {p.stdout[-300:]!r}")
    for raw in (b"\x1b", b"\x07", b"\xe2\x80\xae", b"\xc2\x9b"):
        if raw in p.stdout:
            problems.append(f"gate printed {raw!r} raw: {p.stdout[-300:]!r}")

shutil.rmtree(tmp)
for line in problems:
    print("FAIL", line)
print("text hygiene: PASS" if not problems else "text hygiene: FAIL")
sys.exit(1 if problems else 0)
