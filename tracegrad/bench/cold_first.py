"""A workload's first call (trace, compile, run) in a fresh process with an empty kernel cache, this tree
against another revision, interleaved:

    python -m tracegrad.bench.cold_first [--rev main] [--only W9,W10,W11,W12] [--reps 3]

Each repeat runs every workload once per side, each in a new Python process whose TRACEGRAD_CACHE_DIR is a
new empty folder, the sides' order alternating; the child times the "tg compiled" column's first call
(the workload's setup, untimed, before it). Prints per workload and side the medians of the process's
CPU time (steadier on a shared machine) and of the wall time, and the load average. The other revision
is `git archive REV tracegrad` (ab.py's) unpacked into a temporary folder the child imports it from."""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

from .ab import ROOT, _archive

CHILD = """
import json, sys, time
from tracegrad.bench.workloads import find
run = find(sys.argv[1]).columns["tg compiled"](find(sys.argv[1]).inputs())
c0, w0 = time.process_time(), time.perf_counter()
run()
print(json.dumps({"cpu": time.process_time() - c0, "wall": time.perf_counter() - w0}))
"""


def first_call(root, wid):
    """{"cpu", "wall"}: seconds of workload `wid`'s first call with tracegrad imported from folder `root`."""
    with tempfile.TemporaryDirectory(prefix="tg_cold_") as cache:
        env = dict(os.environ, PYTHONPATH=root, TRACEGRAD_CACHE_DIR=cache)
        got = subprocess.run([sys.executable, "-c", CHILD, wid], env=env, cwd=cache, capture_output=True, text=True)
    if got.returncode != 0:
        raise SystemExit(f"{wid}'s first call failed under {root}:\n{got.stderr[-2000:]}")
    return json.loads(got.stdout.strip().splitlines()[-1])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rev", default=None, help="the revision to compare with (default: none, this tree alone)")
    ap.add_argument("--only", default="W9,W10,W11,W12")
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args(argv)
    sides = {"new": ROOT}
    old = None
    if args.rev:
        old = tempfile.mkdtemp(prefix="tg_cold_rev_")
        subprocess.run(["tar", "-x", "-C", old], input=_archive(args.rev), check=True)
        sides["old"] = old
    wids, rows = args.only.split(","), {}
    try:
        for r in range(args.reps):
            for wid in wids:
                for side in (list(sides) if r % 2 == 0 else list(sides)[::-1]):
                    rows.setdefault((wid, side), []).append(first_call(sides[side], wid))
    finally:
        if old:
            shutil.rmtree(old, ignore_errors=True)
    print(f"first call, empty cache, fresh process; medians of {args.reps}; load average "
          f"{os.getloadavg()[0]:.1f} (new = this tree{', old = ' + args.rev if args.rev else ''})")
    for wid in wids:
        for side in sides:
            v = rows[(wid, side)]
            each = ", ".join(f"{x['cpu']:.2f}" for x in v)
            print(f"{wid:4s} {side}: CPU {statistics.median(x['cpu'] for x in v):6.2f} s, wall "
                  f"{statistics.median(x['wall'] for x in v):6.2f} s   (CPU {each})")


if __name__ == "__main__":
    main()
