#!/usr/bin/env bash
# expect.sh CODE PATTERN CMD...: runs CMD; passes when it exits with CODE and its output matches
# PATTERN (extended regex). A bad-input exit (CODE 2) must also print exactly one line on stderr.
set -u
code=$1 pattern=$2
shift 2
out=$("$@" 2>/tmp/expect.$$.err)
rc=$?
err=$(cat /tmp/expect.$$.err)
rm -f /tmp/expect.$$.err
printf '%s\n%s\n' "$out" "$err"
if [ "$rc" -ne "$code" ]; then echo "FAIL: exit code $rc, expected $code"; exit 1; fi
if ! printf '%s\n%s\n' "$out" "$err" | grep -Eq -- "$pattern"; then echo "FAIL: no match for /$pattern/"; exit 1; fi
if [ "$code" -eq 2 ] && [ "$(printf '%s' "$err" | grep -c '')" -ne 1 ]; then
  echo "FAIL: expected exactly one line on stderr"; exit 1
fi
echo "ok: exit $rc"
