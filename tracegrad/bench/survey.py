"""Programs outside W1-W8 (survey_programs.py), compiled tracegrad against eager, its peers and the
bandwidth floor, in one run: where compiled code falls off a cliff.

Every column of a program is set up on the same inputs; its first call's outputs (the loss or
output and the gradients / the updated parameter) are checked against tracegrad eager run on float64
copies of the inputs (max |out - ref| / max |ref| per output <= 1e-3: bench's check) before anything
is timed, so a wrong answer is reported as FAILED, never as a speed. Then the columns and the
floor (floor.py: the bytes the program must move, copied) run in interleaved rounds; the table
shows median ms per call and compiled tracegrad's ratio to tracegrad eager, to the fastest peer
(torch eager, torch.compile, jax.jit: those importable) and to the floor (memory-bound programs).

    python -m tracegrad.bench.survey [--programs NAME,...] [--skip torch.compile,jax.jit] [--quick] [--repeats N]
                                     [--cpu] [--list]
    TRACEGRAD_THREADS=1 OPENBLAS_NUM_THREADS=1 python -m tracegrad.bench.survey --cpu   # CPU time: steadier
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE PYTHONPATH=. /path/to/venv-with-torch-and-jax/bin/python \\
        -m tracegrad.bench.survey
"""
import argparse
import importlib.util
import math
import os
import statistics
import sys
import time
import traceback

import numpy as np

from . import Result, _calibrate, _fmt_ms, check, peers
from .floor import FLOOR, floor_setup
from .load import settle
from .survey_programs import PROGRAMS, Ops, find
from .workload_base import ADAM, LR, _np, _tg_train_step

COLUMNS = ("tg eager", "tg compiled", "torch eager", "torch.compile", "jax.jit")
PEERS = ("torch eager", "torch.compile", "jax.jit")


def available_columns(skip=()):
    have = {"torch": importlib.util.find_spec("torch") is not None, "jax": importlib.util.find_spec("jax") is not None}
    return [c for c in COLUMNS if c not in skip and have.get(c.split()[0].split(".")[0], True)]


def _train_setup(prog, col, inp):
    """run() of a "train" program: [loss] + the parameters after the step."""
    names = [k for k in inp if k not in ("x", "y")]
    if col == "jax.jit":
        import jax.numpy as jnp
        return peers.jax_train_setup([jnp.asarray(inp[k]) for k in names], jnp.asarray(inp["x"]),
                                     jnp.asarray(inp["y"]), prog.opt[0])
    if col.startswith("torch"):
        import torch
        return peers.torch_train_setup([torch.from_numpy(inp[k].copy()) for k in names],
                                       torch.from_numpy(inp["x"]), torch.from_numpy(inp["y"]), prog.opt[0],
                                       "compile" in col)
    import tracegrad as tg
    layers = []
    for i in range(len(names) // 2):
        fo, fi = inp[f"W{i}"].shape
        layers += [tg.nn.Linear(fi, fo), tg.nn.ReLU()]
    model = tg.nn.Sequential(*layers[:-1])
    for p, k in zip(model.parameters(), names):      # W0, b0, W1, ...: in the model's order
        p.data = tg.tensor(inp[k].copy())
    opt = tg.optim.Adam(model.parameters(), **ADAM) if prog.opt[0] == "Adam" else \
        tg.optim.SGD(model.parameters(), lr=LR)
    step = tg.compile(_tg_train_step) if "compiled" in col else _tg_train_step
    x, y = tg.tensor(inp["x"]), tg.tensor(inp["y"])
    return lambda: [step(model, opt, x, y)] + list(model.parameters())


def _torchlike_setup(prog, lib, compiled, inp):
    """run() for tracegrad or torch, eager or compiled (tg.compile / torch.compile)."""
    if prog.kind == "train":
        return _train_setup(prog, ("tg " if lib == "tracegrad" else "torch ") + ("compiled" if compiled else ""),
                            inp)
    o = Ops(lib)
    T = o.T
    if lib == "torch":
        tens = {k: T.from_numpy(v.copy()).requires_grad_(k in prog.grads or (prog.kind == "step" and k == "p"))
                for k, v in inp.items()}
    else:
        tens = {k: T.tensor(v, requires_grad=k in prog.grads or (prog.kind == "step" and k == "p"))
                for k, v in inp.items()}
    wrap = T.compile if compiled else (lambda f: f)
    if prog.kind == "step":
        p = tens["p"]
        p.grad = tens["g"].detach()
        name, kw = prog.opt
        opt = getattr(T.optim, name)([p], **kw)
        step = wrap(lambda: opt.step())

        def run():
            step()
            return [p]
        return run
    names = list(tens)
    fn = wrap(lambda *ts: prog.fn(o, **dict(zip(names, ts))))
    ts = list(tens.values())
    if prog.kind == "fwd":
        def run():
            with T.no_grad():
                return [fn(*ts)]
        return run
    leaves = [tens[n] for n in prog.grads]

    def run():
        for t in leaves:
            t.grad = None
        loss = fn(*ts)
        loss.backward()
        return [loss] + [t.grad for t in leaves]
    return run


def _jax_setup(prog, inp):
    import jax
    import jax.numpy as jnp
    jax.config.update("jax_enable_x64", True)          # float64 programs stay float64
    o = Ops("jax")
    block = jax.block_until_ready
    names = list(inp)
    arrays = [jnp.asarray(v) for v in inp.values()]
    if prog.kind == "step":
        return _jax_step(prog, jax, jnp, *arrays)
    if prog.kind == "train":
        return _train_setup(prog, "jax.jit", inp)
    f = lambda *a: prog.fn(o, **dict(zip(names, a)))      # noqa: E731
    if prog.kind == "fwd":
        jf = jax.jit(f)
        return lambda: [block(jf(*arrays))]
    jf = jax.jit(jax.value_and_grad(f, argnums=tuple(names.index(n) for n in prog.grads)))

    def run():
        loss, grads = block(jf(*arrays))
        return [loss] + list(grads)
    return run


def _jax_step(prog, jax, jnp, p, g):
    """torch's SGD (momentum) / Adam / AdamW update of p as one jitted function; the state is carried."""
    name, kw = prog.opt
    if name == "SGD":
        def update(p, g, state):
            buf = kw["momentum"] * state[0] + g
            return p - kw["lr"] * buf, (buf,)
        state = [p, (jnp.zeros_like(p),)]
    else:
        b1, b2, eps, lr = 0.9, 0.999, 1e-8, kw["lr"]
        decay = 1 - lr * kw.get("weight_decay", 0.0) if name == "AdamW" else 1.0

        def update(p, g, state):
            m, v, n = state
            p = p * decay
            n = n + 1
            m = b1 * m + (1 - b1) * g
            v = b2 * v + (1 - b2) * g * g
            return p - lr / (1 - b1 ** n) * m / (jnp.sqrt(v / (1 - b2 ** n)) + eps), (m, v, n)
        state = [p, (jnp.zeros_like(p), jnp.zeros_like(p), jnp.zeros((), p.dtype))]
    jf = jax.jit(update)

    def run():
        state[0], state[1] = jax.block_until_ready(jf(state[0], g, state[1]))
        return [state[0]]
    return run


def setup(prog, col, inp):
    if col == "jax.jit":
        return _jax_setup(prog, inp)
    lib = "tracegrad" if col.startswith("tg") else "torch"
    return _torchlike_setup(prog, lib, "compile" in col, inp)


def reference(prog, inp):
    """tracegrad eager on float64 copies of the float inputs: the outputs every column is checked against."""
    wide = {k: v.astype(np.float64) if v.dtype.kind == "f" else v for k, v in inp.items()}
    return [_np(r).astype(np.float64) for r in _torchlike_setup(prog, "tracegrad", False, wide)()]


def floor_bytes(prog, inp, refs):
    """Bytes a call must move: every input read once, every output written once (in the inputs'
    float width), plus the state an optimizer reads and writes."""
    width = max(v.itemsize for v in inp.values() if v.dtype.kind == "f")
    return sum(v.nbytes for v in inp.values()) + sum(r.size for r in refs) * width + prog.floor_extra


def _sample(run, inner, clock):
    t0 = clock()
    for _ in range(inner):
        run()
    return (clock() - t0) / inner


def bench_program(prog, columns, repeats, target_s, log=print, clock=time.perf_counter):
    inp = prog.inputs(np.random.default_rng(0))
    refs = reference(prog, inp)
    results, runs = {}, {}
    for col in columns:
        res = results[col] = Result()
        try:
            run = setup(prog, col, inp)
            t0 = time.perf_counter()
            outs = [_np(o) for o in run()]
            res.first = time.perf_counter() - t0
            res.error, res.failure = check(outs, refs)
            if res.failure is None:
                runs[col] = (run, _calibrate(run, target_s))
        except Exception as e:  # noqa: BLE001 -- reported in the table
            res.failure = f"{type(e).__name__}: {e}"
            log(f"  {prog.name} {col}: FAILED\n" + "".join(
                "    " + line for line in traceback.format_exc().splitlines(True)[-8:]))
    nbytes = floor_bytes(prog, inp, refs) if prog.memory_bound else None
    if nbytes:
        for col in FLOOR:
            results[col] = Result()
            run = floor_setup(nbytes, threaded=col == FLOOR[0])
            runs[col] = (run, _calibrate(run, target_s))
    for _ in range(repeats):                                  # interleaved rounds
        for col, (run, inner) in runs.items():
            settle()                                          # the last column's thread pools idle again
            results[col].times.append(_sample(run, inner, clock))
    return results, nbytes


def _ratio(a, b):
    return f"{a / b:.2f}" if a and b else "-"


def print_table(rows, columns, out=print):
    """rows: [(program, {col: Result}, floor bytes or None)]."""
    w = 14
    out("median ms per call; compiled / eager, / the fastest peer, / the bandwidth floor (copy of the bytes "
        "that must move)")
    head = f"{'program':22s}" + "".join(f"{c:>{w}s}" for c in columns) + \
        f"{'floor':>9s}{'/eager':>8s}{'/peer':>7s}{'/floor':>8s}{'MB':>7s}"
    out(head)
    out("-" * len(head))
    worst = []
    for prog, res, nbytes in rows:
        med = {c: None if res[c].failure else res[c].median for c in columns}
        cells = ["FAILED" if res[c].failure else "-" if med[c] is None else _fmt_ms(med[c]) for c in columns]
        floors = [res[c].median for c in FLOOR if c in res and res[c].median]
        floor = min(floors) if floors else None
        comp = med.get("tg compiled")
        peers = [med[c] for c in PEERS if med.get(c)]
        best = min(peers) if peers else None
        if comp and best:
            worst.append((comp / best, prog.name))
        out(f"{prog.name:22s}" + "".join(f"{c:>{w}s}" for c in cells) +
            f"{(_fmt_ms(floor) if floor else '-'):>9s}{_ratio(comp, med.get('tg eager')):>8s}"
            f"{_ratio(comp, best):>7s}{_ratio(comp, floor):>8s}{(f'{nbytes / 1e6:.1f}' if nbytes else '-'):>7s}")
    if worst:
        g = math.exp(statistics.fmean(math.log(r) for r, _ in worst))
        out(f"geomean compiled / fastest peer: {g:.2f}; behind the fastest peer: " +
            (", ".join(f"{n} {r:.2f}" for r, n in sorted(worst, reverse=True) if r > 1) or "none"))
    compiled = [c for c in columns if c in ("tg compiled", "torch.compile", "jax.jit")]
    out("")
    out(f"{'first call, s':22s}" + "".join(f"{c:>{w}s}" for c in compiled) + "   (trace + compile + run)")
    for prog, res, _ in rows:
        out(f"{prog.name:22s}" + "".join(
            f"{('-' if res[c].first is None else f'{res[c].first:.3f}'):>{w}s}" for c in compiled))


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m tracegrad.bench.survey", description=__doc__.splitlines()[0])
    p.add_argument("--programs", help="comma-separated program names (default: all)")
    p.add_argument("--skip", default="", help="comma-separated columns to leave out, e.g. torch.compile,jax.jit")
    p.add_argument("--quick", action="store_true", help="5 rounds of >= 5 ms samples")
    p.add_argument("--repeats", type=int)
    p.add_argument("--cpu", action="store_true", help="time the process's CPU time (all its threads), not the "
                   "wall clock: steadier on a shared machine; torch then runs on one thread")
    p.add_argument("--list", action="store_true", help="list the programs and exit")
    args = p.parse_args(argv)
    if args.list:
        for prog in PROGRAMS:
            print(f"{prog.name:22s}{prog.what}")
        return 0
    import tracegrad as tg
    from ..backends.cpu.threads import threads
    selected = [find(n) for n in args.programs.split(",")] if args.programs else PROGRAMS
    columns = available_columns({s.strip() for s in args.skip.split(",") if s.strip()})
    repeats = args.repeats or (5 if args.quick else 9)
    target_s = 0.005 if args.quick else 0.02
    if args.cpu and "OPENBLAS_NUM_THREADS" not in os.environ:
        print("note: --cpu without OPENBLAS_NUM_THREADS=1 counts the CPU time NumPy's BLAS threads spin for "
              "(matrix products look slower than they are)")
    if args.cpu:
        # OpenMP threads that spin after a parallel region (numba's floor copy, torch) count as this
        # process's CPU time and were charged to the next column: torch's rows read ~4x slow
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    if args.cpu and any(c.startswith("torch") for c in columns):
        import torch
        torch.set_num_threads(1)
    print(f"tracegrad {tg.__version__}, numpy {np.__version__}, {threads()} tracegrad threads; columns: "
          f"{', '.join(columns)}; {repeats} interleaved rounds, samples >= {target_s * 1e3:g} ms"
          f"{'; CPU time' if args.cpu else ''}")
    rows = []
    for prog in selected:
        t0 = time.perf_counter()
        res, nbytes = bench_program(prog, columns, repeats, target_s,
                                    clock=time.process_time if args.cpu else time.perf_counter)
        rows.append((prog, res, nbytes))
        print(f"  {prog.name} done in {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    print()
    print_table(rows, columns)
    failures = [(prog.name, c, res[c].failure) for prog, res, _ in rows for c in columns if res[c].failure]
    for name, c, why in failures:
        print(f"FAIL {name} [{c}]: {why}")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
