#!/usr/bin/env bash
# paths.sh BIN: report paths as a user may give them. "-" is standard output (the final report
# once, and nothing else: the run's lines go to stderr; a second report there is refused); a
# device node is written in place, never replaced by a regular file; a symlink is followed and
# stays a symlink; a directory is refused; a report another run holds is refused; a FIFO no
# process reads is refused at the start, one with a reader gets the final report; fuzz leaves its
# report so far on disk while it runs.
set -u
bin=$1
d=$(mktemp -d)
trap 'kill %1 2>/dev/null; rm -rf "$d"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
run=(check --kernel cpu --op pre --cases 2 --tokens 2 --dim 8)

out=$("$bin" "${run[@]}" --json -) || fail "--json - exited $?"
[ "$(grep -c '"schema": "mhc-report/1"' <<< "$out")" -eq 1 ] || fail "--json - did not print one report"
/usr/bin/python3 -c 'import json, sys; json.loads(sys.argv[1])' "$out" ||
  fail "--json -: standard output is not the report alone"
"$bin" "${run[@]}" --json - --md - > /dev/null 2> "$d/err"; rc=$?
[ $rc -eq 2 ] && grep -q "standard output is also the --json report" "$d/err" ||
  fail "two reports on standard output: exit $rc, $(cat "$d/err")"

if [ "$(id -u)" -eq 0 ]; then  # a device node of our own, a twin of /dev/null
  mknod "$d/null" c 1 3 || fail "mknod"
  "$bin" "${run[@]}" --json "$d/null" > /dev/null || fail "--json DEVICE exited $?"
  [ -c "$d/null" ] || fail "the device node was replaced by a regular file"
fi

ln -s real.json "$d/link.json"
"$bin" "${run[@]}" --json "$d/link.json" > /dev/null || fail "--json SYMLINK exited $?"
[ -L "$d/link.json" ] || fail "the symlink was replaced"
grep -q '"complete": true' "$d/real.json" || fail "the symlink's target holds no report"

"$bin" "${run[@]}" --json "$d" > /dev/null 2> "$d/err"; rc=$?
[ $rc -eq 2 ] && grep -q "a directory" "$d/err" || fail "a directory: exit $rc, $(cat "$d/err")"

flock "$d/held.json.lock" sleep 20 > /dev/null 2>&1 &  # its output not ctest's: no wait for it
sleep 0.5
"$bin" "${run[@]}" --json "$d/held.json" > /dev/null 2> "$d/err"; rc=$?
[ $rc -eq 2 ] && grep -q "another run is writing it" "$d/err" || fail "a held report: exit $rc, $(cat "$d/err")"
kill %1

"$bin" fuzz sinkhorn --seconds 30 --json "$d/fuzz.json" > /dev/null 2>&1 &
pid=$!
for _ in $(seq 40); do
  sleep 0.5
  /usr/bin/python3 -c "import json,sys; r=json.load(open('$d/fuzz.json')); \
sys.exit(0 if r['entries'] and int(r['entries'][0]['facts'].get('cases', 0)) > 0 else 1)" 2>/dev/null && break
done
kill -9 $pid 2>/dev/null
/usr/bin/python3 -c "import json,sys; r=json.load(open('$d/fuzz.json')); \
sys.exit(0 if r['entries'] and int(r['entries'][0]['facts'].get('cases', 0)) > 0 else 1)" ||
  fail "fuzz wrote no report of its cases while it ran: $(head -c 400 "$d/fuzz.json")"
# A FIFO: refused at the start when no process reads it (its open would wait forever, past
# SIGTERM); with a reader, that reader gets the final report whole.
mkfifo "$d/fifo"
timeout -k 5 20 "$bin" "${run[@]}" --json "$d/fifo" > /dev/null 2> "$d/err"; rc=$?
[ $rc -eq 2 ] && grep -q "a FIFO that no process reads" "$d/err" ||
  fail "a FIFO with no reader: exit $rc, $(cat "$d/err")"
cat "$d/fifo" > "$d/from-fifo" &
reader=$!
sleep 0.5  # the reader has opened its end
timeout -k 5 20 "$bin" "${run[@]}" --json "$d/fifo" > /dev/null 2>&1 || fail "a FIFO with a reader: exit $?"
wait $reader
/usr/bin/python3 -c "import json; json.load(open('$d/from-fifo'))" || fail "the FIFO's reader got no report"
echo "paths: ok"
