"""Independent checks of mhc-verify sinkhorn (sinkhorn.sh): a numpy Sinkhorn with the eps
placements of docs/semantics.md, and numpy products of the captured combs.

    sinkhorn_check.py map A.json B.json ...       the maps' cells are equal
    sinkhorn_check.py write SRC OUT.h5            a split_sinkhorn fixture of 64 tokens
    sinkhorn_check.py captured OUT.h5 REPORT      the report's figures against numpy's
    sinkhorn_check.py gain STACK.h5 GAIN CAPTURED the captured combs' gains against numpy's
"""
import json
import sys

import h5py
import numpy as np

U = 2.0 ** -53
N, T, ITERS = 4, 64, 20
EPS = 2.0 ** -20  # exact in fp32: the file and numpy use the same value


def entries(path):
    return json.load(open(path))["entries"]


def sinkhorn_rounds(L, eps, rounds):
    """The iterate after each round: softmax (+eps after), column division; then rows, columns."""
    E = np.exp(L - L.max(axis=1, keepdims=True))
    C = E / E.sum(axis=1, keepdims=True) + eps
    C = C / (C.sum(axis=0, keepdims=True) + eps)
    yield C
    for _ in range(rounds - 1):
        C = C / (C.sum(axis=1, keepdims=True) + eps)
        C = C / (C.sum(axis=0, keepdims=True) + eps)
        yield C


def distance(C, target):
    return max(np.abs(C.sum(axis=1) - target).max(), np.abs(C.sum(axis=0) - target).max())


def quantile(values, q):
    v = sorted(values)
    return v[min(len(v) - 1, int(q * (len(v) - 1) + 0.5))]


def logits():
    rng = np.random.default_rng(7)
    out = []
    for t in range(T):
        L = rng.normal(size=(N, N))
        L[np.arange(N), rng.permutation(N)] += 9.0 * t / (T - 1)
        out.append(L.astype(np.float32))
    return out


def write(src, path):
    sys.path.insert(0, src + "/fixtures/capture")
    import mhc_fixture
    M = (2 + N) * N
    mixes = np.zeros((T, M), np.float32)
    for t, L in enumerate(logits()):
        mixes[t, 2 * N:] = L.reshape(-1)
    mhc_fixture.write_fixture(path, "split_sinkhorn",
                              {"hc_mult": N, "dim": 8, "sinkhorn_iters": ITERS, "hc_eps": EPS,
                               "norm_eps": 1e-6},
                              {"mixes": mixes},
                              {"hc_scale": np.ones(3, np.float32),
                               "hc_base": np.zeros(M, np.float32)})


def captured(path, report):
    (e,) = entries(report)
    facts = e["facts"]
    dist, need3, need6, near = [], [], [], 0
    for L in logits():
        L = L.astype(np.float64)
        need = {1e-3: None, 1e-6: None}
        for k, C in enumerate(sinkhorn_rounds(L, EPS, 100000), start=1):
            if k == ITERS:
                dist.append(distance(C, 1.0))
                rows = C.argmax(axis=1)
                near += bool((C.max(axis=1) >= 0.99).all() and len(set(rows)) == N)
            d = distance(C, 1 - EPS)
            for tol in need:
                if need[tol] is None and d <= tol:
                    need[tol] = k
            if need[1e-6] is not None and k >= ITERS:
                break
        need3.append(need[1e-3])
        need6.append(need[1e-6])
    want = {"distance_median": quantile(dist, 0.5), "distance_p99": quantile(dist, 0.99),
            "distance_max": max(dist), "rounds_1e3_median": quantile(need3, 0.5),
            "rounds_1e3_max": max(need3), "rounds_1e6_median": quantile(need6, 0.5),
            "rounds_1e6_max": max(need6), "near_permutation_share": near / T,
            "above_1e3": sum(d > 1e-3 for d in dist), "above_1e6": sum(d > 1e-6 for d in dist)}
    print("numpy:", want)
    print("report:", facts)
    assert facts["rounds_predicted_tokens"] == "0", "every token was counted"
    assert 0 < near < T and max(need6) > ITERS, "the fixture spans the regimes"
    for key, w in want.items():
        got = float(facts[key])
        # %.9g in the report; two double Sinkhorns of 2K - 1 divisions differ by at most
        # 2 (2K (n + 1) + n) u in a line sum (docs/semantics.md derivation of the property test).
        tol = 5e-9 * abs(w) + 2 * (2 * ITERS * (N + 1) + N) * U
        assert abs(got - w) <= tol, f"{key}: report {got}, numpy {w}"


def gain(stack, report, captured_report):
    with h5py.File(stack) as f:
        layers = int(f["config"].attrs["layers"])
        trace = f["outputs/trace"]
        combs = [np.asarray(trace[f"L{l}.{s}.comb"], np.float64).reshape(-1, N, N)
                 for l in range(layers) for s in ("attn", "ffn")]
    sites = [e["id"].rsplit(" ", 1)[1] for e in entries(captured_report)]
    assert sites == [f"L{l}.{s}" for l in range(layers) for s in ("attn", "ffn")], sites
    (e,) = entries(report)
    curve = {g["label"]: g for g in e["gains"]}["captured"]
    tokens = combs[0].shape[0]
    want = {k: np.zeros(len(combs)) for k in ("forward", "backward", "spectral")}
    for t in range(tokens):
        H = np.eye(N)
        for s, C in enumerate(combs):
            H = C[t].T @ H
            want["forward"][s] = max(want["forward"][s], np.abs(H).sum(axis=1).max())
            want["backward"][s] = max(want["backward"][s], np.abs(H).sum(axis=0).max())
            want["spectral"][s] = max(want["spectral"][s], np.linalg.norm(H, 2))
    for key, w in want.items():
        # Products of nonnegative matrices: each entry within depth n u of exact, per side.
        tol = 4 * len(combs) * N * U * w + 1e-15
        assert np.all(np.abs(np.array(curve[key]) - w) <= tol), (key, curve[key], w)
    print("gains as numpy's:", {k: v.tolist() for k, v in want.items()})


if __name__ == "__main__":
    what = sys.argv[1]
    if what == "map":
        maps = [entries(p)[0]["map"] for p in sys.argv[2:]]
        assert all(c["cases"] == 30 for c in maps[0]) and len(maps[0]) == 4 * 2 * 3 * 2
        for m in maps[1:]:
            assert m == maps[0], "maps differ"
        print("maps equal:", len(maps[0]), "cells")
    elif what == "write":
        write(sys.argv[2], sys.argv[3])
    elif what == "captured":
        captured(sys.argv[2], sys.argv[3])
    elif what == "gain":
        gain(sys.argv[2], sys.argv[3], sys.argv[4])
