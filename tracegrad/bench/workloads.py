"""The reference workloads: the eight of the bench's definition (W1-W8), one small function per column, and
models defined in modules of their own: W9 and W10 two CNN training steps (cnn_workloads.py), W11 a
2-layer LSTM's training step (lstm_step.py), W12 a transformer's training step (transformer.py), W13 a
multi-tensor Adam update (adam_update.py).

Every workload has
  - `inputs(seed)`: a dict of NumPy arrays (float32, int64 labels), fixed seed;
  - `reference(inp)`: the outputs in float64 (the NumPy code run on float64 copies);
  - one setup function per column, `setup(inp) -> run`, where `run()` does one whole
    step (forward, and backward / update where the workload has them) and returns the
    outputs that are checked against the reference: [loss or y, grads ...].

Columns: "numpy" (hand-written backward; x**3 written x*x*x), "tg eager", "tg compiled"
(only when `tg.compile` exists), and the peers of peers.py: "torch eager", "torch.compile",
"jax.jit" (only when importable). Framework modules are imported lazily, inside the setup
functions.
"""
import math
from dataclasses import dataclass, field

import numpy as np

from . import adam_update as ADAM_UPDATE
from . import transformer as GPT
from .lstm_step import workload as lstm_workload
from .np_steps import cross_entropy_with_grad, sgd_implied

C_GELU = 0.7978845608            # sqrt(2/pi), as written in WORKLOADS.md
EPS_LN = 1e-5
LR = 0.01                         # W4's SGD learning rate


@dataclass
class Workload:
    id: str
    name: str
    what: str
    inputs: callable
    reference: callable
    columns: dict = field(default_factory=dict)     # column name -> setup(inp) -> run
    implied: callable = None                        # (inp, outputs) -> outputs to check (W4: params -> grads)
    tolerances: tuple = None                        # per output max rel error (default: the bench's TOLERANCE)
    floor_bytes: int = None                         # memory-bound: bytes that must move per call
    compute_floor: callable = None                  # inp -> run(): its arithmetic on cached data (floor.py)
    stateful: bool = False                          # each call updates parameters (a training step)


def _rng(seed):
    return np.random.default_rng(seed)


def _np(x):
    """Any framework's tensor (or a NumPy array) as a NumPy array copy."""
    if hasattr(x, "detach"):
        x = x.detach()
    if hasattr(x, "cpu") and not isinstance(x, np.ndarray):
        x = x.cpu()
    return np.array(x.numpy() if hasattr(x, "numpy") and not isinstance(x, np.ndarray) else x)


# ================================================================== W1 gelu_fwd
def w1_inputs(seed=1):
    return {"x": _rng(seed).standard_normal(4_194_304).astype(np.float32)}


def w1_numpy(inp):
    x = inp["x"]

    def run():
        return [0.5 * x * (1.0 + np.tanh(C_GELU * (x + 0.044715 * (x * x * x))))]
    return run


def _gelu(x, tanh):
    return 0.5 * x * (1.0 + tanh(C_GELU * (x + 0.044715 * x ** 3)))


def w1_tg_eager(inp):
    import tracegrad as tg
    x = tg.from_numpy(inp["x"])
    return lambda: [_gelu(x, lambda t: t.tanh())]


def w1_tg_compiled(inp):
    import tracegrad as tg
    x = tg.from_numpy(inp["x"])
    f = tg.compile(lambda x: _gelu(x, lambda t: t.tanh()))
    return lambda: [f(x)]


def w1_compute_floor(inp, block=65536):
    """W1's formula on as many elements, from a 256 KB block that stays in cache, summed (floor.py)."""
    import tracegrad as tg
    n = inp["x"].size
    x = tg.from_numpy(np.ascontiguousarray(inp["x"][:block]))
    f = tg.compile(lambda x: _gelu(x.expand(n // block, block), lambda t: t.tanh()).sum())
    return lambda: f(x)


# ================================================================== W2 softmax_fwd
def w2_inputs(seed=2):
    return {"x": _rng(seed).standard_normal((4096, 1024)).astype(np.float32)}


def w2_numpy(inp):
    x = inp["x"]

    def run():
        e = np.exp(x - x.max(axis=1, keepdims=True))
        return [e / e.sum(axis=1, keepdims=True)]
    return run


def _softmax(x):
    e = (x - x.amax(axis=1, keepdims=True)).exp()
    return e / e.sum(axis=1, keepdims=True)


def w2_tg_eager(inp):
    import tracegrad as tg
    x = tg.from_numpy(inp["x"])
    return lambda: [_softmax(x)]


def w2_tg_compiled(inp):
    import tracegrad as tg
    x = tg.from_numpy(inp["x"])
    f = tg.compile(_softmax)
    return lambda: [f(x)]


# ================================================================== W3 layernorm_fwd_bwd
def w3_inputs(seed=3):
    r = _rng(seed)
    return {"x": r.standard_normal((4096, 1024)).astype(np.float32),
            "w": (1.0 + 0.1 * r.standard_normal(1024)).astype(np.float32),
            "b": (0.1 * r.standard_normal(1024)).astype(np.float32),
            "g": r.standard_normal((4096, 1024)).astype(np.float32)}


def w3_numpy(inp):
    x, w, b, g = inp["x"], inp["w"], inp["b"], inp["g"]

    def run():
        mean = x.mean(axis=1, keepdims=True)
        d = x - mean
        var = (d * d).mean(axis=1, keepdims=True)
        rstd = 1.0 / np.sqrt(var + EPS_LN)
        xhat = d * rstd
        y = xhat * w + b
        loss = (y * g).sum()
        # backward
        dw = (g * xhat).sum(axis=0)
        db = g.sum(axis=0)
        dxhat = g * w
        dx = rstd * (dxhat - dxhat.mean(axis=1, keepdims=True)
                     - xhat * (dxhat * xhat).mean(axis=1, keepdims=True))
        return [loss, dx, dw, db]
    return run


def _layernorm_loss(x, w, b, g, sqrt):
    mean = x.mean(axis=1, keepdims=True)
    d = x - mean
    var = (d * d).mean(axis=1, keepdims=True)
    y = d / sqrt(var + EPS_LN) * w + b
    return (y * g).sum()


def _tg_leaves(tg, inp, names):
    return [tg.tensor(inp[n], requires_grad=True) if n in names else tg.from_numpy(inp[n]) for n in inp]


def _grads_after(leaves):
    return [t.grad for t in leaves]


def _tg_fwd_bwd(loss_fn, tensors, leaves):
    """run(): reset grads, loss = loss_fn(*tensors), loss.backward(); [loss, grads...]."""
    def run():
        for t in leaves:
            t.grad = None
        loss = loss_fn(*tensors)
        loss.backward()
        return [loss] + _grads_after(leaves)
    return run


def w3_tg_eager(inp):
    import tracegrad as tg
    x, w, b, g = ts = _tg_leaves(tg, inp, ("x", "w", "b"))
    return _tg_fwd_bwd(lambda x, w, b, g: _layernorm_loss(x, w, b, g, lambda t: t.sqrt()), ts, [x, w, b])


def w3_tg_compiled(inp):
    import tracegrad as tg
    x, w, b, g = ts = _tg_leaves(tg, inp, ("x", "w", "b"))
    f = tg.compile(lambda x, w, b, g: _layernorm_loss(x, w, b, g, lambda t: t.sqrt()))
    return _tg_fwd_bwd(f, ts, [x, w, b])


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


def _tg_train_step(model, opt, x, y):
    import tracegrad.nn.functional as F
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad()
    return loss


def w4_tg_eager(inp):
    import tracegrad as tg
    model, opt, x, y = _tg_mlp(tg, inp)
    return lambda: [_tg_train_step(model, opt, x, y)] + list(model.parameters())


def w4_tg_compiled(inp):
    import tracegrad as tg
    model, opt, x, y = _tg_mlp(tg, inp)
    step = tg.compile(_tg_train_step)                # the whole step: forward, backward, SGD update
    return lambda: [step(model, opt, x, y)] + list(model.parameters())


# ================================================================== W5 tiny_overhead
CHAIN = [("mul", 0.5), ("add", 0.1), ("tanh",), ("mul", 1.5), ("sub", 0.2),
         ("exp",), ("mul", 0.3), ("add", 0.4), ("tanh",), ("sub", 0.1),
         ("mul", 2.0), ("exp",), ("mul", 0.25), ("add", 0.5), ("tanh",),
         ("mul", 1.1), ("sub", 0.3), ("exp",), ("mul", 0.7), ("tanh",)]      # 20 elementwise ops


def w5_inputs(seed=5):
    return {"x": _rng(seed).standard_normal(8).astype(np.float32)}


def _step(x, op, c, tanh, exp):
    """One op of CHAIN applied to x."""
    if op == "mul":
        return x * c[0]
    if op == "add":
        return x + c[0]
    if op == "sub":
        return x - c[0]
    return tanh(x) if op == "tanh" else exp(x)


def _chain(x, tanh, exp):
    for op, *c in CHAIN:
        x = _step(x, op, c, tanh, exp)
    return x.sum()


def w5_numpy(inp):
    x0 = inp["x"]

    def run():
        outs, x = [], x0
        for op, *c in CHAIN:                           # forward, keeping each op's output
            x = _step(x, op, c, np.tanh, np.exp)
            outs.append(x)
        loss = x.sum()
        g = np.ones_like(x0)
        for (op, *c), y in zip(reversed(CHAIN), reversed(outs)):   # backward
            if op == "mul":
                g = g * c[0]
            elif op == "tanh":
                g = g * (1.0 - y * y)
            elif op == "exp":
                g = g * y
        return [loss, g]
    return run


def w5_tg_eager(inp):
    import tracegrad as tg
    (x,) = ts = _tg_leaves(tg, inp, ("x",))
    return _tg_fwd_bwd(lambda x: _chain(x, lambda t: t.tanh(), lambda t: t.exp()), ts, [x])


def w5_tg_compiled(inp):
    import tracegrad as tg
    (x,) = ts = _tg_leaves(tg, inp, ("x",))
    f = tg.compile(lambda x: _chain(x, lambda t: t.tanh(), lambda t: t.exp()))
    return _tg_fwd_bwd(f, ts, [x])


# ================================================================== W6 broadcast_grad
def w6_inputs(seed=6):
    r = _rng(seed)
    return {"a": r.standard_normal((64, 1, 128)).astype(np.float32),
            "b": r.standard_normal((1, 32, 128)).astype(np.float32),
            "c": r.standard_normal(128).astype(np.float32)}


def w6_numpy(inp):
    a, b, c = inp["a"], inp["b"], inp["c"]

    def run():
        t = np.tanh(a * b + c)
        loss = t.sum()
        dz = 1.0 - t * t
        return [loss, (dz * b).sum(axis=1, keepdims=True), (dz * a).sum(axis=0, keepdims=True), dz.sum(axis=(0, 1))]
    return run


def _bcast_loss(a, b, c, tanh):
    return tanh(a * b + c).sum()


def w6_tg_eager(inp):
    import tracegrad as tg
    ts = _tg_leaves(tg, inp, ("a", "b", "c"))
    return _tg_fwd_bwd(lambda a, b, c: _bcast_loss(a, b, c, lambda t: t.tanh()), ts, ts)


def w6_tg_compiled(inp):
    import tracegrad as tg
    ts = _tg_leaves(tg, inp, ("a", "b", "c"))
    f = tg.compile(lambda a, b, c: _bcast_loss(a, b, c, lambda t: t.tanh()))
    return _tg_fwd_bwd(f, ts, ts)


# ================================================================== W7 column_center_fwd_bwd
W7_N = 8192


def w7_inputs(seed=7):
    r = _rng(seed)
    return {"x": (r.standard_normal((W7_N, 512)) + 0.25).astype(np.float32),
            "w": r.standard_normal(512).astype(np.float32)}


def w7_numpy(inp):
    x, w = inp["x"], inp["w"]

    def run():
        z = x.T
        d = z - z.mean(axis=1, keepdims=True)
        y = d * w[:, None]
        loss = (y * y).sum() / W7_N
        # backward
        dy = y * (2.0 / W7_N)
        dw = (dy * d).sum(axis=1)
        dd = dy * w[:, None]
        dz = dd - dd.mean(axis=1, keepdims=True)
        return [loss, dz.T, dw]
    return run


def _center_loss(x, w):
    z = x.T                                          # a transposed view
    y = (z - z.mean(axis=1, keepdims=True)) * w[:, None]
    return (y * y).sum() / W7_N


def w7_tg_eager(inp):
    import tracegrad as tg
    ts = _tg_leaves(tg, inp, ("x", "w"))
    return _tg_fwd_bwd(_center_loss, ts, ts)


def w7_tg_compiled(inp):
    import tracegrad as tg
    ts = _tg_leaves(tg, inp, ("x", "w"))
    return _tg_fwd_bwd(tg.compile(_center_loss), ts, ts)


# ================================================================== W8 mlp_deep_narrow_adam
W8_SIZES = (64,) + (32,) * 11 + (10,)                 # 12 Linear layers
W8_PARAMS = tuple(f"{k}{i}" for i in range(len(W8_SIZES) - 1) for k in ("W", "b"))
ADAM = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8)


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


# ================================================================== the table of workloads
def _reference(numpy_setup):
    """The NumPy code run on float64 copies (int arrays kept) is the reference."""
    def ref(inp):
        inp64 = {k: v.astype(np.float64) if v.dtype.kind == "f" else v for k, v in inp.items()}
        return [np.asarray(o, dtype=np.float64) for o in numpy_setup(inp64)()]
    return ref


def _peer(name):
    from . import peers                              # imports this module: loaded on first use
    return getattr(peers, name)


def _workload(wid, name, what, mod=globals()):
    n = wid.lower()
    w = Workload(wid, name, what, mod[f"{n}_inputs"], _reference(mod[f"{n}_numpy"]))
    w.columns = {"numpy": mod[f"{n}_numpy"], "tg eager": mod[f"{n}_tg_eager"],
                 "tg compiled": mod[f"{n}_tg_compiled"],
                 "torch eager": lambda inp: _peer("torch_setup")(wid, inp, compiled=False),
                 "torch built-in": lambda inp: _peer("torch_builtin_setup")(wid, inp),
                 "torch.compile": lambda inp: _peer("torch_setup")(wid, inp, compiled=True),
                 "jax.jit": lambda inp: _peer("jax_setup")(wid, inp)}
    return w


def _model_workload(wid, name, what, inputs, numpy_setup, tg_setup, torch_setup, stateful):
    """A workload defined in a module of its own (transformer.py, adam_update.py): inputs, the NumPy column,
    tracegrad's and torch's setups taking `compiled`; no torch built-in, no jax column. `stateful`: its
    outputs are the parameters a call updates (W13), not that call's own results (W12: loss, gradients)."""
    w = Workload(wid, name, what, inputs, _reference(numpy_setup), stateful=stateful)
    w.columns = {"numpy": numpy_setup, "tg eager": lambda inp: tg_setup(inp, False),
                 "tg compiled": lambda inp: tg_setup(inp, True), "torch eager": lambda inp: torch_setup(inp, False),
                 "torch built-in": lambda inp: None, "torch.compile": lambda inp: torch_setup(inp, True),
                 "jax.jit": lambda inp: None}
    return w


MB16 = 4096 * 1024 * 4          # one (4096, 1024) or (8192, 512) float32 array, or W1's 4M elements
WORKLOADS = [
    _workload("W1", "gelu_fwd", "4M elements, 0.5*x*(1+tanh(0.7978845608*(x+0.044715*x**3))), forward"),
    _workload("W2", "softmax_fwd", "(4096, 1024) row softmax from primitives, forward"),
    _workload("W3", "layernorm_fwd_bwd", "(4096, 1024) layer norm from primitives, loss (y*g).sum(), grads x, w, b"),
    _workload("W4", "mlp_train_step", "MLP 784-256-256-10, batch 256, cross-entropy, fwd+bwd+SGD(0.01)"),
    _workload("W5", "tiny_overhead", "x (8,), chain of 20 elementwise ops, fwd+bwd: per-call overhead"),
    _workload("W6", "broadcast_grad", "a (64,1,128) * b (1,32,128) + c (128,), tanh, sum; grads a, b, c"),
    _workload("W7", "column_center_fwd_bwd", "x (8192, 512), z = x.T centered per row times w, loss mean of "
              "squares; grads x, w"),
    _workload("W8", "mlp_deep_narrow_adam", "12 Linear 64-32x11-10, batch 128, relu, cross-entropy, fwd+bwd+Adam, "
              "one compiled step"),
]
WORKLOADS[3].implied = sgd_implied(PARAMS, LR)
WORKLOADS[0].compute_floor = w1_compute_floor
WORKLOADS[3].stateful = WORKLOADS[7].stateful = True
WORKLOADS[6].tolerances = (1e-5, 1e-4, 1e-4)     # loss, dx, dw (WORKLOADS.md)
# Memory-bound workloads: bytes that must move per call (read the inputs, write the outputs; W7
# reads x twice, for the means and then for the centered values, and writes dx).
for _w, _bytes in zip(WORKLOADS, (2 * MB16, 2 * MB16, 3 * MB16, None, None, None, 3 * MB16, None)):
    _w.floor_bytes = _bytes

WORKLOADS.append(lstm_workload(Workload, _reference))


from .cnn_workloads import CNN_WORKLOADS  # noqa: E402  (it builds on this module's helpers)

WORKLOADS += CNN_WORKLOADS
WORKLOADS += [
    _model_workload("W12", "gpt_train_step", "GPT-style decoder, 2 pre-LN blocks, causal attention, erf GELU, "
                    "tied head, cross-entropy, Adam; batch 8 x 64 tokens, width 128, vocabulary 512",
                    GPT.inputs, GPT.numpy_step, GPT.tg_step, GPT.torch_step, stateful=False),
    _model_workload("W13", "adam_multi_tensor", "one Adam step over 60 tensors (2.4M elements), gradients given",
                    ADAM_UPDATE.inputs, ADAM_UPDATE.numpy_update, ADAM_UPDATE.tg_update, ADAM_UPDATE.torch_update,
                    stateful=True),
]
WORKLOADS.sort(key=lambda w: int(w.id[1:]))


def find(name):
    """A workload by id ("W3", "w3", "3") or name ("layernorm_fwd_bwd", "layernorm")."""
    key = name.strip().lower()
    for w in WORKLOADS:
        if key in (w.id.lower(), w.id[1:], w.name) or w.name.startswith(key):
            return w
    raise KeyError(f"unknown workload {name!r}; choose one of " +
                   ", ".join(f"{w.id} ({w.name})" for w in WORKLOADS))
