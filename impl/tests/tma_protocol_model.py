#!/usr/bin/env python3
"""A model of boundary_tc_tma's synchronisation (impl/cuda/boundary_tc.cuh), run on the host.

One block: a producer thread and NW computing warps, STAGES stages, n chunks. The model has the
kernel's three transaction barriers a stage (full, staged, empty) with phases, arrival counts and
byte counts, its two named barriers, tensor loads that write a stage some time after they are
issued and tensor stores that read it some time after, and cp.async.bulk.wait_group.read. It runs
random interleavings and checks that none deadlocks, that phase A reads the chunk loaded for it,
that phase B and the stores read phase A's output of their chunk, that no load overwrites a stage
that a phase or a store still reads, and that the epilogue reuses no stage a store still reads.

It models the protocol, not the code: a change to the kernel's barriers must be made here too.
It does not model memory proxies (the fences) or the hardware's timing. Each MUTANT removes one
wait or flips one parity; the run fails unless the model passes and catches every mutant.
"""
import random
import sys

MUTANTS = {
    "no empty wait before a refill": "empty",
    "no store read wait before a refill": "read",
    "full waited with the wrong parity": "parity",
    "no barrier before the epilogue": "epilogue",
    "stores before staged": "staged",
}


LANES = 32


class MBarrier:
    def __init__(self, count):
        self.count, self.pending, self.tx, self.phase = count, count, 0, 0

    def arrive(self, expect_bytes=0):
        self.tx += expect_bytes
        self.pending -= 1
        assert self.pending >= 0, "more arrivals than the barrier's count"
        self._settle()

    def complete(self, nbytes):
        self.tx -= nbytes
        self._settle()

    def _settle(self):
        if self.pending == 0 and self.tx == 0:
            self.phase += 1
            self.pending = self.count

    def done(self, parity):  # mbarrier.try_wait.parity: the phase of this parity has completed
        return (self.phase & 1) != parity


class Violation(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Violation(what)


def run(stages, n, nw, seed, mutant=None):
    rng = random.Random(seed)
    full = [MBarrier(1) for _ in range(stages)]
    staged = [MBarrier(1) for _ in range(stages)]
    empty = [MBarrier(LANES * nw) for _ in range(stages)]  # an arrival a thread
    holds = [None] * stages  # ("in", j): chunk j loaded; ("out", j): its x and y written
    written = [set() for _ in range(stages)]  # warps whose phase A of the held chunk is done
    readers = [set() for _ in range(stages)]
    pending = []  # asynchronous events: a box landing, a store reading its stage
    stores = []  # the producer's stores not yet read (its bulk group)
    named = {1: [set(), 0, nw], 2: [set(), 0, nw + 1]}  # arrived, generation, threads (warps)
    boxes = 6  # 5 rows and hc_fn: the bytes are counted in boxes
    stage = lambda j: j % stages
    parity = lambda j: (j // stages) & 1

    def barrier(i, who):  # returns the generation to wait past
        arrived, gen, need = named[i]
        arrived.add(who)
        if len(arrived) == need:
            named[i] = [set(), gen + 1, need]
        return gen

    def passed(i, gen):
        return named[i][1] > gen

    def load(j):
        st = stage(j)
        full[st].arrive(boxes)
        for _ in range(boxes):
            def land(st=st, j=j):
                check(not readers[st], f"the load of chunk {j} overwrites stage {st} while "
                                       f"{sorted(readers[st])} read it")
                holds[st] = ("in", j)
                full[st].complete(1)
            pending.append(land)

    def store(j):
        st = stage(j)
        rec = {"read": False}
        stores.append(rec)
        readers[st].add(("store", j))

        def read(st=st, j=j, rec=rec):
            check(holds[st] == ("out", j), f"the store of chunk {j} reads {holds[st]}")
            readers[st].discard(("store", j))
            rec["read"] = True
        pending.append(read)

    def producer():
        for j in range(min(n, stages)):
            load(j)
            yield None
        for j in range(n):
            st = stage(j)
            if mutant != "staged":
                yield lambda st=st, j=j: staged[st].done(parity(j))
            store(j)
            yield None
            if j + stages < n:
                if mutant != "empty":
                    yield lambda st=st, j=j: empty[st].done(parity(j))
                if mutant != "read":
                    yield lambda: all(r["read"] for r in stores)
                load(j + stages)
                yield None
        yield lambda: all(r["read"] for r in stores)
        gen = barrier(2, "producer")
        yield lambda: passed(2, gen)

    def consumer(w):
        for j in range(n):
            st = stage(j)
            p = parity(j) ^ (1 if mutant == "parity" else 0)
            yield lambda st=st, p=p: full[st].done(p)
            check(holds[st] == ("in", j) and w not in written[st],
                  f"warp {w}'s phase A of chunk {j} finds {holds[st]}")
            readers[st].add(("A", w))
            yield None
            readers[st].discard(("A", w))
            check(holds[st] == ("in", j), f"warp {w} writes chunk {j} over {holds[st]}")
            written[st].add(w)
            if len(written[st]) == nw:
                holds[st] = ("out", j)
                written[st] = set()
            yield None
            gen = barrier(1, w)
            yield lambda gen=gen: passed(1, gen)
            if w == 0:
                staged[st].arrive()
            check(holds[st] == ("out", j), f"warp {w}'s phase B of chunk {j} finds {holds[st]}")
            readers[st].add(("B", w))
            yield None
            readers[st].discard(("B", w))
            for _ in range(LANES):  # each thread after its own reads (the model's reads are a warp's)
                empty[st].arrive()
            yield None
        if mutant != "epilogue":
            gen = barrier(2, w)
            yield lambda gen=gen: passed(2, gen)
        for st in range(stages):  # the epilogue writes the partial products over the stages
            check(not any(r[0] == "store" for r in readers[st]),
                  f"warp {w}'s epilogue overwrites stage {st} while a store reads it")

    procs = {"producer": producer(), **{w: consumer(w) for w in range(nw)}}
    waiting = {k: None for k in procs}
    while procs or pending:
        ready = [k for k in procs if waiting[k] is None or waiting[k]()]
        moves = [("run", k) for k in ready] + [("event", i) for i in range(len(pending))]
        if not moves:
            raise Violation(f"deadlock: {sorted(map(str, procs))} wait forever")
        kind, x = rng.choice(moves)
        if kind == "event":
            pending.pop(x)()
            continue
        try:
            waiting[x] = next(procs[x])
        except StopIteration:
            del procs[x], waiting[x]


def sweep(mutant=None, seeds=150):
    """The first violation over every shape and seed, or None."""
    for stages in (2, 3):
        for n in range(1, 8):
            for nw in (4, 8):  # tb32 and tb64
                for seed in range(seeds):
                    try:
                        run(stages, n, nw, seed, mutant)
                    except Violation as e:
                        return f"stages={stages} n={n} warps={nw} seed={seed}: {e}"
    return None


def main():
    bad = sweep()
    if bad:
        print(f"FAIL: the protocol: {bad}")
        return 1
    print("ok: 4200 interleavings (2-3 stages, 1-7 chunks, 4 and 8 warps), no deadlock or race")
    for name, key in MUTANTS.items():
        caught = sweep(key)
        if not caught:
            print(f"FAIL: mutant '{name}' is not caught: the model cannot see that bug")
            return 1
        print(f"ok: mutant '{name}' caught ({caught})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
