"""Two convolutional training steps for the bench (issue 27): W9, a LeNet-5-style CNN (batch 64,
1x28x28: conv5x5(6, pad 2)-relu-maxpool2, conv5x5(16)-relu-maxpool2, Linear 400-120-84-10), and
W10, a small CIFAR-style CNN (batch 32, 3x32x32: three blocks conv3x3(pad 1)-relu-maxpool2 of 32,
64, 128 channels, Linear 2048-10; without batch norm, which tracegrad does not have yet). Both:
cross-entropy, backward, SGD(LR), one step per call; the outputs are [loss] + the parameters after
the update, checked as W4's (the update implies the gradient).

Columns: a hand-written NumPy forward and backward (im2col by sliding_window_view, col2im by
strided adds: also the float64 reference), tg eager and tg compiled (nn.Conv2d/MaxPool2d/Linear
modules, the whole step compiled), torch eager and torch.compile (the loss compiled, as W4's).
No jax column: jax is not installed here to check one against."""
import math

import numpy as np

from .workloads import LR, Workload, _reference, _rng, _tg_train_step

# (kind, shape): conv weights (out, in, k, k) with their padding, linear weights (out, in)
ARCH = {"W9": [("conv", (6, 1, 5, 5), 2), ("conv", (16, 6, 5, 5), 0), ("linear", (120, 400)),
               ("linear", (84, 120)), ("linear", (10, 84))],
        "W10": [("conv", (32, 3, 3, 3), 1), ("conv", (64, 32, 3, 3), 1), ("conv", (128, 64, 3, 3), 1),
                ("linear", (10, 2048))]}
BATCH = {"W9": (64, 1, 28, 28), "W10": (32, 3, 32, 32)}


def _names(wid):
    return [f"{k}{i}" for i in range(len(ARCH[wid])) for k in ("W", "b")]


def cnn_inputs(wid, seed):
    r = _rng(seed)
    inp = {"x": r.standard_normal(BATCH[wid]).astype(np.float32),
           "y": r.integers(0, 10, BATCH[wid][0]).astype(np.int64)}
    for i, layer in enumerate(ARCH[wid]):
        shape = layer[1]
        bound = 1.0 / math.sqrt(math.prod(shape[1:]))           # PyTorch's default init of both
        inp[f"W{i}"] = r.uniform(-bound, bound, shape).astype(np.float32)
        inp[f"b{i}"] = r.uniform(-bound, bound, shape[0]).astype(np.float32)
    return inp


# ------------------------------------------------------------------ NumPy, by hand
def _conv_fwd(x, w, b, pad):
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    k = w.shape[2]
    cols = np.lib.stride_tricks.sliding_window_view(xp, (k, k), axis=(2, 3))      # (N, C, OH, OW, k, k)
    n, c, oh, ow = cols.shape[:4]
    cols = cols.transpose(0, 2, 3, 1, 4, 5).reshape(n * oh * ow, c * k * k)
    y = cols @ w.reshape(w.shape[0], -1).T + b
    return y.reshape(n, oh, ow, -1).transpose(0, 3, 1, 2), (cols, xp.shape, pad)


def _conv_bwd(dy, w, cache):
    cols, padded, pad = cache
    n, o, oh, ow = dy.shape
    dmat = dy.transpose(0, 2, 3, 1).reshape(-1, o)
    k = w.shape[2]
    dcols = (dmat @ w.reshape(o, -1)).reshape(n, oh, ow, -1, k, k)
    dxp = np.zeros(padded, dy.dtype)
    for i in range(k):
        for j in range(k):
            dxp[:, :, i:i + oh, j:j + ow] += dcols[:, :, :, :, i, j].transpose(0, 3, 1, 2)
    dx = dxp[:, :, pad:padded[2] - pad, pad:padded[3] - pad]
    return dx, (dmat.T @ cols).reshape(w.shape), dmat.sum(0)


def _pool_fwd(x):
    n, c, h, w = x.shape
    win = x.reshape(n, c, h // 2, 2, w // 2, 2).transpose(0, 1, 2, 4, 3, 5).reshape(n, c, h // 2, w // 2, 4)
    pick = win.argmax(-1)                                   # the first maximum of each window, as PyTorch
    return np.take_along_axis(win, pick[..., None], -1)[..., 0], (pick, x.shape)


def _pool_bwd(dy, cache):
    pick, (n, c, h, w) = cache
    dwin = np.zeros(dy.shape + (4,), dy.dtype)
    np.put_along_axis(dwin, pick[..., None], dy[..., None], -1)
    return dwin.reshape(n, c, h // 2, w // 2, 2, 2).transpose(0, 1, 2, 4, 3, 5).reshape(n, c, h, w)


def cnn_numpy(wid, inp):
    x, y = inp["x"], inp["y"]
    names = _names(wid)
    p = {k: inp[k].copy() for k in names}                   # updated in place, step after step
    arch, count = ARCH[wid], len(inp["y"])

    def run():
        caches, a = [], x
        for i, layer in enumerate(arch):                    # forward
            if layer[0] == "conv":
                h, cc = _conv_fwd(a, p[f"W{i}"], p[f"b{i}"], layer[2])
                a, pc = _pool_fwd(np.maximum(h, 0))
                caches.append((cc, h > 0, pc))
            else:
                a = a.reshape(count, -1)
                h = a @ p[f"W{i}"].T + p[f"b{i}"]
                caches.append((a, h > 0))
                a = np.maximum(h, 0) if i < len(arch) - 1 else h
        z = a - a.max(axis=1, keepdims=True)
        ez = np.exp(z)
        s = ez.sum(axis=1, keepdims=True)
        loss = -(z[np.arange(count), y] - np.log(s[:, 0])).mean()
        d = ez / s                                          # backward
        d[np.arange(count), y] -= 1.0
        d /= count
        g = {}
        for i in reversed(range(len(arch))):
            if arch[i][0] == "linear":
                a, live = caches[i]
                if i < len(arch) - 1:
                    d = d * live
                g[f"W{i}"], g[f"b{i}"] = d.T @ a, d.sum(0)
                d = d @ p[f"W{i}"]
            else:
                cc, live, pc = caches[i]
                d = _pool_bwd(d.reshape(pc[0].shape), pc) * live
                d, g[f"W{i}"], g[f"b{i}"] = _conv_bwd(d, p[f"W{i}"], cc)
        for k in names:                                     # SGD
            p[k] -= LR * g[k]
        return [loss] + [p[k] for k in names]
    return run


def cnn_implied(wid):
    def implied(inp, outs):
        return [outs[0]] + [(inp[k].astype(np.float64) - o) / LR for k, o in zip(_names(wid), outs[1:])]
    return implied


# ------------------------------------------------------------------ tracegrad: nn modules
def _tg_model(tg, wid, inp):
    nn, layers, state = tg.nn, [], {}
    for i, layer in enumerate(ARCH[wid]):
        if layer[0] == "conv":
            o, c, k, _ = layer[1]
            layers += [nn.Conv2d(c, o, k, padding=layer[2]), nn.ReLU(), nn.MaxPool2d(2)]
        else:
            if ARCH[wid][i - 1][0] == "conv":
                layers.append(nn.Flatten())
            layers += [nn.Linear(layer[1][1], layer[1][0]), nn.ReLU()]
        state.update({f"{len(layers) - (3 if layer[0] == 'conv' else 2)}.{n}": tg.from_numpy(inp[f"{k}{i}"])
                      for n, k in (("weight", "W"), ("bias", "b"))})
    model = nn.Sequential(*layers[:-1])
    model.load_state_dict(state)
    return model, tg.optim.SGD(model.parameters(), lr=LR), tg.from_numpy(inp["x"]), tg.from_numpy(inp["y"])


def cnn_tg(wid, inp, compiled):
    import tracegrad as tg
    model, opt, x, y = _tg_model(tg, wid, inp)
    step = tg.compile(_tg_train_step) if compiled else _tg_train_step
    return lambda: [step(model, opt, x, y)] + list(model.parameters())


# ------------------------------------------------------------------ torch
def _logits(F, x, params, arch):
    for i, layer in enumerate(arch):
        w, b = params[2 * i], params[2 * i + 1]
        if layer[0] == "conv":
            x = F.max_pool2d(F.relu(F.conv2d(x, w, b, padding=layer[2])), 2)
        else:
            x = F.linear(x.flatten(1), w, b)
            x = F.relu(x) if i < len(arch) - 1 else x
    return x


def cnn_torch(wid, inp, compiled):
    import torch

    from .peers import torch_step
    F = torch.nn.functional
    params = [torch.from_numpy(inp[k].copy()) for k in _names(wid)]
    return torch_step(lambda x, y, *ps: F.cross_entropy(_logits(F, x, ps, ARCH[wid]), y), params,
                      torch.from_numpy(inp["x"]), torch.from_numpy(inp["y"]), "SGD", compiled)


def cnn_workload(wid, name, what, seed):
    w = Workload(wid, name, what, lambda: cnn_inputs(wid, seed), _reference(lambda inp: cnn_numpy(wid, inp)))
    w.columns = {"numpy": lambda inp: cnn_numpy(wid, inp),
                 "tg eager": lambda inp: cnn_tg(wid, inp, False), "tg compiled": lambda inp: cnn_tg(wid, inp, True),
                 "torch eager": lambda inp: cnn_torch(wid, inp, False),
                 "torch built-in": lambda inp: None, "torch.compile": lambda inp: cnn_torch(wid, inp, True),
                 "jax.jit": lambda inp: None}
    w.implied, w.stateful = cnn_implied(wid), True
    return w


def flops(wid):
    """2 x the multiply-adds of one training step's products: each layer's forward, its weight
    gradient and, but for the first layer's (the input needs none), its input gradient."""
    n, _, h, _ = BATCH[wid]
    total, first = 0, None
    for layer in ARCH[wid]:
        if layer[0] == "conv":
            o, c, k, _ = layer[1]
            out = h + 2 * layer[2] - k + 1
            total += 2 * n * out * out * o * c * k * k
            h = out // 2
        else:
            total += 2 * n * layer[1][0] * layer[1][1]
        first = total if first is None else first
    return 3 * total - first


CNN_WORKLOADS = [
    cnn_workload("W9", "lenet_train_step", "LeNet-5: batch 64 1x28x28, conv5(6,p2)-relu-pool, conv5(16)-relu-pool, "
                 "Linear 400-120-84-10, cross-entropy, fwd+bwd+SGD(0.01)", 9),
    cnn_workload("W10", "cifar_cnn_train_step", "batch 32 3x32x32, 3x [conv3(p1) 32/64/128-relu-pool2] (no batch "
                 "norm), Linear 2048-10, cross-entropy, fwd+bwd+SGD(0.01)", 10),
]
