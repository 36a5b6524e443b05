"""`python -m tracegrad.bench.gathers [rounds]`: cross_entropy with int labels, forward + backward,
with label picks fused (ir/passes/gathers.py) against the same program as before (picks and their
scatter-add gradients as host kernels, the softmax numerator saved, no hoisted label count), apart
and joined, interleaved in one process; medians, each against the bandwidth floor (floor.py: the
bytes that must move, copied in the same rounds) and the bytes its kernels move (stage="kernels")."""
import statistics
import sys
import time

import numpy as np

SHAPES = ((4096, 1000), (512, 32000))


def _variant(after):
    """Switch the three steps of the fused form on (after) or off (the program before them)."""
    from ..ir.passes import fusion, gathers, merge, remat
    fusion.index_tree = gathers.index_tree if after else (lambda n, trees: None)
    remat._online_exp = _REAL["online"] if after else (lambda v: False)
    merge.hoist = _REAL["hoist"] if after else (lambda kernels: kernels)


_REAL = {}


def _step(shape, after, joined_mode):
    import tracegrad as tg
    import tracegrad.nn.functional as F
    from ..jit import joined
    rng = np.random.default_rng(0)
    x = tg.tensor(rng.standard_normal(shape).astype(np.float32), requires_grad=True)
    y = tg.tensor(rng.integers(0, shape[1], shape[0]))
    f = tg.compile(lambda x, y: F.cross_entropy(x, y))

    def step():
        joined.JOIN_AFTER = 2 if joined_mode else 10 ** 9
        _variant(after)
        f(x, y).backward()
        x.grad = None
    for _ in range(4):
        step()
    entry = f._entry_for((x, y), {})[0]
    if joined_mode:
        program = getattr(entry, "joined_program", None)
        moved = None if program is None else sum(k.bytes_moved() for k in program.kernels)
    else:
        moved = sum(k.bytes_moved() for p in entry.programs for k in p.kernels)
    return step, moved


def main(rounds=15):
    from ..ir.passes import merge, remat
    from .floor import floor_setup
    _REAL.update(online=remat._online_exp, hoist=merge.hoist)
    for n, c in SHAPES:
        must = {"apart": 3 * n * c * 4, "joined": 2 * n * c * 4}     # read x (twice apart), write dx
        runs = {(a, m): _step((n, c), a, m == "joined") for a in (False, True) for m in must}
        floors = {m: [floor_setup(b, True), floor_setup(b, False)] for m, b in must.items()}
        times = {k: [] for k in runs}
        ftimes = {m: [[], []] for m in must}
        for _ in range(rounds):
            for k, (step, _) in runs.items():
                t0 = time.perf_counter()
                step()
                times[k].append(time.perf_counter() - t0)
            for m, fs in floors.items():
                for i, run in enumerate(fs):
                    t0 = time.perf_counter()
                    run()
                    ftimes[m][i].append(time.perf_counter() - t0)
        _variant(True)
        print(f"cross_entropy {n}x{c} float32 forward+backward, medians of {rounds} interleaved rounds")
        for m in must:
            floor = min(statistics.median(t) for t in ftimes[m])
            print(f"  {m}: floor {must[m] / 1e6:.1f} MB must move, {floor * 1e3:.3f} ms")
            for after in (False, True):
                med, moved = statistics.median(times[(after, m)]), runs[(after, m)][1]
                note = "kernels move " + (f"{moved / 1e6:.1f} MB" if moved else "- (no joined call: it saves "
                                                                               "too little)")
                print(f"    {'after ' if after else 'before'} {med * 1e3:9.3f} ms  {med / floor:5.2f}x floor  {note}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 15)
