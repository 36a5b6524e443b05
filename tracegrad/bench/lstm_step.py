"""W11 lstm_train_step: a 2-layer LSTM (seq 32, batch 32, input 64, hidden 128), a linear head on
the last step, cross-entropy, backward, SGD; the columns of op_workloads.py (numpy with a hand-written
backward through time, tg eager and compiled, torch eager and torch.compile, jax.jit)."""
import math

import numpy as np

from .np_steps import cross_entropy_with_grad, sgd_implied
from .workload_base import Workload, _reference

SEQ, BATCH, IN, HIDDEN, CLASSES, LAYERS = 32, 32, 64, 128, 10, 2
LR = 0.1
PARAMS = tuple(f"lstm.{k}_l{layer}" for layer in range(LAYERS) for k in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")) \
    + ("head.weight", "head.bias")


def _shape(name):
    if name.startswith("head."):
        return (CLASSES, HIDDEN) if name == "head.weight" else (CLASSES,)
    kind, layer = name[len("lstm."):].rsplit("_l", 1)
    if kind == "weight_ih":
        return 4 * HIDDEN, IN if layer == "0" else HIDDEN
    return (4 * HIDDEN, HIDDEN) if kind == "weight_hh" else (4 * HIDDEN,)


def inputs(seed=11):
    r = np.random.default_rng(seed)
    inp = {"x": r.standard_normal((SEQ, BATCH, IN)).astype(np.float32),
           "y": r.integers(0, CLASSES, BATCH).astype(np.int64)}
    bound = 1.0 / math.sqrt(HIDDEN)                     # PyTorch's init of LSTM and of Linear(HIDDEN, .)
    for name in PARAMS:
        inp[name] = r.uniform(-bound, bound, _shape(name)).astype(np.float32)
    return inp


def _sig(v):
    return 1.0 / (1.0 + np.exp(-v))


def _np_layer(p, layer, xs):
    """Forward of one layer over xs (T, B, in): outputs (T, B, H) and what the backward needs."""
    w_ih, w_hh, b_ih, b_hh = (p[f"lstm.{k}_l{layer}"] for k in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"))
    gi = xs @ w_ih.T + b_ih + b_hh
    h, c = np.zeros((BATCH, HIDDEN), xs.dtype), np.zeros((BATCH, HIDDEN), xs.dtype)
    hs, saved = [], []
    for t in range(SEQ):
        a = gi[t] + h @ w_hh.T
        i, f, g, o = _sig(a[:, :HIDDEN]), _sig(a[:, HIDDEN:2 * HIDDEN]), np.tanh(a[:, 2 * HIDDEN:3 * HIDDEN]), \
            _sig(a[:, 3 * HIDDEN:])
        c_prev, h_prev = c, h
        c = f * c + i * g
        tc = np.tanh(c)
        h = o * tc
        saved.append((i, f, g, o, c_prev, h_prev, tc))
        hs.append(h)
    return np.stack(hs), saved


def _np_layer_grads(p, layer, xs, saved, dout):
    """Backward through time of one layer: the parameter grads and d(xs)."""
    w_ih, w_hh = p[f"lstm.weight_ih_l{layer}"], p[f"lstm.weight_hh_l{layer}"]
    dh, dc = np.zeros((BATCH, HIDDEN), xs.dtype), np.zeros((BATCH, HIDDEN), xs.dtype)
    d_pre = np.empty((SEQ, BATCH, 4 * HIDDEN), xs.dtype)
    dw_hh = np.zeros_like(w_hh)
    for t in reversed(range(SEQ)):
        i, f, g, o, c_prev, h_prev, tc = saved[t]
        dh = dh + dout[t]
        dc = dc + dh * o * (1 - tc * tc)
        da = np.concatenate([dc * g * i * (1 - i), dc * c_prev * f * (1 - f), dc * i * (1 - g * g),
                             dh * tc * o * (1 - o)], axis=1)
        d_pre[t] = da
        dw_hh += da.T @ h_prev
        dh, dc = da @ w_hh, dc * f
    flat = d_pre.reshape(SEQ * BATCH, -1)
    db = flat.sum(axis=0)
    grads = {f"lstm.weight_ih_l{layer}": flat.T @ xs.reshape(SEQ * BATCH, -1), f"lstm.weight_hh_l{layer}": dw_hh,
             f"lstm.bias_ih_l{layer}": db, f"lstm.bias_hh_l{layer}": db}
    return grads, d_pre @ w_ih


def numpy_setup(inp):
    x, y = inp["x"], inp["y"]
    p = {k: inp[k].copy() for k in PARAMS}                # updated in place, step after step

    def run():
        layer_in, saved = [x], []
        for layer in range(LAYERS):
            out, s = _np_layer(p, layer, layer_in[-1])
            layer_in.append(out)
            saved.append(s)
        last = layer_in[-1][-1]
        logits = last @ p["head.weight"].T + p["head.bias"]
        loss, dlogits = cross_entropy_with_grad(logits, y)
        grads = {"head.weight": dlogits.T @ last, "head.bias": dlogits.sum(axis=0)}
        dout = np.zeros_like(layer_in[-1])
        dout[-1] = dlogits @ p["head.weight"]
        for layer in reversed(range(LAYERS)):
            g, dout = _np_layer_grads(p, layer, layer_in[layer], saved[layer], dout)
            grads.update(g)
        for k in PARAMS:                                  # SGD
            p[k] -= LR * grads[k]
        return [loss] + [p[k] for k in PARAMS]
    return run


def _tg_setup(inp, compiled):
    import tracegrad as tg

    class Net(tg.nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm, self.head = tg.nn.LSTM(IN, HIDDEN, num_layers=LAYERS), tg.nn.Linear(HIDDEN, CLASSES)

        def forward(self, x):
            return self.head(self.lstm(x)[0][-1])
    model = Net()
    model.load_state_dict({k: tg.from_numpy(inp[k]) for k in PARAMS})
    opt = tg.optim.SGD(model.parameters(), lr=LR)
    x, y = tg.from_numpy(inp["x"]), tg.from_numpy(inp["y"])

    def step(x, y):
        opt.zero_grad()
        loss = tg.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss
    step = tg.compile(step) if compiled else step
    params = list(model.parameters())
    return lambda: [step(x, y)] + params


def _torch_setup(inp, compiled):
    import torch
    lstm, head = torch.nn.LSTM(IN, HIDDEN, num_layers=LAYERS), torch.nn.Linear(HIDDEN, CLASSES)
    model = torch.nn.ModuleDict({"lstm": lstm, "head": head})
    model.load_state_dict({k: torch.from_numpy(inp[k].copy()) for k in PARAMS})
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    x, y = torch.from_numpy(inp["x"]), torch.from_numpy(inp["y"])
    loss_fn = lambda x, y: torch.nn.functional.cross_entropy(head(lstm(x)[0][-1]), y)   # noqa: E731
    loss_fn = torch.compile(loss_fn) if compiled else loss_fn
    params = list(model.parameters())

    def run():
        opt.zero_grad()
        loss = loss_fn(x, y)
        loss.backward()
        opt.step()
        return [loss] + params
    return run


def _jax_setup(inp):
    import jax
    import jax.numpy as jnp

    def layer(ps, xs):
        w_ih, w_hh, b_ih, b_hh = ps
        gi = xs @ w_ih.T + b_ih + b_hh

        def cell(carry, g):
            h, c = carry
            i, f, gg, o = jnp.split(g + h @ w_hh.T, 4, axis=1)
            c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(gg)
            h = jax.nn.sigmoid(o) * jnp.tanh(c)
            return (h, c), h
        zero = jnp.zeros((BATCH, HIDDEN), xs.dtype)
        return jax.lax.scan(cell, (zero, zero), gi)[1]

    def loss_fn(params, x, y):
        for k in range(LAYERS):
            x = layer(params[4 * k:4 * k + 4], x)
        logp = jax.nn.log_softmax(x[-1] @ params[-2].T + params[-1], axis=1)
        return -jnp.take_along_axis(logp, y[:, None], axis=1).mean()

    @jax.jit
    def step(params, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        return loss, [p - LR * g for p, g in zip(params, grads)]
    state = [[jnp.asarray(inp[k]) for k in PARAMS]]
    x, y = jnp.asarray(inp["x"]), jnp.asarray(inp["y"])

    def run():
        loss, state[0] = jax.block_until_ready(step(state[0], x, y))
        return [loss] + state[0]
    return run


def workload():
    """W11, for the table of workloads (workloads.py)."""
    w = Workload("W11", "lstm_train_step", f"2-layer LSTM in {IN} hidden {HIDDEN}, seq {SEQ}, batch {BATCH}, "
                 f"linear head on the last step, cross-entropy, fwd+bwd+SGD({LR})", inputs, _reference(numpy_setup))
    w.columns = {"numpy": numpy_setup, "tg eager": lambda inp: _tg_setup(inp, False),
                 "tg compiled": lambda inp: _tg_setup(inp, True),
                 "torch eager": lambda inp: _torch_setup(inp, False),
                 "torch built-in": lambda inp: None,             # torch eager already runs nn.LSTM
                 "torch.compile": lambda inp: _torch_setup(inp, True), "jax.jit": _jax_setup}
    w.implied, w.stateful = sgd_implied(PARAMS, LR), True
    return w
