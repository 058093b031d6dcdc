"""Text from outside cannot change what the Markdown report shows, nor what its REPRO line runs.

markdown_renders.py BIN FIXTURE: FIXTURE is a passing post capture. A copy that fails (its output
off by 1%) is named with backticks, quotes, a command substitution, markup and a table's bar, and
its producer attribute is raw HTML; `compare --md` must render (cmark, the CommonMark reference,
with raw HTML let through as a permissive viewer would) with no element that came from the input,
the name shown as it is, and the REPRO line's rendered text must be the REPRO line compare printed,
which, run by bash, reruns the case and nothing else. Then the report merged again, with a stage
name, an entry id, settings and facts that hold Markdown and HTML (a heading, a list, a code span
of spaces): the same. Exit 77 without cmark.
"""
import html
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import h5py

BIN, FIXTURE = sys.argv[1], sys.argv[2]
cmark = shutil.which("cmark")
if not cmark:
    print("SKIP: no cmark (scripts/setup installs it)")
    sys.exit(77)

tmp = tempfile.mkdtemp(prefix="mhc_md_")
problems = []
HOSTILE = "<img src=x onerror=alert(1)><script>alert(2)</script>[link](javascript:alert(3))"


def render(md_path):
    p = subprocess.run([cmark, "--unsafe", md_path], capture_output=True, text=True, check=True)
    return p.stdout


def elements(page):
    """The HTML elements in the page that our renderer does not write."""
    ours = {"h1", "h2", "p", "code", "ul", "li", "table", "thead", "tbody", "tr", "th", "td",
            "strong", "em", "br"}
    return sorted({t for t in re.findall(r"<\s*([a-zA-Z][a-zA-Z0-9]*)", page)} - ours)


name = "a`$(touch PWNED)`'b\" <i>x <img src=y> | *y* _z_ `` c.h5"
path = os.path.join(tmp, name)
shutil.copy(FIXTURE, path)
with h5py.File(path, "r+") as f:
    f["outputs/y"][...] = f["outputs/y"][()] * 1.01
    f.attrs["producer"] = HOSTILE + " ` `` | # heading"
md = os.path.join(tmp, "r.md")
p = subprocess.run([BIN, "compare", path, "--md", md, "--json", os.path.join(tmp, "r.json")],
                   capture_output=True, text=True, cwd=tmp)
printed = [line[len("REPRO: "):] for line in p.stdout.splitlines() if line.startswith("REPRO: ")]
if p.returncode != 1 or len(printed) != 1:
    problems.append(f"compare: exit {p.returncode}, REPRO lines {printed}: {p.stderr}")
page = render(md)
if elements(page):
    problems.append(f"compare's Markdown renders elements from the input: {elements(page)}")
shown = [html.unescape(m) for m in re.findall(r"REPRO: <code>(.*?)</code>", page, re.S)]
if printed and shown != printed:
    problems.append(f"the rendered REPRO is {shown!r}, compare printed {printed!r}")
text = html.unescape(re.sub(r"<[^>]*>", "", page))
if HOSTILE not in text:
    problems.append("the producer is not shown as its text")
if name not in text:
    problems.append(f"the file's name is not shown as it is: {text!r}")
if shown:  # pasted into bash: mhc-verify is BIN
    bindir = os.path.join(tmp, "bin")
    os.mkdir(bindir)
    os.symlink(BIN, os.path.join(bindir, "mhc-verify"))
    p = subprocess.run(["bash", "-c", shown[0]], capture_output=True, text=True, cwd=tmp,
                       env=dict(os.environ, PATH=bindir + os.pathsep + os.environ["PATH"]))
    if p.returncode != 1 or "compare: FAIL (1 cases" not in p.stdout:
        problems.append(f"the rendered REPRO did not rerun the case: exit {p.returncode}: {p.stderr}")
    if os.path.exists(os.path.join(tmp, "PWNED")):
        problems.append("the rendered REPRO ran a command from the name")

# The same report merged, with fields a hand-edited report could hold.
report = json.load(open(os.path.join(tmp, "r.json")))
entry = report["entries"][0]
entry["id"] = "<b>id</b> | # `x`"
entry["settings"] = {"# INJECTED heading": "[v](javascript:alert(4))", "<em>k</em>": "1. x"}
entry["facts"] = {"- nested": "v", "  1) n": "=== <b>x</b>"}
spaces = json.loads(json.dumps(entry))  # a second entry whose stage names are spaces
spaces["id"] = "spaces"
for c in spaces["cases"]:
    c["first_divergent"] = "  "
report["entries"].append(spaces)
for c in entry["cases"]:
    c["first_divergent"] = "y`\n\n# INJECTED\n<script>alert(5)</script>\n|a|b|"
    for s in c["stages"]:
        s["stage"] = "<u>stage</u> | x"
json.dump(report, open(os.path.join(tmp, "edited.json"), "w"))
merged = os.path.join(tmp, "m.md")
p = subprocess.run([BIN, "merge", os.path.join(tmp, "edited.json"), "--md", merged],
                   capture_output=True, text=True)
if p.returncode not in (1, 2) or not os.path.exists(merged):
    problems.append(f"merge: exit {p.returncode}: {p.stderr}")
else:
    page = render(merged)
    if elements(page):
        problems.append(f"merge's Markdown renders elements from the input: {elements(page)}")
    if page.count("<h1>") != 1:
        problems.append("merge's Markdown has a heading from the input")
    text = html.unescape(re.sub(r"<[^>]*>", "", page))
    for shown_as in ("# INJECTED heading=[v](javascript:alert(4))", "- nested: v",
                     "  1) n: === <b>x</b>", "<em>k</em>=1. x"):
        if shown_as not in text:
            problems.append(f"merge's Markdown does not show {shown_as!r} as it is")
    if "<code>  </code>" not in page:
        problems.append("a code span of two spaces does not render as two spaces")

shutil.rmtree(tmp)
for line in problems:
    print("FAIL", line)
print("markdown renders: PASS" if not problems else "markdown renders: FAIL")
sys.exit(1 if problems else 0)
