"""The cold sequences (ragged.py) timed cold: every column, every repeat, in a fresh Python process whose
disk caches are new empty folders (TRACEGRAD_CACHE_DIR, TORCHINDUCTOR_CACHE_DIR, TRITON_CACHE_DIR), so
each starts with nothing traced or compiled. The child prints its seconds and traces as JSON and writes
the losses and final parameters to an .npz file, which the parent checks against the float64 run.

    python -m tracegrad bench --workload R1            # or R2, ragged, seqlen; --quick: one repeat
    python -m tracegrad.bench.cold --child R1 "tg compiled" OUT.npz [--sizes 5,3,1,0] [--dims 12,8,3]
"""
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import replace

import numpy as np

from .load import Load
from .ragged import COLUMNS, find_sequence, max_rel_error, reference, run_sequence

TOLERANCES = {"R1": 1e-3, "R2": 2e-2}   # R2: float32 Adam moves near-zero gradients' weights by their sign
CACHE_VARS = ("TRACEGRAD_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")


def available(column):
    """None if the column can run here, else why not."""
    import importlib.util
    need = {"torch eager": "torch", "torch.compile": "torch", "jax.jit": "jax"}.get(column)
    if need and importlib.util.find_spec(need) is None:
        return f"{need} not installed"
    return None


def run_cold(seq, column, timeout=1800):
    """One cold run in a fresh process: {"seconds", "traces", "reasons", "outputs"}, or {"failure": text}."""
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, **{v: os.path.join(tmp, v.lower()) for v in CACHE_VARS})
        out = os.path.join(tmp, "outputs.npz")
        cmd = [sys.executable, "-m", "tracegrad.bench.cold", "--child", seq.id, column, out,
               "--sizes", ",".join(map(str, seq.sizes)), "--dims", ",".join(map(str, seq.dims))]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
        if proc.returncode:
            return {"failure": (proc.stderr.strip().splitlines() or ["exit status %d" % proc.returncode])[-1]}
        res = json.loads(proc.stdout.strip().splitlines()[-1])
        with np.load(out) as f:
            res["outputs"] = [f[f"o{i}"] for i in range(len(f.files))]
    return res


def measure(seq, columns=COLUMNS, repeats=1, log=print):
    """({column: {"times", "traces", "reasons", "error", "failure", "absent"}}, Load over the runs)."""
    refs = reference(seq)
    results = {}
    with Load() as load:
        for col in columns:
            r = results[col] = {"times": [], "traces": None, "reasons": [], "error": None, "failure": None,
                                "absent": "no version" if col in seq.absent else available(col)}
            for _ in range(0 if r["absent"] else repeats):
                got = run_cold(seq, col)
                if "failure" in got:
                    r["failure"] = got["failure"]
                    log(f"  {seq.id} {col}: FAILED: {got['failure']}")
                    break
                r["times"].append(got["seconds"])
                r["traces"], r["reasons"] = got["traces"], got["reasons"]
                r["error"] = max(r["error"] or 0.0, max_rel_error(got["outputs"], refs))
            if r["error"] is not None and not r["error"] <= TOLERANCES[seq.id]:
                r["failure"] = f"differs from the float64 run: max rel error {r['error']:.2e} > {TOLERANCES[seq.id]:g}"
            print(f"  {seq.id} {col} done", file=sys.stderr, flush=True)
    return results, load


def print_table(seq, results, load, repeats, out=print):
    out(f"{seq.id} {seq.name}: {seq.what}")
    out(f"  sizes in order: {', '.join(map(str, seq.sizes))}")
    out(f"  cold: a fresh process per column and repeat, disk caches in new empty folders; {repeats} repeat(s); "
        f"seconds from the first step's start to the last step's end (imports and setup excluded)")
    base = results.get("torch.compile", {}).get("times")
    base = statistics.median(base) if base else None
    out(f"  {'column':18s}{'cold s (median)':>16s}  {'each repeat':24s}{'traces':>7s}{'/ torch.compile':>16s}"
        f"{'max rel err':>13s}")
    for col, r in results.items():
        if r["absent"] or r["failure"]:
            out(f"  {col:18s}{'-' if r['absent'] else 'FAILED':>16s}  {r['absent'] or r['failure']}")
            continue
        med = statistics.median(r["times"])
        ratio = f"{med / base:.3f}" if base else "-"
        out(f"  {col:18s}{med:16.3f}  {' '.join(f'{t:.2f}' for t in r['times']):24s}"
            f"{'-' if r['traces'] is None else r['traces']:>7}{ratio:>16s}{r['error']:13.1e}")
    for col, r in results.items():
        if r["reasons"]:
            more = f" (+{len(r['reasons']) - 3} more)" if len(r["reasons"]) > 3 else ""
            out(f"  {col} retrace reasons: {'; '.join(r['reasons'][:3])}{more}")
    share = "?" if load.others is None else f"{load.others:.0%}"
    out(f"  other processes' share of the machine during these runs: {share}")
    if load.note():
        out(f"  WARNING: {load.note()}")


def main(names, quick=False, repeats=None, out=print):
    """The cold table of each named sequence; exit status 1 if a column failed or differs."""
    repeats = repeats or (1 if quick else 3)
    rc = 0
    for name in names:
        seq = find_sequence(name)
        results, load = measure(seq, repeats=repeats, log=out)
        print_table(seq, results, load, repeats, out=out)
        out("")
        rc |= any(r["failure"] for r in results.values())
    return int(rc)


def _child(argv):
    seq_id, column, path = argv[:3]
    opts = dict(zip(argv[3::2], argv[4::2]))
    seq = find_sequence(seq_id)
    for key in ("--sizes", "--dims"):
        if key in opts:
            seq = replace(seq, **{key[2:]: tuple(int(v) for v in opts[key].split(","))})
    res = run_sequence(seq, column)
    np.savez(path, **{f"o{i}": a for i, a in enumerate(res.pop("outputs"))})
    print(json.dumps({k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in res.items()}))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        _child(sys.argv[2:])
    else:
        sys.exit(main(sys.argv[1:] or ["R1", "R2"]))
