#!/usr/bin/env python3
"""The CI examples work as written: the Debian packages are built (cpack), every dependency they
declare is a Debian package installed here, and the shell steps of github-actions.yml and
gitlab-ci.yml run in a scratch kernel repository (kernel-repo/ and the example plug-in): the gate
passes on the faithful plug-in and fails on the planted bug (eps inside the softmax division).

Two things stand in for the CI machine: `apt-get` is a shim that, for a package name, checks that
it is installed here and, for a .deb, checks that its dependencies are installed here (or are
among the packages built) and unpacks it into a root whose usr/bin is on PATH (CMAKE_PREFIX_PATH
points at its usr); the packages' download location is a file:// URL.

Usage: test_examples.py BUILD_DIR SOURCE_DIR (exit 0 pass, 1 fail)."""
import glob
import os
import shutil
import subprocess
import sys
import tempfile

import yaml

SHIM = r'''#!/usr/bin/env python3
import os, re, subprocess, sys
args = [a for a in sys.argv[1:] if not a.startswith("-")]
if not args or args[0] == "update":
    sys.exit(0)
assert args[0] == "install", "apt-get shim: only update and install: %r" % sys.argv
built = {}
for deb in os.environ["MHC_SHIM_DEBS"].split(":"):
    f = lambda k: subprocess.run(["dpkg-deb", "-f", deb, k], capture_output=True, text=True).stdout.strip()
    built[f("Package")] = f("Version")
def installed(name):
    r = subprocess.run(["dpkg-query", "-W", "-f=${Status} ${Version}", name], capture_output=True, text=True)
    if r.returncode == 0 and r.stdout.startswith("install ok installed"):
        return r.stdout.split()[-1]
    return built.get(name)
def satisfied(alternative):
    m = re.fullmatch(r"\s*([^\s(:]+)(?::\S+)?\s*(?:\((<<|<=|=|>=|>>)\s*([^)\s]+)\))?\s*", alternative)
    assert m, "unparsed dependency %r" % alternative
    version = installed(m.group(1))
    if version is None:
        return False
    if not m.group(2):
        return True
    op = {"<<": "lt", "<=": "le", "=": "eq", ">=": "ge", ">>": "gt"}[m.group(2)]
    return subprocess.run(["dpkg", "--compare-versions", version, op, m.group(3)]).returncode == 0
for a in args[1:]:
    if a.endswith(".deb") and "/" in a:
        depends = subprocess.run(["dpkg-deb", "-f", a, "Depends"], capture_output=True, text=True).stdout
        for group in filter(None, (g.strip() for g in depends.split(","))):
            if not any(satisfied(alt) for alt in group.split("|")):
                sys.exit("apt-get shim: %s depends on %s, not installed here" % (a, group))
        subprocess.run(["dpkg-deb", "-x", a, os.environ["MHC_SHIM_ROOT"]], check=True)
    elif installed(a) is None:
        sys.exit("apt-get shim: package %s is not installed here" % a)
'''


def steps_of(path):
    """The shell steps and the environment of the example's one job."""
    doc = yaml.safe_load(open(path))
    if "jobs" in doc:  # GitHub Actions
        (job,) = doc["jobs"].values()
        return [s["run"] for s in job["steps"] if "run" in s], dict(job.get("env", {}))
    (job,) = [v for k, v in doc.items() if isinstance(v, dict) and "script" in v]  # GitLab CI
    return list(job["script"]), dict(job.get("variables", {}))


def run_example(name, path, src, work, debs, planted_bug):
    repo = os.path.join(work, name + ("-bug" if planted_bug else ""))
    shutil.copytree(os.path.join(src, "gate/examples/kernel-repo"), repo)
    os.makedirs(os.path.join(repo, "src"))
    code = open(os.path.join(src, "impl/plugin/examples/example_plugin.c")).read()
    if planted_bug:
        code = "#define MHC_PLANTED_BUG 1\n" + code
    open(os.path.join(repo, "src/mykernels.c"), "w").write(code)
    shutil.copy(os.path.join(work, "mhc-baseline.json"), os.path.join(repo, "ci"))
    root, shim = os.path.join(repo, ".root"), os.path.join(repo, ".shim")
    os.makedirs(shim)
    open(os.path.join(shim, "apt-get"), "w").write(SHIM)
    os.chmod(os.path.join(shim, "apt-get"), 0o755)
    steps, env = steps_of(path)
    env = {k: str(v) for k, v in env.items()}
    env.update(os.environ)
    env["MHC_VERIFY_DEB_BASE"] = "file://" + os.path.dirname(debs[0]) + "/"
    env["PATH"] = shim + ":" + os.path.join(root, "usr/bin") + ":" + os.environ["PATH"]
    env["CMAKE_PREFIX_PATH"] = os.path.join(root, "usr")
    env["MHC_SHIM_ROOT"], env["MHC_SHIM_DEBS"] = root, ":".join(debs)
    for step in steps:
        r = subprocess.run(["bash", "-eo", "pipefail", "-c", step], cwd=repo, env=env,
                           capture_output=True, text=True)
        if r.returncode != 0:
            return step, r
    return None, None


def main():
    build, src = sys.argv[1], sys.argv[2]
    work = tempfile.mkdtemp()
    try:
        out = os.path.join(work, "debs")
        r = subprocess.run(["cpack", "-G", "DEB", "-B", out], cwd=build, capture_output=True, text=True)
        if r.returncode != 0:
            print(r.stdout, r.stderr)
            return "cpack failed"
        debs = sorted(glob.glob(os.path.join(out, "*.deb")))
        names = [os.path.basename(d).split("_")[0] for d in debs]
        for want in ("mhc-verify", "mhc-verify-dev"):
            if want not in names:
                return "no %s package among %s" % (want, names)
        depends = subprocess.run(["dpkg-deb", "-f", debs[names.index("mhc-verify")], "Depends"],
                                 capture_output=True, text=True).stdout
        print("mhc-verify Depends:", depends.strip())
        for lib in ("libc6", "libstdc++6", "libhdf5", "libmpfr"):  # from the binary (dpkg-shlibdeps)
            if lib not in depends:
                return "mhc-verify does not depend on %s" % lib
        # Every package installs here (the shim checks each dependency), and the Python one
        # imports and judges from where Debian's python3 looks.
        everything = os.path.join(work, "everything")
        os.makedirs(everything)
        shim = os.path.join(work, "apt-get")
        open(shim, "w").write(SHIM)
        env = dict(os.environ, MHC_SHIM_ROOT=everything, MHC_SHIM_DEBS=":".join(debs))
        r = subprocess.run(["/usr/bin/python3", shim, "install", "-y"] + debs, env=env,
                           capture_output=True, text=True)
        if r.returncode != 0:
            return "the packages do not install: " + r.stdout + r.stderr
        if "python3-mhc-verify" in names:
            r = subprocess.run(["/usr/bin/python3", "-c", "import mhc_verify, numpy as n; "
                                "print(mhc_verify.__file__); assert mhc_verify.judge('rmsnorm', "
                                "{'dim': 2}, {'x': n.ones((1, 2))}, {'y': n.ones((1, 2))}, "
                                "{'weight': n.ones(2)}, save_dir=None).passed"],
                               env=dict(os.environ, PYTHONPATH=os.path.join(
                                   everything, "usr/lib/python3/dist-packages")),
                               capture_output=True, text=True, cwd=work)
            if r.returncode != 0 or everything not in r.stdout:
                return "the Python package does not import from its package: " + r.stdout + r.stderr
        # The baseline a kernel repository records once and commits, with the packaged CLI.
        rec = os.path.join(work, "record")
        subprocess.run(["dpkg-deb", "-x", debs[names.index("mhc-verify")], rec], check=True)
        plugin = os.path.join(build, "lib/mhc_example.so")
        r = subprocess.run([os.path.join(rec, "usr/bin/mhc-verify"), "gate", "--suite",
                            os.path.join(src, "gate/examples/kernel-repo/ci/mhc.suite"), "--baseline",
                            os.path.join(work, "mhc-baseline.json"), "--kernel", "plugin:" + plugin,
                            "--update"], capture_output=True, text=True)
        if r.returncode != 0:
            print(r.stdout, r.stderr)
            return "recording the baseline failed"
        for name in ("github-actions", "gitlab-ci"):
            path = os.path.join(src, "gate/examples", name + ".yml")
            step, r = run_example(name, path, src, work, debs, planted_bug=False)
            if step is not None:
                print(r.stdout, r.stderr)
                return "%s: step failed: %s" % (name, step)
            repo = os.path.join(work, name)
            for f in ("mhc-junit.xml", "mhc-report.html"):
                if not os.path.isfile(os.path.join(repo, f)):
                    return "%s: no %s" % (name, f)
            print("%s: every step passed" % name)
            step, r = run_example(name, path, src, work, debs, planted_bug=True)
            if step is None or "mhc-verify gate" not in step or r.returncode != 1:
                return "%s: the planted bug was not caught by the gate step" % name
            if "softmax_eps_in_sum" not in r.stdout:
                print(r.stdout)
                return "%s: the planted bug's diagnosis is missing" % name
            print("%s: the planted bug fails the gate step (exit 1)" % name)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return None


if __name__ == "__main__":
    problem = main()
    print("FAIL: " + problem if problem else "ci examples: PASS")
    sys.exit(1 if problem else 0)
