"""The source lines that only the tests the sanitizer run leaves out execute.

sanitizer_coverage.py [BUILD_DIR]: configures and builds a gcov tree (gcc --coverage, -O1, CUDA
and benchmarks off as in build-asan/; default BUILD_DIR build-cov), runs the selection that
scripts/test-sanitizers runs (its `-LE` labels; the Python package is not built under ASan, so
python.* stay out), records every executed line of the project's sources (tests/ folders aside),
then runs the tests that selection leaves out for being slow (label `slow`) and prints each line
that only they execute. An empty list: the sanitizer run executes every line the slow tests do.
Line coverage, not paths: a line reached with other values is not told apart (bench/README.md,
"The suite's time"). About 7 minutes to build and 6 to run on 2 cores.
"""
import json
import os
import re
import subprocess
import sys

src = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
build = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(src, "build-cov"))
labels = re.search(r'-LE "([^"]+)"', open(os.path.join(src, "scripts/test-sanitizers")).read())
if not labels:
    sys.exit("error: scripts/test-sanitizers has no -LE \"LABELS\" selection to mirror")
left_out = labels.group(1)


def sh(args, **kw):
    print("+", " ".join(args), flush=True)
    subprocess.run(args, check=True, **kw)


def executed():
    """(file, line) of every executed line since the counters were last cleared."""
    seen = set()
    for root, _, files in os.walk(build):
        for f in files:
            if not f.endswith(".gcda"):
                continue
            out = subprocess.run(["gcov", "--json-format", "--stdout", "-o", root, f], cwd=root,
                                 capture_output=True, text=True, check=True).stdout
            for doc in filter(str.strip, out.splitlines()):
                d = json.loads(doc)
                cwd = d.get("current_working_directory", root)
                for fi in d["files"]:
                    name = os.path.normpath(os.path.join(cwd, fi["file"]))
                    if name.startswith(src + os.sep) and "/tests/" not in name:
                        seen.update((os.path.relpath(name, src), ln["line_number"])
                                    for ln in fi["lines"] if ln["count"] > 0)
    return seen


def clear():
    for root, _, files in os.walk(build):
        for f in files:
            if f.endswith(".gcda"):
                os.remove(os.path.join(root, f))


flags = "-O1 -g0 --coverage"
sh(["cmake", "-S", src, "-B", build, "-G", "Ninja", "-DCMAKE_UNITY_BUILD=ON", "-DMHC_CUDA=OFF",
    "-DMHC_BENCH=OFF", "-DCMAKE_BUILD_TYPE=Debug", f"-DCMAKE_CXX_FLAGS_DEBUG={flags}",
    f"-DCMAKE_C_FLAGS_DEBUG={flags}", "-DCMAKE_EXE_LINKER_FLAGS=--coverage",
    "-DCMAKE_SHARED_LINKER_FLAGS=--coverage", "-DCMAKE_MODULE_LINKER_FLAGS=--coverage"],
   stdout=subprocess.DEVNULL)
sh(["cmake", "--build", build, "--parallel", str(os.cpu_count())])
ctest = ["ctest", "--test-dir", build, "--parallel", str(os.cpu_count()), "--output-on-failure"]
clear()
sh(ctest + ["-LE", left_out, "-E", r"^python\."], stdout=subprocess.DEVNULL)
sanitized = executed()
clear()
sh(ctest + ["-L", "slow"], stdout=subprocess.DEVNULL)
slow = executed()
only = sorted(slow - sanitized)
print(f"the sanitizer run's selection executes {len(sanitized)} lines, the slow tests {len(slow)}; "
      f"{len(only)} only by the slow tests")
for name, line in only:
    print(f"  {name}:{line}")
