#!/usr/bin/env bash
# screenshot.sh MHC_VERIFY SOURCE_DIR: the HTML report renders in headless Chromium. A blank page
# is screenshot too, as the control that the measure can fail. Exit 77 without Chromium.
set -u
bin=$1 src=$2
chromium=$(command -v chromium || true)
[ -n "$chromium" ] || { echo "SKIP: no chromium (scripts/setup installs it)"; exit 77; }
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
"$bin" check --kernel mutant:comb_transposed --op boundary --cases 2 --tokens 2 --dim 64 \
  --save-failures '' --html "$d/report.html" > /dev/null
[ -s "$d/report.html" ] || { echo "FAIL: no report"; exit 1; }
printf '<!DOCTYPE html><html><body></body></html>' > "$d/blank.html"
shoot() {
  timeout 120 "$chromium" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync \
    --user-data-dir="$d/profile" --window-size=1200,2000 --screenshot="$2" "file://$1" \
    > "$d/chromium.log" 2>&1
  [ -s "$2" ] || { echo "FAIL: chromium wrote no screenshot of $1"; cat "$d/chromium.log"; exit 1; }
}
shoot "$d/report.html" "$d/report.png"
shoot "$d/blank.html" "$d/blank.png"
/usr/bin/python3 "$src/reports/tests/png_ink.py" "$d/report.png" "$d/blank.png"
