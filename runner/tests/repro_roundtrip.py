"""Every subcommand that prints REPRO lines: each line, run again, rebuilds the same case.

repro_roundtrip.py BIN [ONLY]: runs check (pieces and a Block, non-default precision and error
model), gate, mutants (Block mutants included), fuzz and compare with failing kernels and --json;
for every failing case in each report it runs the case's REPRO line with --json and requires the
same verdict: state, first divergent stage, and per stage the state, rule, failed count and the
worst element (index, got, want, bound). The same kernel on the same case under the same model
gives exactly that; a line that drops an option (a shape, the precision, the model) does not.
"""
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile

BIN = sys.argv[1]
ONLY = sys.argv[2] if len(sys.argv) > 2 else None
tmp = tempfile.mkdtemp(prefix="mhc_repro_")


def run(args, expect=(0, 1), cwd=None):
    p = subprocess.run([BIN] + args, capture_output=True, text=True, cwd=cwd)
    if p.returncode not in expect:
        sys.exit(f"FAIL: {' '.join(args)} exited {p.returncode}:\n{p.stdout}\n{p.stderr}")
    return p


def fingerprint(case):
    stages = [(s["stage"], s["state"], s["rule"], s["failed"], s["worst"]["index"],
               s["worst"]["got"], s["worst"]["want"], s["worst"]["bound"]) for s in case["stages"]]
    return case["state"], case["first_divergent"], stages


def report(args, name, cwd=None):
    path = os.path.join(tmp, name + ".json")
    run(args[:1] + ["--json", path] + args[1:], cwd=cwd)  # before a "--"
    return json.load(open(path))


def replay(rep, who, most=None, cwd=None):
    lines = [(e["id"], c) for e in rep["entries"] for c in e["cases"] if c["repro"]]
    if not lines:
        sys.exit(f"FAIL: {who} printed no REPRO line")
    checked = 0
    for entry, case in lines[:most]:
        words = shlex.split(case["repro"])
        if words[0] != "mhc-verify":
            sys.exit(f"FAIL: {who}: REPRO does not start with mhc-verify: {case['repro']}")
        out = os.path.join(tmp, "replay.json")
        run(words[1:] + ["--json", out, "--save-failures", ""] if words[1] == "check" else words[1:] + ["--json", out],
            cwd=cwd)
        again = json.load(open(out))
        cases = [c for e in again["entries"] for c in e["cases"]]
        if len(cases) != 1:
            sys.exit(f"FAIL: {who}: the REPRO line ran {len(cases)} cases: {case['repro']}")
        if fingerprint(cases[0]) != fingerprint(case):
            sys.exit(f"FAIL: {who} ({entry}): the REPRO line judged another case:\n  {case['repro']}\n"
                     f"  was   {fingerprint(case)}\n  again {fingerprint(cases[0])}")
        checked += 1
    print(f"{who}: {checked} REPRO lines rebuild their cases")


scenarios = {
    "check": lambda: replay(report(
        ["check", "--kernel", "mutant:comb_transposed", "--op", "post", "--precision", "bf16",
         "--error-model", "rigorous", "--cases", "2", "--tokens", "3", "--n", "3", "--dim", "40",
         "--hc-eps", "0.01", "--save-failures", ""], "check"), "check"),
    "check_block": lambda: replay(report(
        ["check", "--kernel", "mutant:block_attention_not_causal", "--op", "block", "--cases", "1",
         "--tokens", "4", "--batch", "2", "--dim", "32", "--heads", "2", "--head-dim", "4",
         "--experts", "3", "--inter", "8", "--route-scale", "1.5", "--save-failures", ""],
        "check_block"), "check --op block"),
    "gate": lambda: replay(report(
        ["gate", "--suite", suite, "--baseline", os.path.join(tmp, "baseline.json"), "--update"],
        "gate"), "gate"),
    "mutants": lambda: replay(report(
        ["mutants", "--cases", "20", "--kill-budget", "300", "--error-model", "probabilistic"],
        "mutants"), "mutants"),
    "fuzz": lambda: replay(report(
        ["fuzz", "sinkhorn", "--cases", "640", "--kernel", "mutant:col_eps_outside", "--hc-eps", "0.01",
         "--iters", "7", "--save-failures", os.path.join(tmp, "fuzz")], "fuzz"), "fuzz", most=3),
    "compare": lambda: replay(report(
        ["compare", "--error-model", "rigorous"] + sorted(
            os.path.join(tmp, "fuzz", f) for f in os.listdir(os.path.join(tmp, "fuzz")))[:2],
        "compare"), "compare"),
    # A relative file name that reads as an option: the line must still name the file.
    "compare_dash": lambda: replay(report(
        ["compare", "--", dash_file()], "compare_dash", cwd=tmp), "compare of -x.h5", cwd=tmp),
}


def dash_file():
    fuzzed = os.path.join(tmp, "fuzz")
    name = "--case=x 'q'.h5"
    shutil.copy(os.path.join(fuzzed, sorted(os.listdir(fuzzed))[0]), os.path.join(tmp, name))
    return name


suite = os.path.join(tmp, "repro.suite")
with open(suite, "w") as f:
    f.write("kernels mutant:col_eps_outside\nops split_sinkhorn mixes\nprecisions tf32\n"
            "hc-eps 1e-2\ncases 2\ntokens 2\nn 3\ndim 8\niters 5\nerror-model probabilistic\n")
for name, go in scenarios.items():
    if ONLY is None or name == ONLY or (ONLY == "fuzz" and name.startswith("compare")):
        go()
print("repro round trip: PASS")
