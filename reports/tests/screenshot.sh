#!/usr/bin/env bash
# screenshot.sh MHC_VERIFY SOURCE_DIR: the HTML report renders in headless Chromium. A blank page
# is screenshot too, as the control that the measure can fail. Then, in the browser, a merged
# report of four entries (one failing, recorded third): the overview is the first thing under
# the banner, a line per entry with the failure first, every link resolves, and following a link
# to a folded entry opens it at the top of the window (probe.js). Exit 77 without Chromium.
set -u
bin=$1 src=$2
chromium=$(command -v chromium || true)
[ -n "$chromium" ] || { echo "SKIP: no chromium (scripts/setup installs it)"; exit 77; }
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
"$bin" check --kernel mutant:comb_transposed --op boundary --cases 2 --tokens 2 --dim 64 \
  --save-failures '' --html "$d/report.html" --json "$d/3.json" > /dev/null
[ -s "$d/report.html" ] || { echo "FAIL: no report"; exit 1; }
printf '<!DOCTYPE html><html><body></body></html>' > "$d/blank.html"
flags=(--headless --no-sandbox --disable-gpu --disable-quic --no-first-run
  --disable-background-networking --disable-component-update --disable-sync
  --user-data-dir="$d/profile")
shoot() {
  timeout 120 "$chromium" "${flags[@]}" --window-size=1200,2000 --screenshot="$2" "file://$1" \
    > "$d/chromium.log" 2>&1
  [ -s "$2" ] || { echo "FAIL: chromium wrote no screenshot of $1"; cat "$d/chromium.log"; exit 1; }
}
shoot "$d/report.html" "$d/report.png"
shoot "$d/blank.html" "$d/blank.png"
/usr/bin/python3 "$src/reports/tests/png_ink.py" "$d/report.png" "$d/blank.png" || exit 1

"$bin" check --kernel cpu --op pre --cases 1 --tokens 2 --dim 64 --json "$d/1.json" > /dev/null &&
  "$bin" check --kernel cpu --op stack --layers 2 --cases 1 --tokens 2 --batch 1 --dim 32 \
    --heads 2 --head-dim 4 --experts 3 --inter 8 --json "$d/2.json" > /dev/null &&
  "$bin" compare "$src/fixtures/data/v41_pre_fp32.h5" --json "$d/4.json" > /dev/null ||
  { echo "FAIL: the runs for the merged report"; exit 1; }
"$bin" merge "$d"/[1-4].json --html "$d/merged.html" > /dev/null
{ cat "$d/merged.html"; printf '<script>\n'; cat "$src/reports/tests/probe.js"; printf '</script>\n'; } \
  > "$d/probe.html"
timeout 120 "$chromium" "${flags[@]}" --window-size=1200,900 --virtual-time-budget=5000 \
  --dump-dom "file://$d/probe.html" > "$d/dom.html" 2> "$d/chromium.log"
/usr/bin/python3 - "$d/dom.html" <<'PY'
import re, sys
m = re.findall(r'<pre id="probe">(.*?)</pre>', open(sys.argv[1]).read(), re.S)
if not m:
    sys.exit("FAIL: the probe did not run in the browser")
p = dict(line.split("=", 1) for line in m[-1].split("\n"))
print("browser:", ", ".join(f"{k}={v}" for k, v in p.items()))
checks = {
    "the overview is the first table": p["overview_first"] == "true",
    "the overview is at the top of the window": 0 <= int(p["overview_top"]) < 400,
    "one overview line per entry": int(p["rows"]) == int(p["sections"]) == 4,
    "the failure's line first": p["failures"] == "1" and p["failures_first"] == "true",
    "every link resolves": int(p["links"]) >= 4 and p["unresolved"] == "0",
    "a link opens its folded entry": p["target_was_open"] == "false" and p["target_open"] == "true",
    "and scrolls it to the top": int(p["scrolled"]) > 0 and 0 <= int(p["target_top"]) < 120,
}
for what, ok in checks.items():
    print(("ok   " if ok else "FAIL ") + what)
sys.exit(0 if all(checks.values()) else 1)
PY
