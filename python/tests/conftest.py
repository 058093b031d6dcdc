"""Cases for the mhc_verify tests, drawn by the harness itself: `mhc-verify capture` writes a
fixture of our cpu kernel on a generated case, read here with h5py, so the inputs, params and
faithful outputs are independent of the Python code under test."""
import os
import subprocess

import h5py
import numpy as np
import pytest

BIN = os.environ.get("MHC_VERIFY_BIN", "mhc-verify")


def _walk(group):
    out = {}
    group.visititems(lambda n, o: out.__setitem__(n, o[()]) if isinstance(o, h5py.Dataset) else None)
    return out


@pytest.fixture(scope="session")
def capture(tmp_path_factory):
    """capture(op, *options) -> (config, inputs, params, outputs) of our cpu kernel's case."""
    folder = tmp_path_factory.mktemp("captures")
    cache = {}

    def make(op, *options):
        key = (op,) + options
        if key not in cache:
            path = folder / f"{op}_{len(cache)}.h5"
            subprocess.run([BIN, "capture", "--op", op, "--out", str(path), *options], check=True,
                           capture_output=True)
            with h5py.File(path, "r") as f:
                config = {k: (v.decode() if isinstance(v, bytes) else v.item() if hasattr(v, "item") else v)
                          for k, v in f["config"].attrs.items()}
                outputs = {k: v for k, v in _walk(f["outputs"]).items() if not k.startswith("trace/")}
                outputs.update({k[len("trace/"):]: v for k, v in _walk(f["outputs"]).items()
                                if k.startswith("trace/")})
                cache[key] = (config, _walk(f["inputs"]), _walk(f["params"]) if "params" in f else {},
                              outputs)
        config, inputs, params, outputs = cache[key]
        copy = lambda d: {k: np.array(v) for k, v in d.items()}
        return dict(config), copy(inputs), copy(params), copy(outputs)

    return make
