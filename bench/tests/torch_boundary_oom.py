"""torch_boundary_oom.py SOURCE_DIR: bench/torch_boundary.py times the next token count after one
the device's memory cannot hold, and names the one it skipped. The inputs of one count raise
PyTorch's CUDA out-of-memory error (as fp32 autograd does at 65536 tokens on an 80 GB card), on the
CPU, eager and backward. Exit 1 if a line is missing or wrong, 77 without torch."""
import contextlib
import io
import os
import re
import sys

try:
    import torch
except ImportError:
    print("SKIP: no torch")
    sys.exit(77)

sys.path.insert(0, os.path.join(sys.argv[1], "bench"))
import torch_boundary as tb  # noqa: E402

real_inputs = tb.inputs


def inputs(T, *args, **kwargs):
    if T == 2:
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB.")
    return real_inputs(T, *args, d=64, **kwargs)


tb.inputs = inputs
failed = 0
for mode in ("eager", "backward"):
    sys.argv = ["torch_boundary.py", "1,2,3", "3", "1", "cpu", "float32", mode]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        tb.main()
    lines = out.getvalue().splitlines()
    names = ["eager"] if mode == "eager" else ["backward-eager", "backward-compile"]
    want = []
    for name in names:
        prefix = f"torch-{name}-float32-cpu"
        if name.endswith("compile") and not hasattr(torch, "compile"):
            want.append(re.escape(f"{prefix} unavailable") + ".*")
            continue
        want += [re.escape(prefix) + r" 1 [0-9.]+ [0-9]+", re.escape(prefix) + " 2 out-of-memory",
                 re.escape(prefix) + r" 3 [0-9.]+ [0-9]+"]
    ok = len(lines) == len(want) and all(re.fullmatch(w, l) for w, l in zip(want, lines))
    if not ok or "Tried to allocate" not in err.getvalue():
        failed += 1
        print(f"FAIL {mode}: stdout {lines!r}, stderr {err.getvalue()!r}")
    else:
        print(f"ok {mode}: " + "; ".join(lines))
sys.exit(1 if failed else 0)
