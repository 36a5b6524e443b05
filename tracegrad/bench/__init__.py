"""`python -m tracegrad bench`: the reference workloads (workloads.py), timed and checked.

For each workload every available column is set up on the same inputs; its first call is
timed (trace + compile for compiled columns) and its results are checked against a float64
NumPy reference, and its third call against the NumPy column's third (for a training step: the
third update, the parameters' change over that call), so a later call that goes wrong is not timed
unseen; then the columns run in interleaved rounds (numpy, tg eager, tg compiled, ... in turn,
`repeats` rounds), each sample timing enough calls to last a few ms, and started once the last
column's thread pools have stopped spinning (load.settle), and the median per call is
reported with its ratio to NumPy's median in the same run. A column whose result is wrong, or that
raises, fails the run (exit status 1) after the table; a column without a version of a workload (a
peer's built-in op) shows "-". The floors (floor.py) are measured before any workload; the share of
the machine other processes used while each workload was timed (load.py) is printed, with a warning
where it passed 10 %. `dynamic=True` adds the column "tg dynamic=True": the "tg compiled" setup with
every tg.compile it makes given dynamic=True, timed in the same rounds.

After the table, the cold sequences R1 and R2 (ragged.py, cold.py): training over changing batch
sizes and sequence lengths, each column timed cold in a fresh process, with its number of traces.
"""
import functools
import importlib.util
import math
import os
import statistics
import sys
import time
import traceback

import numpy as np

from .floor import floor_lines
from .floor import measure as measure_floors
from .load import Load, settle
from .workload_base import _np
from .workloads import WORKLOADS, find

TOLERANCE = 1e-3    # max |out - ref| / max |ref|, per output, for float32 results


DYNAMIC = "tg dynamic=True"


def available_columns(dynamic=False):
    import tracegrad as tg
    cols = ["numpy", "tg eager"]
    if hasattr(tg, "compile"):
        cols += ["tg compiled"] + ([DYNAMIC] if dynamic else [])
    if importlib.util.find_spec("torch") is not None:
        cols += ["torch eager", "torch built-in", "torch.compile"]
    if importlib.util.find_spec("jax") is not None:
        cols.append("jax.jit")
    return cols


def max_error(outs, refs):
    """Largest max|out - ref| / max|ref| over the outputs (a scale-aware relative error)."""
    if len(outs) != len(refs):
        raise AssertionError(f"{len(outs)} outputs, the reference has {len(refs)}")
    worst = 0.0
    for i, (o, r) in enumerate(zip(outs, refs)):
        o = np.asarray(o, dtype=np.float64)
        if o.shape != r.shape:
            raise AssertionError(f"output {i} has shape {o.shape}, the reference {r.shape}")
        scale = max(float(np.max(np.abs(r))), 1e-30) if r.size else 1.0
        err = float(np.max(np.abs(o - r))) / scale if r.size else 0.0
        worst = max(worst, err if np.isfinite(err) else math.inf)
    return worst


def check(outs, refs, tolerances=None):
    """(largest error, None or what failed): each output's max_error against its tolerance."""
    max_error(outs, refs)                                      # raises on a count or shape mismatch
    errors = [max_error([o], [r]) for o, r in zip(outs, refs)]
    bad = [f"output {i}: {e:.2e} > {t:g}" for i, (e, t) in enumerate(zip(errors, tolerances or
                                                                        [TOLERANCE] * len(errors))) if not e <= t]
    failure = "result differs from the float64 reference: max rel error " + ", ".join(bad) if bad else None
    return max(errors, default=0.0), failure


def _calibrate(run, target_s):
    t0 = time.perf_counter()
    run()
    dt = time.perf_counter() - t0
    return max(1, min(10_000, int(target_s / max(dt, 1e-7))))


def _sample(run, inner):
    t0 = time.perf_counter()
    for _ in range(inner):
        run()
    return (time.perf_counter() - t0) / inner


class Result:
    def __init__(self):
        self.times, self.first, self.error, self.failure, self.absent = [], None, None, None, False
        self.later_error = None

    @property
    def median(self):
        return statistics.median(self.times) if self.times else None


def third_call(run, stateful):
    """The outputs of run's third call (it has been called once): for a training step, its loss and the
    change of each parameter over that call."""
    second = [_np(o) for o in run()]
    third = [_np(o) for o in run()]
    if not stateful:
        return third
    return [third[0]] + [np.asarray(a, np.float64) - b for a, b in zip(second[1:], third[1:])]


def bench_workload(w, columns, repeats, target_s, log=print):
    """({column: Result}, Load of the timed rounds)."""
    inp = w.inputs()
    refs = w.reference(inp)
    if w.implied:
        refs = [np.asarray(r, dtype=np.float64) for r in w.implied(inp, refs)]
    numpy_run = w.columns["numpy"](inp)
    numpy_run()
    later_refs = [np.asarray(r, np.float64) for r in third_call(numpy_run, w.stateful)]
    results, runs = {}, {}
    for col in columns:
        res = results[col] = Result()
        try:
            run = (compiled_dynamic(w.columns["tg compiled"]) if col == DYNAMIC else w.columns[col])(inp)
            if run is None:                                   # no such op in this column's library
                res.absent = True
                continue
            t0 = time.perf_counter()
            outs = run()
            res.first = time.perf_counter() - t0
            outs = [_np(o) for o in outs]
            if w.implied:
                outs = w.implied(inp, outs)
            res.error, res.failure = check(outs, refs, w.tolerances)
            if res.failure is None:
                res.later_error, failure = check(third_call(run, w.stateful), later_refs, w.tolerances)
                res.failure = failure and "the third call's " + failure
            if res.failure is None:
                runs[col] = (run, _calibrate(run, target_s))
        except Exception as e:  # noqa: BLE001 -- reported in the table, fails the run
            res.failure = f"{type(e).__name__}: {e}"
            log(f"  {w.id} {col}: FAILED\n" + "".join("    " + line for line in
                                                      traceback.format_exc().splitlines(True)[-12:]))
    load = Load()
    for r in range(repeats):                                  # interleaved rounds
        for col, (run, inner) in runs.items():
            settle()                                          # the last column's thread pools idle again
            with load:
                results[col].times.append(_sample(run, inner))
    return results, load


def compiled_dynamic(setup):
    """A "tg compiled" setup whose tg.compile calls all get dynamic=True (the --dynamic column)."""
    def dynamic_setup(inp):
        import tracegrad as tg
        real = tg.compile
        tg.compile = functools.partial(real, dynamic=True)
        try:
            return setup(inp)
        finally:
            tg.compile = real
    return dynamic_setup


def _fmt_ms(s):
    ms = s * 1e3
    return f"{ms:.3f}" if ms < 1 else f"{ms:.2f}" if ms < 100 else f"{ms:.1f}"


def print_table(rows, columns, out=print, floors=None, loads=None):
    """rows: [(workload, {col: Result})]; floors: {workload id: floor.Floor}; loads: {workload id: Load}."""
    width = max(14, *(len(c) + 2 for c in columns))
    head = f"{'workload':24s}" + "".join(f"{c:>{width}s}" for c in columns)
    out("median ms per call (ratio to numpy in this run)")
    out(head)
    out("-" * len(head))
    ratios = {c: [] for c in columns}
    for w, res in rows:
        base = res["numpy"].median
        cells = []
        for c in columns:
            r = res[c]
            if r.absent or r.failure or r.median is None:
                cells.append("-" if r.absent else "FAILED")
                continue
            ratio = r.median / base if base else math.nan
            ratios[c].append(ratio)
            cells.append(f"{_fmt_ms(r.median)} ({ratio:.2f})")
        out(f"{w.id + ' ' + w.name:24s}" + "".join(f"{c:>{width}s}" for c in cells))
    geo = [f"({math.exp(statistics.fmean(math.log(x) for x in ratios[c])):.2f})" if ratios[c] else "-"
           for c in columns]
    out(f"{'geomean ratio':24s}" + "".join(f"{g:>{width}s}" for g in geo))

    if DYNAMIC in columns:
        out("")
        out("tg dynamic=True / tg compiled, median per call in the same rounds: " + ", ".join(
            f"{w.id} {res[DYNAMIC].median / res['tg compiled'].median:.2f}" for w, res in rows
            if res[DYNAMIC].median and "tg compiled" in res and res["tg compiled"].median))
    compiled = [c for c in columns if c.startswith("tg compiled") or c in (DYNAMIC, "torch.compile", "jax.jit")]
    if compiled:
        out("")
        out(f"{'first call, s':24s}" + "".join(f"{c:>{width}s}" for c in compiled) + "   (trace + compile + run)")
        for w, res in rows:
            out(f"{w.id + ' ' + w.name:24s}" + "".join(
                f"{('-' if res[c].first is None else f'{res[c].first:.3f}'):>{width}s}" for c in compiled))
    out("")
    out(f"max rel error, first call vs float64 reference / third call vs NumPy's third (max|out-ref|/max|ref| "
        f"per output; a training step's third: its update; tolerance {TOLERANCE:g} unless the workload sets its own)")
    for w, res in rows:
        out(f"{w.id + ' ' + w.name:24s}" + "".join(f"{_errors(res[c]):>{width}s}" for c in columns))
    floor = floor_lines(rows, columns, width, floors or {})
    if len(floor) > 2:
        out("")
        for line in floor:
            out(line)
    if loads:
        out("")
        out("other processes' share of the machine while each workload was timed: " + ", ".join(
            f"{w.id} {'?' if loads[w.id].others is None else f'{loads[w.id].others:.0%}'}" for w, _ in rows))
        for w, _ in rows:
            if loads[w.id].note():
                out(f"WARNING {w.id}: {loads[w.id].note()}")


def _errors(r):
    if r.error is None:
        return "-"
    return f"{r.error:.1e}" + ("" if r.later_error is None else f"/{r.later_error:.1e}")


def blas_info():
    try:
        from threadpoolctl import threadpool_info
        info = [f"{d.get('internal_api')} {d.get('version')} {d.get('architecture')} threads={d.get('num_threads')}"
                for d in threadpool_info() if d.get("user_api") == "blas"]
        return "; ".join(info) or "unknown"
    except ImportError:
        return "unknown (pip install threadpoolctl to see the kernel)"


def target():
    """The CPU tracegrad's compiled code is built for (TRACEGRAD_CPU, bench --cpu)."""
    from ..backends.cpu import host
    t = host.current()
    return f"{t.spec} (LLVM CPU {t.cpu}, {t.vector_bytes}-byte vectors)"


def main(workload=None, quick=False, repeats=None, out=print, plot=None, dynamic=False):
    from . import cold
    from .ragged import SEQUENCES, find_sequence
    if workload and find_sequence(workload):
        return cold.main([workload], quick=quick, repeats=repeats, out=out)
    rc = steady(workload, quick, repeats, out, plot, dynamic)
    if not workload:
        out("")
        out("cold sequences:")
        rc |= cold.main([s.id for s in SEQUENCES], quick=quick, out=out)
    return rc


def steady(workload=None, quick=False, repeats=None, out=print, plot=None, dynamic=False):
    """The table of W1-W13 (or one of them): median per call in interleaved rounds."""
    import tracegrad as tg
    columns = available_columns(dynamic)
    selected = [find(workload)] if workload else WORKLOADS
    repeats = repeats or (5 if quick else 9)
    target_s = 0.005 if quick else 0.02
    env = {k: os.environ[k] for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "OMP_NUM_THREADS") if k in os.environ}
    out(f"tracegrad {tg.__version__}, numpy {np.__version__}, {os.cpu_count()} cpus; BLAS: {blas_info()}; "
        f"env {env or '{}'}")
    out(f"compiled code for: {target()}")
    out(f"columns: {', '.join(columns)}; {repeats} interleaved rounds; each sample >= {target_s * 1e3:g} ms")
    if "tg compiled" not in columns:
        out("(tg.compile is not available in this build: no compiled column)")
    out("")
    out("floors, measured first:")
    floors = measure_floors(selected, log=out)
    rows, loads = [], {}
    for w in selected:
        t0, c0 = time.perf_counter(), time.process_time()
        res, loads[w.id] = bench_workload(w, columns, repeats, target_s, log=out)
        rows.append((w, res))
        print(f"  {w.id} {w.name} done in {time.perf_counter() - t0:.1f} s ({time.process_time() - c0:.1f} s of CPU)",
              file=sys.stderr, flush=True)
    out("")
    print_table(rows, columns, out=out, floors=floors, loads=loads)
    if plot:
        from ..viz.bars import write_bench
        write_bench([(f"{w.id} {w.name}", {c: None if res[c].failure else res[c].median for c in columns
                                           if not res[c].absent}) for w, res in rows], columns, plot)
        out(f"\nwrote {plot}")
    failures = [(w, c, res[c].failure) for w, res in rows for c in columns if res[c].failure]
    if failures:
        out("")
        for w, c, why in failures:
            out(f"FAIL {w.id} {w.name} [{c}]: {why}")
        return 1
    return 0
