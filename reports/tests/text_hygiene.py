"""Bytes from outside never break a run or its reports, and never reach the terminal raw.

text_hygiene.py BIN FIXTURE: FIXTURE is a passing capture. Its copy is named with a newline, an
ESC sequence and a byte that is not UTF-8, and its producer attribute holds bytes that are not
UTF-8; `compare` must still pass it (exit 0), write JSON that parses, JUnit XML and HTML that are
well-formed UTF-8, and print the name escaped (no forged line of its own).
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
name = os.path.join(tmp.encode(), b"x\nPASS fake\x1b[31m \xff.h5")
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
if "x\\x0APASS fake\\x1B[31m \\xFF.h5" not in stdout:
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
shutil.rmtree(tmp)
for line in problems:
    print("FAIL", line)
print("text hygiene: PASS" if not problems else "text hygiene: FAIL")
sys.exit(1 if problems else 0)
