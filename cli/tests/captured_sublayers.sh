#!/usr/bin/env bash
# captured_sublayers.sh BIN: a stack whose sublayers are black boxes (config sublayers = captured,
# no sublayer weights, each sublayer's output in the trace) is judged at every mHC stage. A
# faithful kernel passes with each layer's sublayer inputs and output streams judged; a deviation
# at an mHC stage fails at that layer's stage with its diagnosis; one inside a sublayer is not the
# harness's to see and passes; a capture without a sublayer's output is refused (exit 2).
set -u
bin=$1
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
fail() { echo "FAIL: $*"; cat "$d/out"; exit 1; }
small=(--op stack --layers 2 --tokens 3 --batch 2 --dim 16 --heads 2 --head-dim 4 --experts 4
  --top-k 2 --inter 8 --hc-eps 1e-2)
cap() { "$bin" capture --kernel "$1" "${small[@]}" --captured-sublayers --out "$2" > "$d/out" 2>&1 ||
  fail "capture --kernel $1"; }

cap cpu "$d/ok.h5"
"$bin" compare "$d/ok.h5" --json "$d/ok.json" > "$d/out" 2>&1 || fail "faithful: exit $?"
/usr/bin/python3 - "$d/ok.json" > "$d/out" <<'PY' || fail "faithful: the stages judged"
import json, sys
stages = {s["stage"]: s["state"] for s in json.load(open(sys.argv[1]))["entries"][0]["cases"][0]["stages"]}
want = [f"L{l}.{s}" for l in (0, 1) for s in ("attn.mixes", "attn.pre", "attn.post", "attn.comb",
        "attn.in", "attn.normed", "x_mid", "ffn.mixes", "ffn.pre", "ffn.post", "ffn.comb", "ffn.in",
        "ffn.normed", "x_out", "next_pre_mix")] + ["final.collapse", "final.norm"]
print(stages)
assert list(stages) == want and set(stages.values()) == {"pass"}, "not every mHC stage judged, or a sublayer's"
PY
# Tokens are evaluated in parts on threads: the bounds do not depend on the split.
"$bin" compare "$d/ok.h5" --threads 1 --json "$d/one.json" > /dev/null 2>&1 || fail "--threads 1"
"$bin" compare "$d/ok.h5" --threads 4 --json "$d/four.json" > /dev/null 2>&1 || fail "--threads 4"
/usr/bin/python3 - "$d/one.json" "$d/four.json" > "$d/out" <<'PY' || fail "the bounds depend on the threads"
import json, sys
a, b = ({s["stage"]: s for s in json.load(open(p))["entries"][0]["cases"][0]["stages"]} for p in sys.argv[1:])
assert a == b, [k for k in a if a[k] != b.get(k)]
PY
echo "ok: faithful"

for m in block_comb_transposed_at_ffn:L0.x_out:comb_transposed_at_ffn \
  block_attn_norm_skipped:L0.attn.normed:attn_norm_skipped \
  block_pre_not_shifted:L0.attn.in:pre_not_shifted \
  softmax_eps_inside:L0.attn.comb:softmax_eps_in_sum; do
  IFS=: read -r name stage diag <<< "$m"
  cap "mutant:$name" "$d/$name.h5"
  "$bin" compare "$d/$name.h5" > "$d/out" 2>&1
  rc=$?
  [ $rc -eq 1 ] || fail "$name: exit $rc, expected 1"
  grep -q "first divergent stage $stage$" "$d/out" || fail "$name: not first divergent at $stage"
  grep -q "DIAGNOSIS: .*$diag" "$d/out" || fail "$name: no diagnosis $diag"
  echo "ok: $name fails at $stage"
done

cap mutant:block_attention_not_causal "$d/inside.h5"
"$bin" compare "$d/inside.h5" > "$d/out" 2>&1 || fail "a deviation inside a sublayer: exit $?"
echo "ok: inside a sublayer"

/usr/bin/python3 - "$d/ok.h5" "$d/gone.h5" <<'PY' || fail "h5py"
import shutil, sys, h5py
shutil.copy(sys.argv[1], sys.argv[2])
with h5py.File(sys.argv[2], "r+") as f:
    assert f["config"].attrs["sublayers"] in (b"captured", "captured")
    assert "params/layers/0/attn/wq" not in f and "params/layers/1/ffn/hc_fn" in f
    del f["outputs/trace/L1.ffn.out"]
PY
"$bin" compare "$d/gone.h5" > "$d/out" 2>&1
rc=$?
[ $rc -eq 2 ] && grep -q "gone.h5: dataset /outputs/trace/L1.ffn.out: missing" "$d/out" ||
  fail "a capture without a sublayer's output: exit $rc"
echo "captured sublayers: ok"
