"""`python -m tracegrad bench --cpu native,x86-64-v3`: one table, a "tg compiled" column per build.

Each build runs in a process of its own (TRACEGRAD_CPU set before tracegrad is imported, so nothing
compiled for one build is reused by the other, and each calibrates its own thresholds), every column in
it: a build's peers run in its process with the same instruction set (`peer_env`: a build without
AVX-512 gets ATEN_CPU_CAPABILITY=avx2 for torch's kernels and torch.compile's generated code, a
torch.compile cache folder of its own, and XLA_FLAGS=--xla_cpu_max_isa=AVX2 for jax), so an AVX2
build is set against what the peers do on an AVX2 host, not against their AVX-512 kernels (W2's
softmax, one thread: torch's built-in 2.53 ms with AVX-512, 3.63 ms with ATEN_CPU_CAPABILITY=avx2). A
peer's column is named with its build where that is not native ("torch built-in x86-64-v3"). The
floors are measured once, first, in this process. Each process interleaves its own columns in
rounds; two builds are timed one after the other, not interleaved, so compare their columns in a
quiet run (the load line gives each process's share of the machine that others used). Ratios are to
the first process's numpy column.
"""
import getpass
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
    columns, rows = [c for c in base if c in ("numpy", "tg eager")], {w.id: {} for w in selected}
    loads, headers = {}, []
    for k, build in enumerate(builds):
        got = _child(build, base, workload, quick, repeats)
        if got is None:
            out(f"FAIL build {build}: its process exited with an error (its traceback is above); no table")
            return 1
        headers.append(f"  {build}: {got['target']}")
        # numpy and tg eager from the first build (a later one times them only to interleave the same way)
        own = {c: _named(c, build) for c in base if k == 0 or c not in ("numpy", "tg eager")}
        columns += [n for n in own.values() if n not in columns]
        for w in selected:
            res = {c: _result(r) for c, r in got["results"][w.id].items()}
            rows[w.id].update({n: res[c] for c, n in own.items()})
            loads[(w.id, build)] = got["loads"][w.id]
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


PEERS = ("torch eager", "torch built-in", "torch.compile", "jax.jit")


def _named(column, build):
    """A build's column in the table: tg compiled always with its build, a peer with it where not native."""
    if column == "tg compiled" or (column in PEERS and build != "native"):
        return f"{column} {build}"
    return column


def peer_env(vector_bytes, native_bytes):
    """Environment that keeps the peers to a build's instruction set: {} for the host's own vectors; for 32-byte
    (AVX2) vectors on an AVX-512 host, torch's (ATEN_CPU_CAPABILITY, which torch.compile's generated code
    follows too) and XLA's; for 16-byte ones torch's default kernels."""
    if vector_bytes >= native_bytes:
        return {}
    capability = "avx2" if vector_bytes == 32 else "default"
    env = {"ATEN_CPU_CAPABILITY": capability, "TORCHINDUCTOR_CACHE_DIR": _inductor_cache() + "_" + capability}
    if vector_bytes == 32:
        env["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_max_isa=AVX2").strip()
    return env


def _inductor_cache():
    """torch.compile's cache folder (its default where unset). Its keys leave ATEN_CPU_CAPABILITY out: an AVX2
    process found the AVX-512 process's W1 code there and returned wrong values (max rel error 1.0), so an
    instruction set other than the host's gets a folder of its own."""
    return os.environ.get("TORCHINDUCTOR_CACHE_DIR") or os.path.join(tempfile.gettempdir(), f"torchinductor_{getpass.getuser()}")


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
    """In the child: bench `columns` of the workloads and write the results as JSON to `path` (the peers kept
    to this build's instruction set, peer_env)."""
    from ..backends.cpu import host
    from . import target
    env = peer_env(host.current().vector_bytes, host.current_native().vector_bytes)
    os.environ.update(env)
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
        json.dump({"target": target() + "".join(f", {k}={v}" for k, v in sorted(env.items())),
                   "results": results, "loads": loads}, fh)


if __name__ == "__main__":
    _run_child(*sys.argv[1:])
