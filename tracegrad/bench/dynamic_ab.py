"""dynamic=True against the static compile, and both against another revision, in one process.

    python -m tracegrad.bench.dynamic_ab [--rev main] [--runs 9] [--calls 10] [--only W6,DEEP64,W3@8]

For each program, four setups are timed in alternation (`rounds`): this tree's static compile
and dynamic=True, and the other revision's (`--rev`, loaded as ab.py does; `--rev ''`: this tree only).
Programs: the bench's workloads by id (workloads.py: "tg compiled", and that setup with every
tg.compile given dynamic=True), DEEP64 (ab.py's), and NAME@ROWS: workload NAME whose dynamic=True
function is first called (and its loss's backward run) with the inputs' 2-D arrays cut to ROWS rows,
then timed at the workload's sizes: the program traced at a ragged small batch and run at a large one,
against the static compile at the large sizes. The table: per side the median per-call wall time of
each setup and dynamic/static, with the process CPU time's ratio beside it (the threads' work)."""
import argparse
import functools
import importlib
import os
import statistics
import time

from . import ab
from .load import settle


def _small_first(f, rows, tg):
    """f, whose first call is preceded by one at its 2-D tensor arguments' first `rows` rows (and the
    backward of that call's output where it needs a gradient)."""
    first = [True]

    def call(*args):
        if first[0]:
            first[0] = False
            cut = [tg.tensor(a.detach().numpy()[:rows], requires_grad=a.requires_grad)
                   if isinstance(a, tg.Tensor) and a.ndim == 2 else a for a in args]
            out = f(*cut)
            if getattr(out, "requires_grad", False):
                out.backward()
        return f(*args)
    return call


def _setup(name, dynamic):
    """setup(tg) -> run for program `name`, static or dynamic=True, from package tg's own bench modules
    (a workload module imports the package it belongs to)."""
    wid, _, rows = name.partition("@")

    def setup(tg):
        bench = lambda mod: importlib.import_module(f"{tg.__name__}.bench.{mod}")     # noqa: E731
        real = tg.compile
        if dynamic:
            tg.compile = functools.partial(real, dynamic=True) if not rows else \
                (lambda fn=None, **kw: _small_first(real(fn, dynamic=True, **kw), int(rows), tg))
        try:
            if wid == "DEEP64":
                return bench("ab")._mlp(tg, batch=8, sizes=(16,) * 65 + (4,))
            w = bench("workloads").find(wid)
            return ab._traced(w.columns["tg compiled"](w.inputs()))     # (a step importing tracegrad as it traces)
        finally:
            tg.compile = real
    return setup


def _time(run, calls):
    """(wall, process CPU) seconds per call of `calls` calls, once the threads of the last ones idle."""
    settle()
    w0, c0 = time.perf_counter(), time.process_time()
    for _ in range(calls):
        run()
    return (time.perf_counter() - w0) / calls, (time.process_time() - c0) / calls


def rounds(setups, runs, calls):
    """{key: [(wall, CPU) per call of each round]}: the setups made once (in order), warmed by three calls,
    then `runs` rounds of `calls` calls of each in turn, the order reversed every other round."""
    run = {key: make() for key, make in setups.items()}
    for r in run.values():
        for _ in range(3):
            r()
    times, order = {key: [] for key in setups}, list(setups)
    for i in range(runs):
        for key in (order if i % 2 == 0 else order[::-1]):
            times[key].append(_time(run[key], calls))
    return times


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rev", default="main")
    p.add_argument("--runs", type=int, default=9)
    p.add_argument("--calls", type=int, default=10)
    p.add_argument("--only", default="W6,W8,DEEP64,W10,W11,W12,W3@8,W2@8")
    args = p.parse_args(argv)
    import tracegrad as new
    packages = {"new": new} if not args.rev else {"old": ab._load_old(ab._archive(args.rev)), "new": new}
    print(f"per-call medians (wall ms) of {args.runs} rounds x {args.calls} calls, interleaved; new = this tree, "
          f"old = {args.rev or '-'}; dyn/st: wall, cpu: process CPU time's; load {os.getloadavg()[0]:.2f}")
    print(f"{'program':10} " + " ".join(f"{s + ' static':>11} {s + ' dyn':>9} {'dyn/st':>6} {'cpu':>5}" for s in packages))
    for name in args.only.split(","):
        setups = {(side, dyn): (lambda tg=tg, s=_setup(name, dyn): ab._as(tg, lambda: s(tg)))
                  for side, tg in packages.items() for dyn in (False, True)}
        times = rounds(setups, args.runs, args.calls)
        row = []
        for side in packages:
            st, dy = ([statistics.median(t[k] for t in times[(side, d)]) for k in (0, 1)] for d in (False, True))
            row.append(f"{st[0] * 1e3:11.3f} {dy[0] * 1e3:9.3f} {dy[0] / st[0]:6.2f} {dy[1] / st[1]:5.2f}")
        print(f"{name:10} " + " ".join(row) + f"   (load {os.getloadavg()[0]:.2f})", flush=True)


if __name__ == "__main__":
    main()
