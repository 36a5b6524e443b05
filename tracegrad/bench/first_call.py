"""W12's compiled step, the first and second call right after something else ran and the process went
idle (bench/load.py `settle`, as the bench waits before each sample), and what the threads did meanwhile:

    python -m tracegrad.bench.first_call [--reps 12] [--before none,numpy,sleep] [--dynamic]

`before`: none (nothing), numpy (a 512x512 float32 product in NumPy: OpenBLAS's threads run it, then
spin ~0.1 s, which settle waits out), sleep (0.15 s idle). Per kind, medians: the first and second call's
ms, the milliseconds the process's threads waited on the kernel's run queue during the first call (a
worker placed on the caller's core shows here: both wait for each other), how many of the first call's
parallel regions ran on the pool (the rest on the calling thread: their Judges found the pool slower),
and how often the pool's worker woke on the caller's CPU and moved off it (threads.Pool._placed).
Kinds are interleaved; the load of other processes is printed beside the figures."""
import argparse
import os
import statistics
import time

import numpy as np

from . import transformer as T
from .load import Load, settle


def _runqueue_ms():
    """Milliseconds this process's threads have waited on a run queue (/proc: Linux; 0 elsewhere)."""
    total = 0
    try:
        for tid in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{tid}/schedstat") as fh:
                total += int(fh.read().split()[1])
    except OSError:
        return 0.0
    return total / 1e6


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=12)
    ap.add_argument("--before", default="none,numpy,sleep")
    ap.add_argument("--dynamic", action="store_true", help="compile the step with dynamic=True")
    args = ap.parse_args(argv)
    import tracegrad as tg
    from ..backends.cpu import judge, threads
    inp = T.inputs()
    step, _ = T.tg_steps(inp, (lambda f: tg.compile(f, dynamic=True)) if args.dynamic else tg.compile)
    idx, tgt = tg.from_numpy(inp["idx"]), tg.from_numpy(inp["tgt"])
    for _ in range(3):
        step(idx, tgt)
    pool, a = threads.pool(), np.random.default_rng(0).standard_normal((512, 512)).astype(np.float32)
    runs = {"none": lambda: None, "numpy": lambda: a @ a, "sleep": lambda: time.sleep(0.15)}
    kinds = [k for k in args.before.split(",") if k in runs]
    modes, record = [0, 0], judge.Judge.record

    def counting(judge, parallel, seconds):
        modes[0 if parallel else 1] += 1
        return record(judge, parallel, seconds)
    judge.Judge.record = counting
    rows, load = {k: [] for k in kinds}, Load()
    try:
        for _ in range(args.reps):
            for kind in kinds:
                runs[kind]()
                settle()
                q0, m0, moves = _runqueue_ms(), list(modes), pool.moves
                with load:
                    t0 = time.perf_counter()
                    step(idx, tgt)
                    t1 = time.perf_counter()
                    q1, m1, moved = _runqueue_ms(), list(modes), pool.moves - moves
                    step(idx, tgt)
                    t2 = time.perf_counter()
                rows[kind].append(((t1 - t0) * 1e3, (t2 - t1) * 1e3, q1 - q0, m1[0] - m0[0], m1[1] - m0[1], moved))
    finally:
        judge.Judge.record = record
    print(f"W12 {'dynamic=True' if args.dynamic else 'compiled'}, median of {args.reps}; load average "
          f"{os.getloadavg()[0]:.1f}")
    for kind, v in rows.items():
        med = [statistics.median(x[i] for x in v) for i in range(5)]
        print(f"after {kind:6s} first {med[0]:6.2f} ms, second {med[1]:6.2f} ms; first call: run-queue wait "
              f"{med[2]:5.2f} ms, regions on the pool {med[3]:.0f} / on the caller {med[4]:.0f}, worker moved "
              f"off the caller's CPU {sum(x[5] for x in v)} times in {len(v)} calls")
    if load.note():
        print(load.note())


if __name__ == "__main__":
    main()
