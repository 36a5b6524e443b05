"""Eager cost vs NumPy: big tensors (ratio, goal <= 1.2x) and tiny tensors (per-op overhead, µs).

    python -m tracegrad.bench.eager_overhead [--quick] [--repeats N]
    python -m tracegrad bench --eager

Part 1 runs each elementwise op and reduction on 1M-element float32 tensors, and the same
NumPy expression on the same arrays, in interleaved rounds; it prints medians and the ratio.
Part 2 does the same on 8-element tensors, where the time is all Python: it prints µs per op
for both and tracegrad's extra cost per op; a few rows repeat with requires_grad=True
(recording the autograd node), and one row times a backward.
"""
import argparse
import statistics
import sys
import time

import numpy as np

GOAL = 1.2

# name, tracegrad expression, NumPy expression: over a, b (any sign), p (positive)
OPS = [
    ("a + b", lambda a, b, p: a + b, lambda a, b, p: a + b),
    ("a - b", lambda a, b, p: a - b, lambda a, b, p: a - b),
    ("a * b", lambda a, b, p: a * b, lambda a, b, p: a * b),
    ("a / p", lambda a, b, p: a / p, lambda a, b, p: a / p),
    ("a * 2.0", lambda a, b, p: a * 2.0, lambda a, b, p: a * 2.0),
    ("a + 1.0", lambda a, b, p: a + 1.0, lambda a, b, p: a + 1.0),
    ("-a", lambda a, b, p: -a, lambda a, b, p: -a),
    ("a ** 2", lambda a, b, p: a ** 2, lambda a, b, p: a ** 2),
    ("maximum(a, b)", lambda a, b, p: a.maximum(b), lambda a, b, p: np.maximum(a, b)),
    ("a > b", lambda a, b, p: a > b, lambda a, b, p: a > b),
    ("exp(a)", lambda a, b, p: a.exp(), lambda a, b, p: np.exp(a)),
    ("log(p)", lambda a, b, p: p.log(), lambda a, b, p: np.log(p)),
    ("sqrt(p)", lambda a, b, p: p.sqrt(), lambda a, b, p: np.sqrt(p)),
    ("tanh(a)", lambda a, b, p: a.tanh(), lambda a, b, p: np.tanh(a)),
    ("sigmoid(a)", lambda a, b, p: a.sigmoid(), lambda a, b, p: 1.0 / (1.0 + np.exp(-a))),
    ("relu(a)", lambda a, b, p: a.relu(), lambda a, b, p: np.maximum(a, 0.0)),
    ("abs(a)", lambda a, b, p: a.abs(), lambda a, b, p: np.abs(a)),
    ("where(a>0, a, b)", lambda a, b, p: _tg().where(a > 0, a, b), lambda a, b, p: np.where(a > 0, a, b)),
    ("sum(a)", lambda a, b, p: a.sum(), lambda a, b, p: a.sum()),
    ("mean(a)", lambda a, b, p: a.mean(), lambda a, b, p: a.mean()),
    ("max(a)", lambda a, b, p: a.max(), lambda a, b, p: a.max()),
    ("sum(a, axis=1)", lambda a, b, p: a.sum(axis=1), lambda a, b, p: a.sum(axis=1)),
    ("sum(a, axis=0)", lambda a, b, p: a.sum(axis=0), lambda a, b, p: a.sum(axis=0)),
    ("amax(a, axis=1)", lambda a, b, p: a.amax(axis=1), lambda a, b, p: a.max(axis=1)),
]
GRAD_OPS = ("a + b", "a * b", "exp(a)", "tanh(a)", "sum(a)")


def _tg():
    import tracegrad
    return tracegrad


def _timeit(f, inner):
    t0 = time.perf_counter()
    for _ in range(inner):
        f()
    return (time.perf_counter() - t0) / inner


def _inner(f, target_s):
    t0 = time.perf_counter()
    f()
    dt = time.perf_counter() - t0
    return max(1, min(100_000, int(target_s / max(dt, 1e-7))))


def compare(tg_fn, np_fn, repeats, target_s):
    """Medians (s per call) of tracegrad and NumPy, sampled in interleaved rounds."""
    tg_fn(), np_fn()                                            # warm up
    ti, ni = _inner(tg_fn, target_s), _inner(np_fn, target_s)
    ts, ns = [], []
    for _ in range(repeats):
        ts.append(_timeit(tg_fn, ti))
        ns.append(_timeit(np_fn, ni))
    return statistics.median(ts), statistics.median(ns)


def arrays(shape, seed=0):
    r = np.random.default_rng(seed)
    a = r.standard_normal(shape).astype(np.float32)
    b = r.standard_normal(shape).astype(np.float32)
    p = (r.random(shape) + 0.5).astype(np.float32)
    return a, b, p


def big(repeats, target_s, out=print):
    tg = _tg()
    shape = (1000, 1000)
    na, nb, np_ = arrays(shape)
    ta, tb, tp = (tg.from_numpy(x) for x in (na, nb, np_))
    out(f"1. eager ops on 1M-element float32 tensors {shape} vs NumPy (goal: ratio <= {GOAL})")
    out(f"   {'op':18s} {'numpy ms':>9s} {'tg ms':>9s} {'ratio':>7s}")
    ratios = []
    for name, tf, nf in OPS:
        t, n = compare(lambda: tf(ta, tb, tp), lambda: nf(na, nb, np_), repeats, target_s)
        ratios.append(t / n)
        out(f"   {name:18s} {n * 1e3:9.3f} {t * 1e3:9.3f} {t / n:7.2f}{'' if t / n <= GOAL else '  > goal'}")
    geo = float(np.exp(np.mean(np.log(ratios))))
    out(f"   {'geomean':18s} {'':9s} {'':9s} {geo:7.2f}   ({sum(r <= GOAL for r in ratios)}/{len(ratios)} "
        f"within {GOAL}x)")
    return ratios


def tiny(repeats, target_s, out=print):
    tg = _tg()
    shape = (2, 4)                      # 8 elements, 2-D so the axis reductions apply
    na, nb, np_ = arrays(shape)
    ta, tb, tp = (tg.from_numpy(x) for x in (na, nb, np_))
    ga, gb, gp = (tg.tensor(x, requires_grad=True) for x in (na, nb, np_))
    out("")
    out("2. per-op Python overhead on 8-element float32 tensors (2, 4), µs per op")
    out(f"   {'op':28s} {'numpy':>7s} {'tg':>7s} {'tg-numpy':>9s} {'ratio':>7s}")
    extra = []
    rows = [(name, tf, nf, (ta, tb, tp)) for name, tf, nf in OPS]
    rows += [(name + " (requires_grad)", tf, nf, (ga, gb, gp)) for name, tf, nf in OPS if name in GRAD_OPS]
    for name, tf, nf, (a, b, p) in rows:
        t, n = compare(lambda: tf(a, b, p), lambda: nf(na, nb, np_), repeats, target_s)
        extra.append(t - n)
        out(f"   {name:28s} {n * 1e6:7.2f} {t * 1e6:7.2f} {(t - n) * 1e6:9.2f} {t / n:7.1f}")

    def tg_bwd():
        ga.grad = None
        (ga * gb).tanh().sum().backward()

    def np_bwd():
        y = np.tanh(na * nb)
        y.sum()
        dz = 1.0 - y * y
        return dz * nb, dz * na

    t, n = compare(tg_bwd, np_bwd, repeats, target_s)
    out(f"   {'tanh(a*b).sum() fwd+bwd':28s} {n * 1e6:7.2f} {t * 1e6:7.2f} {(t - n) * 1e6:9.2f} {t / n:7.1f}"
        f"   (numpy: hand backward)")
    out(f"   median extra cost per op: {statistics.median(extra) * 1e6:.2f} µs")
    return extra


def main(quick=False, repeats=None, out=print):
    repeats = repeats or (5 if quick else 11)
    target_s = 0.01 if quick else 0.03
    import os
    env = {k: os.environ[k] for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE") if k in os.environ}
    out(f"numpy {np.__version__}; medians of {repeats} interleaved rounds, samples >= {target_s * 1e3:g} ms; "
        f"env {env or '{}'}")
    big(repeats, target_s, out)
    tiny(repeats, target_s, out)
    return 0


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeats", type=int)
    a = ap.parse_args()
    sys.exit(main(quick=a.quick, repeats=a.repeats))
