"""This tracegrad against another revision, in one process: per-call medians, interleaved.

    python -m tracegrad.bench.ab --rev main [--runs 15] [--calls 20] [--only W1,W7,MLP] [--cpu]

The other revision is `git archive REV tracegrad` unpacked as package `tg_ab` in a temporary folder
(tracegrad's own imports are relative, so both load side by side, each with its own thread pool and
code). For each program, both sides are set up the same way, then timed in alternation: `runs`
rounds of `calls` calls each side, half of them with the setups made in the other order (`rounds`); the table shows each side's median per-call time and the ratio
new/old of the medians. Programs: W1, W3, W5, W7 of the workloads (op_workloads.py, "tg compiled");
DEEP64 (the survey's mlp_deep64_adam: 64 Linear(16, 16), Adam, one compiled step), INFER_B1 (the
survey's mlp_infer_b1), softmax_dim0, logsumexp_dim0, batchnorm_nchw, mixed_layout_rowsum, sgd_momentum
and adam (the survey's), SOFTMAX_T
(softmax over the rows of a transposed view, fwd+bwd); ROTARY (the survey's rotary_embed), CAT_TANH and
PAD (maps over the pieces of a cat and a pad, written box by box); W12 (transformer.py's training step); W11
(lstm_step.py's training step); W9, W10 (cnn_workloads.py's LeNet and CIFAR training steps); `--only` also
takes any survey program's name; MLP,
a mid-size MLP training step (forward, backward, Adam: matrix products between split elementwise
kernels and small ones); MIX, split kernels, small ones and a matrix product in one forward. `--callgrind NAME,SIDE,N`: set up one program on one side ("new" or
"old"), run N calls after two warm-up calls and exit (for valgrind --tool=callgrind, run it with N
and with 0: the difference / N is the instructions per call)."""
import argparse
import importlib
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

from . import cnn_workloads as C
from . import lstm_step
from . import transformer as T
from . import op_workloads as W

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _archive(rev):
    """`git archive REV tracegrad` of the checkout this tracegrad runs from (a tar stream); SystemExit
    with what to do where there is no such checkout (an installed wheel), no git, or no such revision."""
    def git(*a):
        try:
            return subprocess.run(["git", "-C", ROOT, *a], capture_output=True)
        except FileNotFoundError:
            raise SystemExit("tracegrad.bench.ab: git is not installed; it compares this tree with a git "
                             "revision of the checkout it runs from") from None
    top = git("rev-parse", "--show-toplevel")
    if top.returncode != 0 or os.path.realpath(top.stdout.decode().strip()) != os.path.realpath(ROOT):
        raise SystemExit(f"tracegrad.bench.ab compares this tree with a git revision of the checkout it runs "
                         f"from, and {ROOT} is not the top of a git checkout (an installed wheel?): run it from "
                         "a git clone of tracegrad (pip install -e .)")
    got = git("archive", rev, "tracegrad")
    if got.returncode != 0:
        raise SystemExit(f"tracegrad.bench.ab: `git -C {ROOT} archive {rev} tracegrad` failed "
                         f"({got.stderr.decode(errors='replace').strip()}): give --rev a revision of this checkout")
    return got.stdout


def _load_old(tar):
    """The package `tg_ab`: tracegrad as of the revision whose `_archive` is `tar`."""
    tmp = tempfile.mkdtemp(prefix="tg_ab_")
    subprocess.run(["tar", "-x", "-C", tmp], input=tar, check=True)
    os.rename(os.path.join(tmp, "tracegrad"), os.path.join(tmp, "tg_ab"))
    sys.path.insert(0, tmp)
    return importlib.import_module("tg_ab")


def _as(tg, setup):
    """setup() with `import tracegrad` inside it giving package `tg`."""
    saved = sys.modules.get("tracegrad")
    sys.modules["tracegrad"] = tg
    try:
        return setup()
    finally:
        sys.modules["tracegrad"] = saved


def _mlp(tg, batch=128, sizes=(256, 512, 512, 10)):
    """A training step of an MLP (ReLU, cross entropy, Adam), compiled whole."""
    import tracegrad as t   # the package installed as `tracegrad` during _as
    F = importlib.import_module(t.__name__ + ".nn.functional")
    t.manual_seed(0)
    layers = []
    for fi, fo in zip(sizes[:-1], sizes[1:]):
        layers += [t.nn.Linear(fi, fo), t.nn.ReLU()]
    model = t.nn.Sequential(*layers[:-1])
    opt = t.optim.Adam(model.parameters(), lr=1e-3)
    rng = np.random.default_rng(0)
    x = t.from_numpy(rng.standard_normal((batch, sizes[0])).astype(np.float32))
    y = t.from_numpy(rng.integers(0, sizes[-1], batch))

    @t.compile
    def step(model, opt, x, y):
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss
    return lambda: [step(model, opt, x, y)]


def _mix(tg, rows=256, cols=512):
    """Split kernels (a row kernel with a column sum, a map after a matrix product) with small
    kernels and a BLAS product between them; forward only."""
    import tracegrad as t
    rng = np.random.default_rng(0)
    x, w, b, v = (t.from_numpy(rng.standard_normal(s).astype(np.float32)) for s in ((rows, cols), (cols,), (cols,), (cols,)))
    m = t.from_numpy(rng.standard_normal((cols, cols)).astype(np.float32) / cols)

    @t.compile
    def f(x, w, b, v, m):
        h = (x * w + b).tanh()
        s = h.sum(axis=0) * v + b
        r = (h - h.mean(axis=1, keepdims=True)).exp()
        q = ((h @ (m * 0.01)) * v + b).sin()
        return s * 2.0, r, q, (b * b).sum()
    return lambda: f(x, w, b, v, m)


def _softmax_t(tg, rows=2048, cols=1000):
    """softmax over the rows of a transposed view, fwd+bwd: (softmax(x.T, 1) * g.T).sum(), x and g
    (rows, cols) float32 (a column softmax of memory)."""
    import tracegrad as t
    rng = np.random.default_rng(0)
    x = t.tensor(rng.standard_normal((rows, cols)).astype(np.float32), requires_grad=True)
    g = t.tensor(rng.standard_normal((rows, cols)).astype(np.float32))
    f = t.compile(lambda x, g: (x.T.softmax(dim=1) * g.T).sum())

    def run():
        x.grad = None
        loss = f(x, g)
        loss.backward()
        return [loss, x.grad]
    return run


def _pieces(tg, kind):
    """A map over pieces (backends/cpu/boxes.py), forward only: CAT_TANH cat((a, b), -1).tanh() of two
    (1024, 512) float32; PAD a convolution's zero pad F.pad(relu(x), (1, 1, 1, 1)) of (16, 32, 56, 56)."""
    import tracegrad as t
    F = importlib.import_module(t.__name__ + ".nn.functional")
    rng = np.random.default_rng(0)
    if kind == "cat":
        a, b = (t.from_numpy(rng.standard_normal((1024, 512)).astype(np.float32)) for _ in range(2))
        f = t.compile(lambda a, b: t.cat([a, b], -1).tanh())
        return lambda: f(a, b)
    x = t.from_numpy(rng.standard_normal((16, 32, 56, 56)).astype(np.float32))
    g = t.compile(lambda x: F.pad(x.relu(), (1, 1, 1, 1)))
    return lambda: g(x)


def programs():
    out = {}
    for wid in ("w1", "w2", "w3", "w5", "w7"):
        inp = getattr(W, f"{wid}_inputs")()
        out[wid.upper()] = lambda tg, wid=wid, inp=inp: getattr(W, f"{wid}_tg_compiled")(inp)
    out["MLP"] = lambda tg: _mlp(tg)
    out["MIX"] = lambda tg: _mix(tg)
    out["DEEP64"] = lambda tg: _mlp(tg, batch=8, sizes=(16,) * 65 + (4,))     # survey's mlp_deep64_adam
    out["INFER_B1"] = lambda tg: _survey_fwd(tg, "mlp_infer_b1")
    for name in ("softmax_dim0", "logsumexp_dim0", "batchnorm_nchw",       # column normalizations, fwd+bwd
                 "mixed_layout_rowsum", "sgd_momentum", "adam"):            # reads that disagree; optimizer steps
        out[name] = lambda tg, name=name: _survey_fwd(tg, name)
    out["SOFTMAX_T"] = lambda tg: _softmax_t(tg)
    out["ROTARY"] = lambda tg: _survey_fwd(tg, "rotary_embed")       # a cat of rotated halves, fwd+bwd
    out["CAT_TANH"] = lambda tg: _pieces(tg, "cat")
    out["PAD"] = lambda tg: _pieces(tg, "pad")
    out["W12"] = lambda tg: T.tg_step(T.inputs(), True)        # the GPT-style training step
    out["W11"] = lambda tg: lstm_step._tg_setup(lstm_step.inputs(), True)     # the 2-layer LSTM training step
    for wid, seed in (("W9", 9), ("W10", 10)):                    # the CNN training steps
        out[wid] = lambda tg, wid=wid, seed=seed: _traced(C.cnn_tg(wid, C.cnn_inputs(wid, seed), True))
    return out


def _traced(run):
    """run, called once here: a step that imports tracegrad while it is traced sees the side's package."""
    run()
    return run


def _survey_fwd(tg, name):
    """A survey program (survey_programs.py) compiled, on the package installed as `tracegrad`."""
    from .survey import _torchlike_setup
    from .survey_programs import find
    prog = find(name)
    return _torchlike_setup(prog, "tracegrad", True, prog.inputs(np.random.default_rng(0)))


def _time(run, calls, clock=time.perf_counter):
    t0 = clock()
    for _ in range(calls):
        run()
    return (clock() - t0) / calls


def rounds(setups, runs, calls, clock):
    """{side: per-call seconds of each round}: `runs` rounds of `calls` calls of each side in turn, which side
    first alternating from round to round. Half the
    rounds with the sides set up in one order, half after setting them up again in the other: the side set
    up second ran up to 1.2x slower with the same code on both sides (softmax_dim0, x86-64-v3, one thread:
    1.08-1.23 new/old against --rev HEAD; 0.78-1.08 with the setups swapped)."""
    times = {side: [] for side in setups}
    order = list(setups)
    for half in (runs - runs // 2, runs // 2):
        run = {side: setups[side]() for side in order}
        for r in run.values():
            for _ in range(3):
                r()
        for r in range(half):
            for side in (order if r % 2 == 0 else order[::-1]):       # which side goes first alternates too
                times[side].append(_time(run[side], calls, clock))
        del run
        order.reverse()
    return times


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rev", default="main")
    p.add_argument("--runs", type=int, default=15)
    p.add_argument("--calls", type=int, default=20)
    p.add_argument("--only", default=None)
    p.add_argument("--callgrind", default=None)
    p.add_argument("--cpu", action="store_true", help="process CPU time instead of wall time (steadier on a "
                   "shared machine; with TRACEGRAD_THREADS=1 it is the call's own work)")
    args = p.parse_args(argv)
    tar = None if args.callgrind and args.callgrind.split(",")[1] == "new" else _archive(args.rev)
    import tracegrad as new
    progs = programs()
    if args.callgrind:
        name, side, n = args.callgrind.split(",")
        tg = new if side == "new" else _load_old(tar)
        run = _as(tg, lambda: progs[name](tg))
        for _ in range(2 + int(n)):
            run()
        return
    old = _load_old(tar)
    names = args.only.split(",") if args.only else list(progs)
    print(f"per-call medians ({'CPU' if args.cpu else 'wall'} time) of {args.runs} rounds x {args.calls} calls, "
          f"interleaved; new = this tree, "
          f"old = {args.rev}; {os.cpu_count()} cores")
    print(f"{'program':8} {'old ms':>9} {'new ms':>9} {'new/old':>8}")
    packages = {"old": old, "new": new}
    for name in names:
        make = progs.get(name) or (lambda tg, name=name: _survey_fwd(tg, name))     # any survey program by name
        setups = {side: lambda tg=tg: _as(tg, lambda: make(tg)) for side, tg in packages.items()}
        times = rounds(setups, args.runs, args.calls, time.process_time if args.cpu else time.perf_counter)
        med = {s: statistics.median(t) for s, t in times.items()}
        print(f"{name:8} {med['old'] * 1e3:9.3f} {med['new'] * 1e3:9.3f} {med['new'] / med['old']:8.3f}", flush=True)


if __name__ == "__main__":
    main()
