"""Train a small MLP on a 3-class spiral with tracegrad, eager and (when available) compiled.

    python examples/mlp_train.py            # default number of steps
    python examples/mlp_train.py --quick    # fewer steps, for tests
    python examples/mlp_train.py --steps 500

The data set is the classic 2-D spiral (three interleaved arms), made with NumPy from a
fixed seed. The model is tg.nn.Sequential(Linear, ReLU, Linear, ReLU, Linear), trained
full-batch with Adam on log-softmax cross-entropy until it fits the training set
(target: >= 95 % accuracy). It prints loss and accuracy as it goes and the median time
of one training step.

If tracegrad has `tg.compile`, the same training (same initial weights, same number of
steps) runs again with the whole step -- forward, loss.backward(), opt.step(),
opt.zero_grad() -- inside one `@tg.compile` function, and the eager and compiled step
times are printed side by side. A compile error is reported and the script exits with
status 1: there is no silent fallback to eager.
"""
import argparse
import statistics
import sys
import time
import traceback

import numpy as np

import tracegrad as tg
import tracegrad.nn.functional as F
from tracegrad.bench.load import Load

TARGET = 0.95


def spiral(points_per_class=100, classes=3, noise=0.2, seed=0):
    """The cs231n spiral: `classes` arms of `points_per_class` points each, float32 x, int64 y."""
    rng = np.random.default_rng(seed)
    xs, ys = [], []
    for k in range(classes):
        r = np.linspace(0.0, 1.0, points_per_class)
        theta = np.linspace(k * 4.0, (k + 1) * 4.0, points_per_class) + rng.normal(0.0, noise, points_per_class)
        xs.append(np.stack([r * np.sin(theta), r * np.cos(theta)], axis=1))
        ys.append(np.full(points_per_class, k))
    return np.concatenate(xs).astype(np.float32), np.concatenate(ys).astype(np.int64)


def make_model(seed, hidden=64):
    tg.manual_seed(seed)
    return tg.nn.Sequential(
        tg.nn.Linear(2, hidden), tg.nn.ReLU(),
        tg.nn.Linear(hidden, hidden), tg.nn.ReLU(),
        tg.nn.Linear(hidden, 3),
    )


def accuracy(model, x, y):
    with tg.no_grad():
        return float((model(x).argmax(axis=1) == y).float().mean())


def eager_step(model, opt, x, y):
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad()
    return loss


def train(name, step, model, x, y, steps, log_every):
    """Run `steps` calls of step(x, y); returns (final accuracy, step times in s, first-call time in s)."""
    times = []
    for i in range(steps):
        t0 = time.perf_counter()
        loss = step(x, y)
        times.append(time.perf_counter() - t0)
        if i % log_every == 0 or i == steps - 1:
            print(f"  [{name}] step {i:4d}  loss {float(loss):.4f}  acc {accuracy(model, x, y):6.1%}", flush=True)
    return accuracy(model, x, y), times[1:], times[0]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=None, help="training steps (default 400, 250 with --quick)")
    ap.add_argument("--quick", action="store_true", help="fewer steps, quieter log (for tests)")
    ap.add_argument("--lr", type=float, default=0.01, help="Adam learning rate (default 0.01)")
    args = ap.parse_args(argv)
    steps = args.steps or (250 if args.quick else 400)
    log_every = max(1, steps // (5 if args.quick else 10))

    xs, ys = spiral()
    x, y = tg.from_numpy(xs), tg.from_numpy(ys)
    print(f"spiral: {len(ys)} points, 3 classes; MLP 2-64-64-3, Adam lr={args.lr}, {steps} full-batch steps")

    # --- eager ---------------------------------------------------------------------------
    model = make_model(seed=0)
    opt = tg.optim.Adam(model.parameters(), lr=args.lr)
    with Load() as eager_load:
        acc, times, _ = train("eager", lambda x, y: eager_step(model, opt, x, y), model, x, y, steps, log_every)
    eager_ms = statistics.median(times) * 1e3
    ok = acc >= TARGET
    print(f"eager: final training accuracy {acc:.1%} (target {TARGET:.0%}: {'reached' if ok else 'MISSED'}); "
          f"median step {eager_ms:.3f} ms")

    if not hasattr(tg, "compile"):
        print("tg.compile is not available in this build: compiled run skipped")
        print(f"final accuracy: {acc:.1%}")
        return 0 if ok else 1

    # --- compiled: the whole step in one @tg.compile function ------------------------------
    cmodel = make_model(seed=0)                      # same initial weights as the eager run
    copt = tg.optim.Adam(cmodel.parameters(), lr=args.lr)

    @tg.compile
    def train_step(model, opt, x, y):
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    try:
        with Load() as compiled_load:
            cacc, ctimes, first = train("compiled", lambda x, y: train_step(cmodel, copt, x, y), cmodel, x, y,
                                        steps, log_every)
    except Exception as e:  # no silent fallback: say what failed and exit non-zero
        traceback.print_exc()
        print(f"\nERROR: tg.compile failed on the training step: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    compiled_ms = statistics.median(ctimes) * 1e3
    cok = cacc >= TARGET
    print(f"compiled: final training accuracy {cacc:.1%} (target {TARGET:.0%}: {'reached' if cok else 'MISSED'})")
    print()
    print(f"{'':10s} {'median step':>12s} {'first call':>11s} {'final acc':>10s}")
    print(f"{'eager':10s} {eager_ms:9.3f} ms {'':>11s} {acc:10.1%}")
    print(f"{'compiled':10s} {compiled_ms:9.3f} ms {first:9.3f} s {cacc:10.1%}")
    print(f"speed-up: {eager_ms / compiled_ms:.2f}x")
    for label, load in (("eager", eager_load), ("compiled", compiled_load)):
        if load.note():
            print(f"WARNING ({label} run): {load.note()}")
    print(f"final accuracy: {acc:.1%} eager, {cacc:.1%} compiled")
    return 0 if ok and cok else 1


if __name__ == "__main__":
    sys.exit(main())
