"""Two convolutional training steps for the bench (issue 27): W9, a LeNet-5-style CNN (batch 64,
1x28x28: conv5x5(6, pad 2)-relu-maxpool2, conv5x5(16)-relu-maxpool2, Linear 400-120-84-10), and
W10, a small CIFAR-style CNN (batch 32, 3x32x32: three blocks conv3x3(pad 1, no bias)-batchnorm-relu-
maxpool2 of 32, 64, 128 channels, Linear 2048-10; batch norm in training mode). Both:
cross-entropy, backward, SGD(LR), one step per call; the outputs are [loss] + the parameters after
the update, checked as W4's (the update implies the gradient).

Columns: a hand-written NumPy forward and backward (im2col by sliding_window_view, col2im by
strided adds: also the float64 reference), tg eager and tg compiled (nn.Conv2d/MaxPool2d/Linear
modules, the whole step compiled), torch eager and torch.compile (the loss compiled, as W4's).
No jax column: jax is not installed here to check one against."""
import math

import numpy as np

from .workload_base import LR, Workload, _reference, _rng, _tg_train_step

# (kind, shape): conv weights (out, in, k, k) with their padding, linear weights (out, in)
ARCH = {"W9": [("conv", (6, 1, 5, 5), 2), ("conv", (16, 6, 5, 5), 0), ("linear", (120, 400)),
               ("linear", (84, 120)), ("linear", (10, 84))],
        "W10": [("convbn", (32, 3, 3, 3), 1), ("convbn", (64, 32, 3, 3), 1), ("convbn", (128, 64, 3, 3), 1),
                ("linear", (10, 2048))]}          # convbn: a convolution without bias, then batch norm
BN_EPS = 1e-5
BATCH = {"W9": (64, 1, 28, 28), "W10": (32, 3, 32, 32)}


def _names(wid):
    """W, b of a conv or linear layer; W (the convolution), G, B (batch norm's weight and bias) of a convbn."""
    return [f"{k}{i}" for i, layer in enumerate(ARCH[wid]) for k in ("WGB" if layer[0] == "convbn" else "Wb")]


def cnn_inputs(wid, seed):
    r = _rng(seed)
    inp = {"x": r.standard_normal(BATCH[wid]).astype(np.float32),
           "y": r.integers(0, 10, BATCH[wid][0]).astype(np.int64)}
    for i, layer in enumerate(ARCH[wid]):
        shape = layer[1]
        bound = 1.0 / math.sqrt(math.prod(shape[1:]))           # PyTorch's default init of both
        inp[f"W{i}"] = r.uniform(-bound, bound, shape).astype(np.float32)
        if layer[0] == "convbn":                            # batch norm's init: weight 1, bias 0
            inp[f"G{i}"], inp[f"B{i}"] = np.ones(shape[0], np.float32), np.zeros(shape[0], np.float32)
        else:
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


def _bn_fwd(h, g, b):
    """Batch norm in training mode over (N, H, W): the batch's mean and biased variance."""
    mean = h.mean(axis=(0, 2, 3), keepdims=True)
    rstd = 1.0 / np.sqrt(h.var(axis=(0, 2, 3), keepdims=True) + BN_EPS)
    xhat = (h - mean) * rstd
    return xhat * g[:, None, None] + b[:, None, None], (xhat, rstd, g)


def _bn_bwd(dy, cache):
    xhat, rstd, g = cache
    axes = (0, 2, 3)
    dxhat = dy * g[:, None, None]
    dx = rstd * (dxhat - dxhat.mean(axis=axes, keepdims=True) - xhat * (dxhat * xhat).mean(axis=axes, keepdims=True))
    return dx, (dy * xhat).sum(axes), dy.sum(axes)


def cnn_numpy(wid, inp):
    x, y = inp["x"], inp["y"]
    names = _names(wid)
    p = {k: inp[k].copy() for k in names}                   # updated in place, step after step
    arch, count = ARCH[wid], len(inp["y"])

    def run():
        caches, a = [], x
        for i, layer in enumerate(arch):                    # forward
            if layer[0] != "linear":
                h, cc = _conv_fwd(a, p[f"W{i}"], p.get(f"b{i}", 0.0), layer[2])
                h, bc = _bn_fwd(h, p[f"G{i}"], p[f"B{i}"]) if layer[0] == "convbn" else (h, None)
                a, pc = _pool_fwd(np.maximum(h, 0))
                caches.append((cc, h > 0, pc, bc))
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
                cc, live, pc, bc = caches[i]
                d = _pool_bwd(d.reshape(pc[0].shape), pc) * live
                if bc is not None:
                    d, g[f"G{i}"], g[f"B{i}"] = _bn_bwd(d, bc)
                d, g[f"W{i}"], db = _conv_bwd(d, p[f"W{i}"], cc)
                if bc is None:
                    g[f"b{i}"] = db
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
            at = {"W": ("weight", 3), "b": ("bias", 3)}
        elif layer[0] == "convbn":
            o, c, k, _ = layer[1]
            layers += [nn.Conv2d(c, o, k, padding=layer[2], bias=False), nn.BatchNorm2d(o, eps=BN_EPS), nn.ReLU(),
                       nn.MaxPool2d(2)]
            at = {"W": ("weight", 4), "G": ("weight", 3), "B": ("bias", 3)}
        else:
            if ARCH[wid][i - 1][0] != "linear":
                layers.append(nn.Flatten())
            layers += [nn.Linear(layer[1][1], layer[1][0]), nn.ReLU()]
            at = {"W": ("weight", 2), "b": ("bias", 2)}
        state.update({f"{len(layers) - back}.{name}": tg.from_numpy(inp[f"{k}{i}"]) for k, (name, back) in at.items()})
    model = nn.Sequential(*layers[:-1])
    keys = model.load_state_dict(state, strict=False)           # the batch norms' running statistics: as made
    assert not keys.unexpected_keys and all("running" in k or "num_batches" in k for k in keys.missing_keys), keys
    return model, tg.optim.SGD(model.parameters(), lr=LR), tg.from_numpy(inp["x"]), tg.from_numpy(inp["y"])


def cnn_tg(wid, inp, compiled):
    import tracegrad as tg
    model, opt, x, y = _tg_model(tg, wid, inp)
    step = tg.compile(_tg_train_step) if compiled else _tg_train_step
    return lambda: [step(model, opt, x, y)] + list(model.parameters())


# ------------------------------------------------------------------ torch
def _logits(F, x, params, arch, stats):
    """stats: each batch norm's (running mean, running var), updated in training mode as PyTorch's."""
    params, stats = iter(params), iter(stats)
    for i, layer in enumerate(arch):
        w = next(params)
        if layer[0] == "conv":
            x = F.max_pool2d(F.relu(F.conv2d(x, w, next(params), padding=layer[2])), 2)
        elif layer[0] == "convbn":
            g, b = next(params), next(params)
            x = F.batch_norm(F.conv2d(x, w, None, padding=layer[2]), *next(stats), g, b, training=True, eps=BN_EPS)
            x = F.max_pool2d(F.relu(x), 2)
        else:
            x = F.linear(x.flatten(1), w, next(params))
            x = F.relu(x) if i < len(arch) - 1 else x
    return x


def cnn_torch(wid, inp, compiled):
    import torch

    from .peers import torch_step
    F = torch.nn.functional
    params = [torch.from_numpy(inp[k].copy()) for k in _names(wid)]
    stats = [(torch.zeros(layer[1][0]), torch.ones(layer[1][0])) for layer in ARCH[wid] if layer[0] == "convbn"]
    return torch_step(lambda x, y, *ps: F.cross_entropy(_logits(F, x, ps, ARCH[wid], stats), y), params,
                      torch.from_numpy(inp["x"]), torch.from_numpy(inp["y"]), "SGD", compiled)


def cnn_workload(wid, name, what, seed):
    w = Workload(wid, name, what, lambda: cnn_inputs(wid, seed), _reference(lambda inp: cnn_numpy(wid, inp)))
    w.columns = {"numpy": lambda inp: cnn_numpy(wid, inp),
                 "tg eager": lambda inp: cnn_tg(wid, inp, False), "tg compiled": lambda inp: cnn_tg(wid, inp, True),
                 "torch eager": lambda inp: cnn_torch(wid, inp, False),
                 "torch built-in": lambda inp: None, "torch.compile": lambda inp: cnn_torch(wid, inp, True),
                 "jax.jit": lambda inp: None}
    w.implied, w.stateful = cnn_implied(wid), True
    if any(layer[0] == "convbn" for layer in ARCH[wid]):
        # the gradients of the layers under a batch norm cancel (it removes their mean per channel): float32
        # rounding alone moves them by up to 8e-2 of their largest value (torch.compile: 4e-2 at its first
        # call, 8e-2 at its third; tg eager 9e-3 at its third); a wrong gradient moves them by O(1)
        w.tolerances = (1e-3,) + (0.15,) * len(_names(wid))
    return w


def flops(wid):
    """2 x the multiply-adds of one training step's products: each layer's forward, its weight
    gradient and, but for the first layer's (the input needs none), its input gradient."""
    n, _, h, _ = BATCH[wid]
    total, first = 0, None
    for layer in ARCH[wid]:
        if layer[0] != "linear":
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
    cnn_workload("W10", "cifar_cnn_train_step", "batch 32 3x32x32, 3x [conv3(p1) 32/64/128-batchnorm-relu-pool2], "
                 "Linear 2048-10, cross-entropy, fwd+bwd+SGD(0.01)", 10),
]
