"""torch_boundary_faithful.py SOURCE_DIR: bench/torch_boundary.py's boundary, the function the GPU
tables time PyTorch on, judged by the harness: fp32 forward and its autograd backward, and bf16
streams' forward under the bf16 declaration, so that the speed-ups compare our kernels with the
same function. Exit 1 if any fails, 77 without torch."""
import os
import sys

try:
    import torch
except ImportError:
    print("SKIP: no torch")
    sys.exit(77)
import mhc_verify

sys.path.insert(0, os.path.join(sys.argv[1], "bench"))
import torch_boundary as tb  # noqa: E402

T, d = 3, 64
config = {"d": d}
names_in = ["f", "residual", "post", "comb", "pre_mix"]
names_params = ["hc_fn", "hc_scale", "hc_base"]
names_out = ["x", "y", "mixes", "pre", "post", "comb"]
args = [a.requires_grad_() for a in tb.inputs(T, d=d)]
outs = tb.boundary(*args)


def arrays(names, tensors):
    return {k: v.detach().numpy() for k, v in zip(names, tensors)}


failed = 0
j = mhc_verify.judge("boundary", config, arrays(names_in, args[:5]), arrays(names_out, outs),
                     arrays(names_params, args[5:]), save_dir=None)
print("boundary:", j)
failed += not j.passed

g = torch.Generator().manual_seed(2)
upstream = [torch.randn(o.shape, generator=g) for o in outs]
grads = torch.autograd.grad(outs, args, upstream)
inputs = arrays(names_in, args[:5])
inputs.update({"upstream_" + k: u.numpy() for k, u in zip(names_out, upstream)})
j = mhc_verify.judge("boundary_backward", config, inputs,
                     {"grad_" + k: v.numpy() for k, v in zip(names_in + names_params, grads)},
                     arrays(names_params, args[5:]), save_dir=None)
print("boundary_backward:", j)
failed += not j.passed
# bf16 streams (the GPU table's other rows): bf16 tensors judged with their rounding.
args = tb.inputs(T, stream=torch.bfloat16, d=d)
j = mhc_verify.judge("boundary", config, dict(zip(names_in, args[:5])),
                     dict(zip(names_out, tb.boundary(*args))), dict(zip(names_params, args[5:])),
                     precision="bf16", save_dir=None)
print("boundary, bf16 streams:", j)
failed += not j.passed
sys.exit(1 if failed else 0)
