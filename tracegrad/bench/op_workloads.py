"""The bench's workloads of a few ops each (WORKLOADS.md): W1 gelu, W2 softmax, W3 layer norm forward and
backward, W5 a chain of 20 tiny ops (per-call overhead), W6 a broadcast op's gradients, W7 a centered
transposed view's loss and gradients. Each has `wN_inputs(seed)`, `wN_numpy(inp)` and one setup per
tracegrad column, `wN_tg_eager(inp)` and `wN_tg_compiled(inp)` (-> run); the math functions (`_gelu`,
`_layernorm_loss`, ...) take the framework's functions so the peers (peers.py) run the same code."""
import numpy as np

from .workload_base import _rng, _tg_fwd_bwd

C_GELU = 0.7978845608            # sqrt(2/pi), as written in WORKLOADS.md
EPS_LN = 1e-5


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


def w1_compute_floor(inp, block=16384):
    """W1's formula on as many elements, read from a 64 KB block that stays in cache, summed (floor.py): x
    expanded to (n // block, block) plus a per-row offset of zeros, so no row's arithmetic is the same
    expression as another's (an expanded x alone lets LLVM compute a column's value once for every row); two
    operations per element more than W1 (the offset's add, the sum's)."""
    import tracegrad as tg
    rows = inp["x"].size // block
    x = tg.from_numpy(np.ascontiguousarray(inp["x"][:block]))
    zeros = tg.from_numpy(np.zeros((rows, 1), np.float32))
    f = tg.compile(lambda x, z: _gelu(x.expand(rows, block) + z, lambda t: t.tanh()).sum())
    return lambda: f(x, zeros)


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


def _tg_leaves(tg, inp, names):
    return [tg.tensor(inp[n], requires_grad=True) if n in names else tg.from_numpy(inp[n]) for n in inp]


def _layernorm_loss(x, w, b, g, sqrt):
    mean = x.mean(axis=1, keepdims=True)
    d = x - mean
    var = (d * d).mean(axis=1, keepdims=True)
    y = d / sqrt(var + EPS_LN) * w + b
    return (y * g).sum()


def w3_tg_eager(inp):
    import tracegrad as tg
    x, w, b, g = ts = _tg_leaves(tg, inp, ("x", "w", "b"))
    return _tg_fwd_bwd(lambda x, w, b, g: _layernorm_loss(x, w, b, g, lambda t: t.sqrt()), ts, [x, w, b])


def w3_tg_compiled(inp):
    import tracegrad as tg
    x, w, b, g = ts = _tg_leaves(tg, inp, ("x", "w", "b"))
    f = tg.compile(lambda x, w, b, g: _layernorm_loss(x, w, b, g, lambda t: t.sqrt()))
    return _tg_fwd_bwd(f, ts, [x, w, b])


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
