#!/usr/bin/env python3
"""The campaign examples run as written, scaled down: check.sbatch once per array task (its
#SBATCH lines are comments to bash; the SLURM_* variables as sbatch sets them for --array=0-2),
and the Indexed Job's container command once per completion index (JOB_COMPLETION_INDEX set and
$(VAR) references expanded as Kubernetes does, /results a scratch directory). Only the size
changes: CASES (the batch script's own knob) and, in the manifest, --cases, --shards and
completions, kept equal. Each campaign's merged report must equal the same command run whole
(same_results.py), and a merge with a shard left out must name it MISSING.

Usage: test_campaigns.py MHC_VERIFY SOURCE_DIR (exit 0 pass, 1 fail)."""
import os
import re
import subprocess
import sys
import tempfile

import yaml

BIN, SRC = sys.argv[1], sys.argv[2]
HERE = os.path.join(SRC, "docs/campaigns")
SHARDS, CASES = 3, 9


def run(cmd, env=None, cwd=None):
    r = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True)
    return r.returncode, r.stdout + r.stderr


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SLURM_", "TEST_SHARD", "TEST_TOTAL", "JOB_COMPLETION"))}
    env["PATH"] = os.path.dirname(os.path.abspath(BIN)) + ":" + env["PATH"]
    env.update(extra)
    return env


def same(whole, merged):
    rc, out = run(["/usr/bin/python3", os.path.join(SRC, "cli/tests/same_results.py"), whole, merged])
    return None if rc == 0 else out


def slurm(work):
    out = os.path.join(work, "slurm")
    for task in range(SHARDS):
        env = clean_env(SLURM_ARRAY_TASK_ID=str(task), SLURM_ARRAY_TASK_COUNT=str(SHARDS),
                        SLURM_ARRAY_TASK_MIN="0", SLURM_ARRAY_TASK_MAX=str(SHARDS - 1),
                        SLURM_ARRAY_TASK_STEP="1", SLURM_CPUS_PER_TASK="1", OUT=out,
                        CASES=str(CASES))
        rc, text = run(["bash", os.path.join(HERE, "check.sbatch")], env=env, cwd=work)
        if rc not in (0, 1):
            return "check.sbatch task %d: exit %d\n%s" % (task, rc, text)
    shards = sorted(os.path.join(out, f) for f in os.listdir(out) if f.startswith("shard-"))
    if len(shards) != SHARDS:
        return "check.sbatch: %d reports, not %d" % (len(shards), SHARDS)
    # The same script as an array of one task: the whole campaign.
    rc, text = run(["bash", os.path.join(HERE, "check.sbatch")],
                   env=clean_env(SLURM_ARRAY_TASK_ID="0", SLURM_ARRAY_TASK_COUNT="1",
                                 OUT=os.path.join(work, "whole"), CASES=str(CASES)), cwd=work)
    whole = os.path.join(work, "whole", "shard-0.json")
    if not os.path.exists(whole):
        return "the whole run wrote no report: " + text
    return merged_equals(shards, whole, os.path.join(work, "slurm-merged.json"))


def indexed_job(work):
    job = yaml.safe_load(open(os.path.join(HERE, "check-indexed-job.yaml")))
    spec = job["spec"]
    if spec.get("completionMode") != "Indexed":
        return "the manifest is not an Indexed Job"
    (container,) = spec["template"]["spec"]["containers"]
    args = list(container["args"])
    if args[args.index("--shards") + 1] != str(spec["completions"]):
        return "--shards differs from completions in the manifest"
    args[args.index("--shards") + 1] = str(SHARDS)
    args[args.index("--cases") + 1] = str(CASES)
    results = os.path.join(work, "results")
    os.makedirs(results)
    args = [a.replace("/results", results) for a in args]
    for index in range(SHARDS):
        env = clean_env(JOB_COMPLETION_INDEX=str(index))
        expanded = [re.sub(r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), a) for a in args]
        rc, text = run(container["command"] + expanded, env=env, cwd=work)
        if rc not in (0, 1):
            return "pod %d: exit %d\n%s" % (index, rc, text)
    shards = sorted(os.path.join(results, f) for f in os.listdir(results) if f.startswith("shard-"))
    whole_args = [a for a in args]
    i = whole_args.index("--shards")
    del whole_args[i:i + 2]
    whole_args[whole_args.index("--json") + 1] = os.path.join(work, "k8s-whole.json")
    run(container["command"] + whole_args, env=clean_env(), cwd=work)
    return merged_equals(shards, os.path.join(work, "k8s-whole.json"), os.path.join(work, "k8s-merged.json"))


def merged_equals(shards, whole, merged):
    rc, text = run([BIN, "merge"] + shards + ["--json", merged])
    if "MISSING" in text or not os.path.exists(merged):
        return "merge: " + text
    problem = same(whole, merged)
    if problem:
        return problem
    rc, text = run([BIN, "merge"] + shards[:-1])
    if rc == 0 or "MISSING shard %d of %d" % (SHARDS - 1, SHARDS) not in text:
        return "a merge without the last shard did not name it: " + text
    return None


def main():
    work = tempfile.mkdtemp()
    for name, fn in (("check.sbatch", slurm), ("check-indexed-job.yaml", indexed_job)):
        problem = fn(work)
        if problem:
            print("FAIL: %s: %s" % (name, problem))
            return 1
        print("%s: %d shards merged equal the whole run; a missing shard is named" % (name, SHARDS))
    subprocess.run(["rm", "-rf", work])
    print("campaigns: PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
