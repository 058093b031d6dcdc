"""A captured forward of a 4-layer model at the V4.1 stream sizes (n=4, d=5120) with 4096 tokens,
judged by mhc_verify.judge_file and by `mhc-verify compare` on the same file, each in a fresh
process, one after the other (REPEATS=k in the environment: k pairs). The model is
python/examples/mhc_blocks.py at d=5120 with cheap black-box sublayers (the harness never
evaluates them); mhc_verify.torch.capture_blocks writes the file (parts of 128 tokens: 32 stack
cases), with each site's (pre, post, comb).

PYTHONPATH=build/python python3 bench/python_forward.py build/bin/mhc-verify [tokens] [dir]"""
import os
import subprocess
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python", "examples"))
import mhc_blocks  # noqa: E402
import mhc_verify  # noqa: E402
import mhc_verify.torch as mt  # noqa: E402

BIN = sys.argv[1]
TOKENS = int(sys.argv[2]) if len(sys.argv) > 2 else 4096
folder = sys.argv[3] if len(sys.argv) > 3 else tempfile.mkdtemp()
mhc_blocks.D = 5120


class Cheap(torch.nn.Module):  # a black box: any function of its input
    def forward(self, h):
        return torch.tanh(h)


model = mhc_blocks.Model(layers=4)
for b in model.blocks:
    b.attn, b.ffn = Cheap(), Cheap()
# The sites' (pre, post, comb) captured too: anchored there, the streams' bounds stay finite.
blocks = [mt.Block(b, b.attn, b.ffn, b.mhc_params(), b.attn_site, b.ffn_site)
          for b in model.blocks]
x = torch.randn(TOKENS, mhc_blocks.N, 5120, generator=torch.Generator().manual_seed(0))
path = os.path.join(folder, "forward.h5")
t = time.perf_counter()
with torch.no_grad(), mt.capture_blocks(path, blocks, {"hc_mult": 4, "dim": 5120},
                                        final_norm=model.final_norm.weight,
                                        final=model.final_norm):
    model(x)
print(f"capture: {time.perf_counter() - t:.1f} s, {os.path.getsize(path) / 2**30:.2f} GiB")

# Each judgement in a fresh process, as a test run or a CI job would start it (judging in the
# process that just ran the model was slower: bench/README.md), alternating, REPEATS times.
JUDGE = ("import sys, time, mhc_verify\n"
         "t = time.perf_counter()\n"
         "r = mhc_verify.judge_file(sys.argv[1])\n"
         "print(time.perf_counter() - t, sum(x.state == 'fail' for x in r), len(r))\n")
REPEATS = int(os.environ.get("REPEATS", "1"))
for _ in range(REPEATS):
    p = subprocess.run([sys.executable, "-c", JUDGE, path], capture_output=True, text=True,
                       env={**os.environ, "MHC_VERIFY_BIN": BIN})
    assert p.returncode == 0, p.stderr[-2000:]
    a, failed, cases = p.stdout.split()
    assert failed == "0", p.stdout
    t = time.perf_counter()
    p = subprocess.run([BIN, "compare", path], capture_output=True, text=True)
    b = time.perf_counter() - t
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr
    print(f"{cases} cases of {TOKENS} tokens x 4 layers: judge_file {float(a):.1f} s, "
          f"compare {b:.1f} s", flush=True)
