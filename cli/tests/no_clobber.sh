#!/usr/bin/env bash
# no_clobber.sh BIN: a report path that names a file the run reads or writes is refused (exit 2,
# naming both) and the file is left as it was: a fixture given to compare (also through a
# symlink), capture's own --out, a gate's suite and baseline, another report of the same run
# (no lock file left behind); a FIFO given to merge is refused, not read forever; capture --out
# writes through a symlink (the link stays) and refuses a FIFO or a directory; and it writes no
# file that compare would refuse (hc_mult, sinkhorn_iters beyond the format), nor a partial one.
set -u
bin=$1
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
cd "$d" || exit 1
fail() { echo "FAIL: $*"; cat out 2>/dev/null; exit 1; }
# refused PATTERN CMD...: exit 2 and PATTERN in the output
refused() {
  local pattern=$1
  shift
  timeout 60 "$bin" "$@" > out 2>&1
  local rc=$?
  [ $rc = 2 ] || fail "$*: exit $rc, expected 2"
  grep -Eq -- "$pattern" out || fail "$*: no /$pattern/"
}
"$bin" capture --op post --dim 16 --out in.h5 > out 2>&1 || fail "capture: exit $?"
sum=$(md5sum < in.h5)
refused "cannot write report in.h5: it would replace in.h5, which this run reads" \
  compare in.h5 --json in.h5
refused "which this run reads" compare in.h5 --md in.h5
ln -s in.h5 link.json
refused "cannot write report link.json: it would replace in.h5" compare in.h5 --json link.json
[ "$(md5sum < in.h5)" = "$sum" ] || fail "compare replaced its input"
refused "cannot write report cap.h5: it would replace cap.h5, which this run writes" \
  capture --op post --dim 16 --out cap.h5 --json cap.h5
[ -e cap.h5 ] && fail "capture wrote cap.h5 although its report was refused"
refused "cannot write report r.json: it is also the --json report" compare in.h5 --json r.json \
  --md r.json
[ -e r.json.lock ] && fail "a refused report left its lock behind"
printf 'kernels cpu\nops post\nprecisions fp32\ncases 1\ntokens 2\ndim 16\n' > s.suite
cp s.suite s0.suite
refused "--baseline s.suite is the suite s.suite: --update would replace it" \
  gate --suite s.suite --baseline s.suite --update
cmp -s s.suite s0.suite || fail "gate --update replaced its suite"
"$bin" gate --suite s.suite --baseline b.json --update > out 2>&1 || fail "gate --update: exit $?"
cp b.json b0.json
refused "cannot write report b.json: it would replace b.json, which this run reads" \
  gate --suite s.suite --baseline b.json --json b.json
cmp -s b.json b0.json || fail "gate replaced its baseline with its report"
mkfifo fifo
mkdir dir
refused "report fifo: not a regular file \(a FIFO\)" merge fifo
refused "fifo: not a regular file \(a FIFO\): refused, nothing written" \
  capture --op post --dim 16 --out fifo
[ -p fifo ] || fail "capture replaced a FIFO"
refused "dir: not a regular file \(a directory\)" capture --op post --dim 16 --out dir
ln -s target.h5 out.h5
"$bin" capture --op post --dim 16 --out out.h5 > out 2>&1 || fail "capture through a symlink"
[ -L out.h5 ] && [ -f target.h5 ] || fail "capture replaced its symlink instead of its target"
refused "n65.h5: hc_mult 65 is beyond what the format holds \(at most 64\): not written" \
  capture --op post --n 65 --dim 4 --out n65.h5
refused "iters \(sinkhorn_iters\) must be in \[1, 100000\], got 100001" \
  capture --op split_sinkhorn --iters 100001 --dim 4 --out it.h5
ls n65.h5* it.h5* > /dev/null 2>&1 && fail "capture left a file it refused to write"
echo "ok: no report replaced a file of its run, capture wrote no FIFO and kept its symlink"
