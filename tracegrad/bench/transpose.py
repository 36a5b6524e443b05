"""Transposing maps against a plain copy of the same bytes (floor.py's floor), in one run:
`y = x.T * 2`, `x.T.contiguous()`-like copies and batched permutes of the two inner axes, compiled,
beside the same map over a contiguous x (`x * 2`), each returning a fresh array and writing into an
existing one. Each median over interleaved rounds is divided by the floor's median in the same
rounds (the copy of as many bytes as the case reads and writes, into an existing array: the faster
of numba on tracegrad's threads and NumPy's one-thread copy).

    python -m tracegrad.bench.transpose [--quick] [--rounds N] [--dtype float32|float64|both] [--cpu]
    TRACEGRAD_THREADS=1 python -m tracegrad.bench.transpose --cpu       # one thread, CPU time: steadier
"""
import argparse
import statistics
import time
from functools import partial

import numpy as np

from .floor import floor_setup


def cases(dtype, quick=False):
    """[(label, function, input array)]: each reads one array and writes one of the same size."""
    n = 1024 if quick else 4096
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, n)).astype(dtype)
    tail = rng.standard_normal((n, n - 3)).astype(dtype)            # x.T's rows whole lines, a cut last tile
    odd = rng.standard_normal((n - 3, n + 5)).astype(dtype)         # x.T's rows not whole lines
    b = rng.standard_normal((16, n // 4, n // 4 - 3)).astype(dtype)
    return [("x * 2 (contiguous)", lambda x: x * 2.0, x),
            ("x.T * 2", lambda x: x.T * 2.0, x),
            ("x.T copy (x.T + 0)", lambda x: x.T + 0.0, x),
            (f"{tail.shape} .T.exp()", lambda x: x.T.exp(), tail),
            (f"{b.shape} permute(0,2,1) * 2", lambda x: x.permute(0, 2, 1) * 2.0, b),
            (f"{odd.shape} .T * 2 (rows not lines)", lambda x: x.T * 2.0, odd)]


def _into(fn, x, y):
    y.copy_(fn(x))


def _time(run, inner, clock=time.perf_counter):
    t0 = clock()
    for _ in range(inner):
        run()
    return (clock() - t0) / inner


def measure(dtype, quick=False, rounds=9, clock=time.perf_counter):
    """[(label, fresh s, into s, floor s)] for dtype's cases, medians over interleaved rounds: the
    compiled map returning a fresh array (its pages are new to the process at each call: the OS
    zeroes them first), writing into an existing one (`y.copy_(f(x))`, one kernel storing into y),
    and the floor of the same bytes (into an existing array)."""
    import tracegrad as tg
    rows = []
    for label, fn, a in cases(dtype, quick):
        x = tg.tensor(a)
        ref = fn(x).numpy()
        y = tg.tensor(np.empty_like(ref))
        fresh, into = tg.compile(fn), tg.compile(partial(_into, fn))
        np.testing.assert_allclose(fresh(x).numpy(), ref, rtol=1e-6)     # exp: within float rounding
        into(x, y)
        np.testing.assert_allclose(y.numpy(), ref, rtol=1e-6)
        runs = {"fresh": lambda: fresh(x), "into": lambda: into(x, y), "floor": floor_setup(2 * a.nbytes),
                "floor1": floor_setup(2 * a.nbytes, threaded=False)}
        times = {k: [] for k in runs}
        for _ in range(rounds):
            for k, run in runs.items():
                times[k].append(_time(run, 3, clock))
        med = {k: statistics.median(v) for k, v in times.items()}
        rows.append((label, med["fresh"], med["into"], min(med["floor"], med["floor1"])))
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m tracegrad.bench.transpose", description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="1024-sized arrays instead of 4096")
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--dtype", default="both", choices=("float32", "float64", "both"))
    p.add_argument("--cpu", action="store_true", help="time the process's CPU time, not the wall clock (steadier on "
                   "a shared machine; with TRACEGRAD_THREADS=1 the floor is NumPy's one-thread copy)")
    args = p.parse_args(argv)
    clock = time.process_time if args.cpu else time.perf_counter
    print(f"{'case':44s}{'dtype':>9s}{'floor ms':>10s}{'fresh ms':>10s}{'/floor':>8s}{'into ms':>9s}{'/floor':>8s}")
    for dt in (("float32", "float64") if args.dtype == "both" else (args.dtype,)):
        for label, fresh, into, floor in measure(np.dtype(dt), args.quick, args.rounds, clock):
            print(f"{label:44s}{dt:>9s}{floor * 1e3:10.2f}{fresh * 1e3:10.2f}{fresh / floor:8.2f}"
                  f"{into * 1e3:9.2f}{into / floor:8.2f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
