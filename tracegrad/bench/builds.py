"""`python -m tracegrad bench --cpu native,x86-64-v3`: one table, a "tg compiled" column per build.

Each build runs in a process of its own (TRACEGRAD_CPU set before tracegrad is imported, so nothing
compiled for one build is reused by the other, and each calibrates its own thresholds): the first
process runs every column (numpy, tg eager, the peers, tg compiled), the others numpy and tg compiled
only. The floors are measured once, first, in this process. Each process interleaves its own columns
in rounds; two builds are timed one after the other, not interleaved, so compare their columns in a
quiet run (the load line gives each process's share of the machine that others used). Ratios are to
the first process's numpy column (a later process times numpy too, beside its build, but only to
interleave the same way).
"""
import json
import os
import subprocess
import sys
import tempfile

from . import Result, available_columns, bench_workload, print_table
from .floor import measure as measure_floors
from .workloads import WORKLOADS, find

FIELDS = ("times", "first", "error", "later_error", "failure", "absent")


class _Load:
    """A child process's Load, read back (others, note)."""

    def __init__(self, others, note):
        self.others, self._note = others, note

    def note(self):
        return self._note


def main(builds, workload=None, quick=False, repeats=None, out=print):
    """Run the bench once per build (each in a child process) and print one table; exit status 1 when
    a column failed."""
    selected = [find(workload)] if workload else WORKLOADS
    out(f"builds: {', '.join(builds)}, one process each (TRACEGRAD_CPU); floors, measured first:")
    floors = measure_floors(selected, log=out)
    base = available_columns()
    columns, rows = list(base), {w.id: {} for w in selected}
    loads, headers = {}, []
    for k, build in enumerate(builds):
        own = base if k == 0 else ["numpy", "tg compiled"]
        got = _child(build, own, workload, quick, repeats)
        if got is None:
            out(f"FAIL build {build}: its process exited with an error (its traceback is above); no table")
            return 1
        headers.append(f"  {build}: {got['target']}")
        for w in selected:
            res = {c: _result(r) for c, r in got["results"][w.id].items()}
            if k == 0:
                rows[w.id].update(res)
            rows[w.id][f"tg compiled {build}"] = res["tg compiled"]
            loads[(w.id, build)] = got["loads"][w.id]
    columns = [c for c in columns if c != "tg compiled"] + [f"tg compiled {b}" for b in builds]
    out("compiled code for:")
    for line in headers:
        out(line)
    out("")
    table = [(w, rows[w.id]) for w in selected]
    print_table(table, columns, out=out, floors=floors)
    out("")
    out("other processes' share of the machine while each workload was timed, per build: " + "; ".join(
        f"{w.id} " + "/".join("?" if loads[(w.id, b)][0] is None else f"{loads[(w.id, b)][0]:.0%}" for b in builds)
        for w in selected))
    for (wid, b), (_, note) in loads.items():
        if note:
            out(f"WARNING {wid} ({b}): {note}")
    return 1 if any(r.failure for _, res in table for r in res.values()) else 0


def _result(d):
    r = Result()
    for f in FIELDS:
        setattr(r, f, d[f])
    return r


def _child(build, columns, workload, quick, repeats):
    """The results of the bench of `columns` in a fresh process whose TRACEGRAD_CPU is `build`; None when
    that process failed (it printed why on stderr)."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "results.json")
        args = [sys.executable, "-m", "tracegrad.bench.builds", path, ",".join(columns),
                workload or "", "1" if quick else "0", str(repeats or 0)]
        if subprocess.run(args, env=dict(os.environ, TRACEGRAD_CPU=build)).returncode:
            return None
        with open(path) as fh:
            return json.load(fh)


def _run_child(path, columns, workload, quick, repeats):
    """In the child: bench `columns` of the workloads and write the results as JSON to `path`."""
    from . import target
    selected = [find(workload)] if workload else WORKLOADS
    repeats = int(repeats) or (5 if quick == "1" else 9)
    target_s = 0.005 if quick == "1" else 0.02
    results, loads = {}, {}
    for w in selected:
        res, load = bench_workload(w, columns.split(","), repeats, target_s,
                                   log=lambda s: print(s, file=sys.stderr))
        results[w.id] = {c: {f: getattr(r, f) for f in FIELDS} for c, r in res.items()}
        loads[w.id] = (load.others, load.note())
        print(f"  {w.id} {w.name} done ({os.environ.get('TRACEGRAD_CPU')})", file=sys.stderr, flush=True)
    with open(path, "w") as fh:
        json.dump({"target": target(), "results": results, "loads": loads}, fh)


if __name__ == "__main__":
    _run_child(*sys.argv[1:])
