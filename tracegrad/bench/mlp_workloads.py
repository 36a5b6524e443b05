"""The bench's two MLP training steps (WORKLOADS.md): W4, 784-256-256-10 with SGD, and W8, 12 narrow
layers 64-32x11-10 with Adam; cross-entropy, forward, backward and update in one call. Each has
`wN_inputs(seed)`, `wN_numpy(inp)` (a hand-written backward and update) and `wN_tg_eager(inp)`,
`wN_tg_compiled(inp)` (the whole step compiled)."""
import math

import numpy as np

from .np_steps import cross_entropy_with_grad
from .workload_base import ADAM, LR, _rng, _tg_train_step


# ================================================================== W4 mlp_train_step
SIZES = (784, 256, 256, 10)


def w4_inputs(seed=4):
    r = _rng(seed)
    inp = {"x": r.standard_normal((256, 784)).astype(np.float32),
           "y": r.integers(0, 10, 256).astype(np.int64)}
    for i, (fi, fo) in enumerate(zip(SIZES[:-1], SIZES[1:])):
        bound = 1.0 / math.sqrt(fi)                 # PyTorch's nn.Linear init
        inp[f"W{i}"] = r.uniform(-bound, bound, (fo, fi)).astype(np.float32)
        inp[f"b{i}"] = r.uniform(-bound, bound, fo).astype(np.float32)
    return inp


PARAMS = ("W0", "b0", "W1", "b1", "W2", "b2")


def w4_numpy(inp):
    x, y = inp["x"], inp["y"]
    p = {k: inp[k].copy() for k in PARAMS}          # updated in place, step after step

    def run():
        h0 = x @ p["W0"].T + p["b0"]
        a0 = np.maximum(h0, 0)
        h1 = a0 @ p["W1"].T + p["b1"]
        a1 = np.maximum(h1, 0)
        logits = a1 @ p["W2"].T + p["b2"]
        loss, dlogits = cross_entropy_with_grad(logits, y)
        # backward
        g = {"W2": dlogits.T @ a1, "b2": dlogits.sum(axis=0)}
        dh1 = (dlogits @ p["W2"]) * (h1 > 0)
        g["W1"], g["b1"] = dh1.T @ a0, dh1.sum(axis=0)
        dh0 = (dh1 @ p["W1"]) * (h0 > 0)
        g["W0"], g["b0"] = dh0.T @ x, dh0.sum(axis=0)
        for k in PARAMS:                             # SGD
            p[k] -= LR * g[k]
        return [loss] + [p[k] for k in PARAMS]
    return run


def _tg_mlp(tg, inp):
    model = tg.nn.Sequential(tg.nn.Linear(784, 256), tg.nn.ReLU(), tg.nn.Linear(256, 256), tg.nn.ReLU(),
                             tg.nn.Linear(256, 10))
    model.load_state_dict({f"{2 * i}.{'weight' if k[0] == 'W' else 'bias'}": tg.from_numpy(inp[k])
                           for k in PARAMS for i in [int(k[1])]})
    return model, tg.optim.SGD(model.parameters(), lr=LR), tg.from_numpy(inp["x"]), tg.from_numpy(inp["y"])


def w4_tg_eager(inp):
    import tracegrad as tg
    model, opt, x, y = _tg_mlp(tg, inp)
    return lambda: [_tg_train_step(model, opt, x, y)] + list(model.parameters())


def w4_tg_compiled(inp):
    import tracegrad as tg
    model, opt, x, y = _tg_mlp(tg, inp)
    step = tg.compile(_tg_train_step)                # the whole step: forward, backward, SGD update
    return lambda: [step(model, opt, x, y)] + list(model.parameters())


# ================================================================== W8 mlp_deep_narrow_adam
W8_SIZES = (64,) + (32,) * 11 + (10,)                 # 12 Linear layers
W8_PARAMS = tuple(f"{k}{i}" for i in range(len(W8_SIZES) - 1) for k in ("W", "b"))


def w8_inputs(seed=8):
    r = _rng(seed)
    inp = {"x": r.standard_normal((128, 64)).astype(np.float32),
           "y": r.integers(0, 10, 128).astype(np.int64)}
    for i, (fi, fo) in enumerate(zip(W8_SIZES[:-1], W8_SIZES[1:])):
        inp[f"W{i}"] = (r.standard_normal((fo, fi)) * math.sqrt(2.0 / fi)).astype(np.float32)
        inp[f"b{i}"] = (0.01 * r.standard_normal(fo)).astype(np.float32)
    return inp


def w8_numpy(inp):
    x, y = inp["x"], inp["y"]
    p = {k: inp[k].copy() for k in W8_PARAMS}          # updated in place, step after step
    m = {k: np.zeros_like(v) for k, v in p.items()}
    v = {k: np.zeros_like(a) for k, a in p.items()}
    t, layers = [0], len(W8_SIZES) - 1
    (b1, b2), lr, eps = ADAM["betas"], ADAM["lr"], ADAM["eps"]

    def run():
        hs, acts = [], [x]
        for i in range(layers):
            h = acts[-1] @ p[f"W{i}"].T + p[f"b{i}"]
            hs.append(h)
            if i < layers - 1:
                acts.append(np.maximum(h, 0))
        loss, dh = cross_entropy_with_grad(hs[-1], y)
        # backward
        g = {}
        for i in reversed(range(layers)):
            g[f"W{i}"], g[f"b{i}"] = dh.T @ acts[i], dh.sum(axis=0)
            if i:
                dh = (dh @ p[f"W{i}"]) * (hs[i - 1] > 0)
        t[0] += 1                                      # Adam, PyTorch's formulation
        for k in W8_PARAMS:
            m[k] = b1 * m[k] + (1 - b1) * g[k]
            v[k] = b2 * v[k] + (1 - b2) * g[k] * g[k]
            denom = np.sqrt(v[k] / (1 - b2 ** t[0])) + eps
            p[k] -= lr / (1 - b1 ** t[0]) * m[k] / denom
        return [loss] + [p[k] for k in W8_PARAMS]
    return run


def _tg_deep_mlp(tg, inp):
    layers = []
    for i, (fi, fo) in enumerate(zip(W8_SIZES[:-1], W8_SIZES[1:])):
        layers += [tg.nn.Linear(fi, fo), tg.nn.ReLU()]
    model = tg.nn.Sequential(*layers[:-1])
    model.load_state_dict({f"{2 * int(k[1:])}.{'weight' if k[0] == 'W' else 'bias'}": tg.from_numpy(inp[k])
                           for k in W8_PARAMS})
    return model, tg.optim.Adam(model.parameters(), **ADAM), tg.from_numpy(inp["x"]), tg.from_numpy(inp["y"])


def w8_tg_eager(inp):
    import tracegrad as tg
    model, opt, x, y = _tg_deep_mlp(tg, inp)
    return lambda: [_tg_train_step(model, opt, x, y)] + list(model.parameters())


def w8_tg_compiled(inp):
    import tracegrad as tg
    model, opt, x, y = _tg_deep_mlp(tg, inp)
    step = tg.compile(_tg_train_step)                # the whole step: forward, backward, Adam update
    return lambda: [step(model, opt, x, y)] + list(model.parameters())
