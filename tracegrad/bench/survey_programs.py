"""The survey's programs (survey.py): programs PyTorch users commonly compile that are not W1-W8.

Each program is written once, over an `ops` namespace that maps the few calls whose spelling
differs between libraries (softmax, std, permute, ...) to tracegrad's, torch's or jax's (`ops.T` is
the library itself: tracegrad, torch or jax.numpy); indexing, arithmetic, `sum/mean(axis=...,
keepdims=...)` and `@` are spelled the same in all three. A program is
  - "grad": `fn(ops, **tensors)` returns a scalar loss; a step is the loss and the gradients of
    `grads` (torch and tracegrad: `loss.backward()`; jax: `jit(value_and_grad)`);
  - "fwd": `fn` returns one tensor (no gradients), run under no_grad;
  - "step": an optimizer's update of parameter `p` from its gradient `g` (`opt` = (name, kwargs));
  - "train": a whole training step of a relu MLP over inputs x, y and parameters W0, b0, W1, b1, ...:
    cross-entropy, backward, the optimizer's update (`opt`: "Adam" with workload_base.ADAM, or "SGD");
    tracegrad compiles the whole step, as W8 (bench/peers.py's train setups for torch and jax).
"""
import math
from dataclasses import dataclass

import numpy as np

EPS = 1e-5


@dataclass
class Program:
    name: str
    what: str
    inputs: callable                # rng -> {name: NumPy array}
    fn: callable = None             # (ops, **tensors) -> loss ("grad") or output ("fwd")
    grads: tuple = ()               # the inputs whose gradients a "grad" step returns
    kind: str = "grad"
    opt: tuple = None               # "step": (optimizer name, its keyword arguments)
    memory_bound: bool = True       # time a bandwidth floor beside it
    floor_extra: int = 0            # bytes of state read and written besides inputs and outputs


class Ops:
    """The calls whose spelling differs, for a torch-like library (tracegrad or torch) or jax."""

    def __init__(self, lib):
        self.lib = lib
        if lib == "jax":
            import jax
            import jax.numpy as jnp
            self.T = jnp
            self.softmax = lambda x, a: jax.nn.softmax(x, axis=a)
            self.logsumexp = lambda x, a: jax.nn.logsumexp(x, axis=a)
            self.std = lambda x, a: jnp.std(x, axis=a, ddof=1)
            self.gelu = lambda x: jax.nn.gelu(x, approximate=True)
            self.permute = lambda x, dims: jnp.transpose(x, dims)
            self.mT = lambda x: jnp.swapaxes(x, -2, -1)
            self.rsqrt = jax.lax.rsqrt
            self.relu = jax.nn.relu
            self.mse = lambda a, b: ((a - b) ** 2).mean()
            self.cross_entropy = lambda z, y: -jnp.take_along_axis(
                jax.nn.log_softmax(z, axis=1), y[:, None], axis=1).mean()
            self.cumsum = lambda x, a: jnp.cumsum(x, axis=a)
            self.maxv = lambda x, a: jnp.max(x, axis=a)
            self.cat = lambda seq, a: jnp.concatenate(seq, axis=a)
            self.setitem = lambda t, idx, v: t.at[idx].set(v)
            self.silu = jax.nn.silu
            self.conv2d = lambda x, w: jax.lax.conv_general_dilated(x, w, (1, 1), ((1, 1), (1, 1)))
        else:
            T = self.T = __import__(lib)
            F = T.nn.functional
            self.softmax = lambda x, a: x.softmax(dim=a)
            self.logsumexp = lambda x, a: x.logsumexp(dim=a)
            self.std = lambda x, a: x.std(dim=a)
            self.gelu = lambda x: F.gelu(x, approximate="tanh")
            self.permute = lambda x, dims: x.permute(*dims)
            self.mT = lambda x: x.transpose(-2, -1)
            self.rsqrt = lambda x: x.rsqrt()
            self.relu = F.relu
            self.mse = F.mse_loss
            self.cross_entropy = F.cross_entropy
            self.cumsum = lambda x, a: x.cumsum(dim=a)
            self.maxv = lambda x, a: x.max(dim=a)[0]
            self.cat = lambda seq, a: T.cat(seq, a)
            self.setitem = _setitem
            self.silu = F.silu
            self.conv2d = lambda x, w: F.conv2d(x, w, padding=1)


def _setitem(t, idx, v):
    t[idx] = v
    return t


def _n(r, *shape, dtype=np.float32):
    return r.standard_normal(shape).astype(dtype)


# ------------------------------------------------------------------ the programs
def _batchnorm(o, x, w, b, g):
    mean = x.mean(axis=(0, 2, 3), keepdims=True)
    d = x - mean
    var = (d * d).mean(axis=(0, 2, 3), keepdims=True)
    y = d / o.T.sqrt(var + EPS) * w[:, None, None] + b[:, None, None]
    return (y * g).sum()


def _layernorm(o, x, w, b, g):
    mean = x.mean(axis=1, keepdims=True)
    d = x - mean
    var = (d * d).mean(axis=1, keepdims=True)
    return ((d / o.T.sqrt(var + EPS) * w + b) * g).sum()


def _rmsnorm(o, x, w, g):
    return (x * o.rsqrt((x * x).mean(axis=-1, keepdims=True) + 1e-6) * w * g).sum()


def _attention(o, q, k, v, mask, g):
    s = (q @ o.mT(k)) * (1.0 / math.sqrt(q.shape[-1]))
    p = o.softmax(o.T.where(mask, s, -math.inf), -1)
    return ((p @ v) * g).sum()


def _mlp(o, x, W0, b0, W1, b1, W2, b2):
    h = o.relu(x @ o.mT(W0) + b0)
    h = o.relu(h @ o.mT(W1) + b1)
    return h @ o.mT(W2) + b2


def _mlp_inputs(r):
    inp = {"x": _n(r, 1, 256)}
    for i, (fi, fo) in enumerate(((256, 256), (256, 256), (256, 10))):
        bound = 1 / math.sqrt(fi)
        inp[f"W{i}"] = r.uniform(-bound, bound, (fo, fi)).astype(np.float32)
        inp[f"b{i}"] = r.uniform(-bound, bound, fo).astype(np.float32)
    return inp


DEEP64 = (16,) * 65 + (4,)          # 64 Linear(16, 16) + relu, then Linear(16, 4)


def _deep_inputs(sizes, batch):
    def inputs(r):
        inp = {"x": _n(r, batch, sizes[0]), "y": (np.arange(batch) % sizes[-1]).astype(np.int64)}
        for i, (fi, fo) in enumerate(zip(sizes[:-1], sizes[1:])):
            inp[f"W{i}"] = (r.standard_normal((fo, fi)) * math.sqrt(2.0 / fi)).astype(np.float32)
            inp[f"b{i}"] = (0.01 * r.standard_normal(fo)).astype(np.float32)
        return inp
    return inputs


NCHW = (32, 64, 28, 28)


def _slice_assign(o, x, y, g):
    t = o.setitem(x * 2.0, (slice(None), slice(100, 300)), o.T.tanh(y))
    return (t * g).sum()


def _cat3(o, a, b, c, g):
    return (o.cat([a * 2.0, o.T.exp(b), c], 1).sum(axis=0) * g).sum()


def _rotate(o, x, cos, sin):
    """Rotary embedding as Hugging Face's Llama writes it: x * cos + rotate_half(x) * sin."""
    half = x.shape[-1] // 2
    return x * cos + o.cat([-x[..., half:], x[..., :half]], -1) * sin


def _rotary(o, x, cos, sin, g):
    return (_rotate(o, x, cos[:, None, :], sin[:, None, :]) * g).sum()


def _rope_tables(t, d):
    inv = 1.0 / 10000 ** (np.arange(0, d, 2) / d)
    ang = np.outer(np.arange(t), inv)
    ang = np.concatenate([ang, ang], -1)
    return np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)


def _swiglu(o, x, W1, W3, W2, g):
    return ((o.silu(x @ o.mT(W1)) * (x @ o.mT(W3))) @ o.mT(W2) * g).sum()


def _gqa(o, q, k, v, mask, g):
    """Grouped-query attention: q (B, Hkv, G, T, D) against k, v (B, Hkv, 1, T, D), broadcast over G."""
    s = (q @ o.mT(k)) * (1.0 / math.sqrt(q.shape[-1]))
    p = o.softmax(o.T.where(mask, s, -math.inf), -1)
    return ((p @ v) * g).sum()


def _conv_bn_relu(o, x, w, gamma, beta, g):
    y = o.conv2d(x, w)
    mean = y.mean(axis=(0, 2, 3), keepdims=True)
    d = y - mean
    var = (d * d).mean(axis=(0, 2, 3), keepdims=True)
    z = d * o.rsqrt(var + EPS) * gamma[:, None, None] + beta[:, None, None]
    return (o.relu(z) * g).sum()


LLAMA = dict(B=4, T=128, C=256, H=4, F=688)       # a Llama-style block: 4 heads of 64, SwiGLU hidden 688


def _llama_block(o, x, n1, Wq, Wk, Wv, Wo, n2, W1, W3, W2, cos_t, sin_t, mask, g):
    B, T, C = x.shape
    H = LLAMA["H"]
    D = C // H

    def rms(t, w):
        return t * o.rsqrt((t * t).mean(axis=-1, keepdims=True) + 1e-6) * w

    def heads(t):
        return t.reshape(B, T, H, D)
    h = rms(x, n1)
    q = o.permute(_rotate(o, heads(h @ o.mT(Wq)), cos_t[:, None, :], sin_t[:, None, :]), (0, 2, 1, 3))
    k = o.permute(_rotate(o, heads(h @ o.mT(Wk)), cos_t[:, None, :], sin_t[:, None, :]), (0, 2, 1, 3))
    v = o.permute(heads(h @ o.mT(Wv)), (0, 2, 1, 3))
    s = (q @ o.mT(k)) * (1.0 / math.sqrt(D))
    a = o.permute(o.softmax(o.T.where(mask, s, -math.inf), -1) @ v, (0, 2, 1, 3)).reshape(B, T, C)
    x = x + a @ o.mT(Wo)
    h = rms(x, n2)
    x = x + (o.silu(h @ o.mT(W1)) * (h @ o.mT(W3))) @ o.mT(W2)
    return (x * g).sum()


def _llama_inputs(r):
    B, T, C, F = LLAMA["B"], LLAMA["T"], LLAMA["C"], LLAMA["F"]
    cos, sin = _rope_tables(T, C // LLAMA["H"])

    def lin(fo, fi):
        return (r.standard_normal((fo, fi)) / math.sqrt(fi)).astype(np.float32)
    return {"x": _n(r, B, T, C), "n1": 1 + 0.1 * _n(r, C), "Wq": lin(C, C), "Wk": lin(C, C), "Wv": lin(C, C),
            "Wo": lin(C, C), "n2": 1 + 0.1 * _n(r, C), "W1": lin(F, C), "W3": lin(F, C), "W2": lin(C, F),
            "cos_t": cos, "sin_t": sin, "mask": np.tril(np.ones((T, T), bool)), "g": _n(r, B, T, C)}


LLAMA_GRADS = ("x", "n1", "Wq", "Wk", "Wv", "Wo", "n2", "W1", "W3", "W2")

PROGRAMS = [
    Program("batchnorm_nchw", "batch norm training over NCHW (mean/var over axes 0,2,3), fwd+bwd x, w, b",
            lambda r: {"x": _n(r, *NCHW), "w": 1 + 0.1 * _n(r, 64), "b": 0.1 * _n(r, 64), "g": _n(r, *NCHW)},
            _batchnorm, ("x", "w", "b")),
    Program("channel_affine_grad", "(x * scale + shift) * g summed; grads to (1,C,1,1) scale, shift only",
            lambda r: {"x": _n(r, *NCHW), "scale": _n(r, 1, 64, 1, 1), "shift": _n(r, 1, 64, 1, 1),
                       "g": _n(r, *NCHW)},
            lambda o, x, scale, shift, g: ((x * scale + shift) * g).sum(), ("scale", "shift")),
    Program("softmax_dim0", "softmax over dim 0 of (2048, 1000), fwd+bwd",
            lambda r: {"x": _n(r, 2048, 1000), "g": _n(r, 2048, 1000)},
            lambda o, x, g: (o.softmax(x, 0) * g).sum(), ("x",)),
    Program("logsumexp_dim0", "logsumexp over dim 0 of (2000, 2048), fwd+bwd",
            lambda r: {"x": _n(r, 2000, 2048), "g": _n(r, 2048)},
            lambda o, x, g: (o.logsumexp(x, 0) * g).sum(), ("x",)),
    Program("std_dim1", "std (unbiased) along dim 1 of (4096, 1000), fwd+bwd",
            lambda r: {"x": _n(r, 4096, 1000), "g": _n(r, 4096)},
            lambda o, x, g: (o.std(x, 1) * g).sum(), ("x",)),
    Program("rmsnorm", "RMSNorm of (4096, 768) rows with weight, fwd+bwd x, w",
            lambda r: {"x": _n(r, 4096, 768), "w": 1 + 0.1 * _n(r, 768), "g": _n(r, 4096, 768)},
            _rmsnorm, ("x", "w")),
    Program("layernorm_f64", "float64 layer norm of (2048, 1000) rows, fwd+bwd x, w, b",
            lambda r: {"x": _n(r, 2048, 1000, dtype=np.float64), "w": 1 + 0.1 * _n(r, 1000, dtype=np.float64),
                       "b": 0.1 * _n(r, 1000, dtype=np.float64), "g": _n(r, 2048, 1000, dtype=np.float64)},
            _layernorm, ("x", "w", "b")),
    Program("mixed_layout_rowsum", "(x.T * z).sum(1) of (2048, 2048): the reads disagree on the unit-stride axis, "
            "forward", lambda r: {"x": _n(r, 2048, 2048), "z": _n(r, 2048, 2048)},
            lambda o, x, z: (o.mT(x) * z).sum(axis=1), kind="fwd"),
    Program("mean_middle_axis", "mean over the middle axis of (64, 512, 200), fwd+bwd",
            lambda r: {"x": _n(r, 64, 512, 200), "g": _n(r, 64, 200)},
            lambda o, x, g: (x.mean(axis=1) * g).sum(), ("x",)),
    Program("permute3d_map", "x.permute(2, 0, 1) * y + z, x (64, 256, 96), forward",
            lambda r: {"x": _n(r, 64, 256, 96), "y": _n(r, 96, 64, 256), "z": _n(r, 96, 64, 256)},
            lambda o, x, y, z: o.permute(x, (2, 0, 1)) * y + z, kind="fwd"),
    Program("gelu_odd_size", "tanh gelu of (1000, 999), fwd+bwd",
            lambda r: {"x": _n(r, 1000, 999), "g": _n(r, 1000, 999)},
            lambda o, x, g: (o.gelu(x) * g).sum(), ("x",)),
    Program("gelu_strided", "tanh gelu of the slice x[:, ::2] of (2048, 2048), forward",
            lambda r: {"x": _n(r, 2048, 2048)}, lambda o, x: o.gelu(x[:, ::2]), kind="fwd"),
    Program("mse_loss", "mse_loss of (4096, 1024), fwd+bwd",
            lambda r: {"pred": _n(r, 4096, 1024), "target": _n(r, 4096, 1024)},
            lambda o, pred, target: o.mse(pred, target), ("pred",)),
    Program("cross_entropy", "cross_entropy of (4096, 1000) logits, int64 labels, fwd+bwd",
            lambda r: {"z": _n(r, 4096, 1000), "y": r.integers(0, 1000, 4096).astype(np.int64)},
            lambda o, z, y: o.cross_entropy(z, y), ("z",)),
    Program("pairwise_sqdist", "((x[:,None,:] - y[None,:,:])**2).sum(-1), x (256,64), y (512,64), fwd+bwd",
            lambda r: {"x": _n(r, 256, 64), "y": _n(r, 512, 64), "g": _n(r, 256, 512)},
            lambda o, x, y, g: (((x[:, None, :] - y[None, :, :]) ** 2).sum(axis=-1) * g).sum(), ("x", "y"),
            memory_bound=False),
    Program("attention_causal", "q@k^T/8, where(causal, s, -inf), softmax, @v; (16, 256, 64), fwd+bwd",
            lambda r: {"q": _n(r, 16, 256, 64), "k": _n(r, 16, 256, 64), "v": _n(r, 16, 256, 64),
                       "mask": np.tril(np.ones((256, 256), bool)), "g": _n(r, 16, 256, 64)},
            _attention, ("q", "k", "v"), memory_bound=False),
    Program("embedding_gather", "W[idx]: 8192 rows of a (30000, 256) embedding by int64 idx, fwd+bwd (the gradient "
            "scatter-adds rows: host rounds of distinct rows)",
            lambda r: {"W": _n(r, 30000, 256), "idx": r.integers(0, 30000, 8192).astype(np.int64),
                       "g": _n(r, 8192, 256)},
            lambda o, W, idx, g: (W[idx] * g).sum(), ("W",)),
    Program("max_dim1", "max(x, dim=1) values of (4096, 1000), fwd+bwd (the gradient goes to the argmax)",
            lambda r: {"x": _n(r, 4096, 1000), "g": _n(r, 4096)},
            lambda o, x, g: (o.maxv(x, 1) * g).sum(), ("x",)),
    Program("cumsum_dim0", "cumsum along dim 0 of (1000, 4096), fwd+bwd (a host running sum, slice by slice)",
            lambda r: {"x": _n(r, 1000, 4096), "g": _n(r, 1000, 4096)},
            lambda o, x, g: (o.cumsum(x, 0) * g).sum(), ("x",)),
    Program("one_element", "(x * y + 1).sum() of (1,) tensors, fwd+bwd (per-call overhead)",
            lambda r: {"x": _n(r, 1), "y": _n(r, 1)},
            lambda o, x, y: (x * y + 1.0).sum(), ("x", "y"), memory_bound=False),
    Program("slice_assign", "t = x * 2; t[:, 100:300] = tanh(y); (t * g).sum(), (4096, 1024), fwd+bwd x, y "
            "(where(box, unslice(v), t), fused)",
            lambda r: {"x": _n(r, 4096, 1024), "y": _n(r, 4096, 200), "g": _n(r, 4096, 1024)},
            _slice_assign, ("x", "y")),
    Program("cat3_sum0", "cat([2a, exp(b), c], 1).sum(0) of three (2048, 512), fwd+bwd",
            lambda r: {"a": _n(r, 2048, 512), "b": _n(r, 2048, 512), "c": _n(r, 2048, 512), "g": _n(r, 1536)},
            _cat3, ("a", "b", "c")),
    Program("gelu_f64", "float64 tanh gelu of (1024, 1024), fwd+bwd (float64 tanh vectorized)",
            lambda r: {"x": _n(r, 1024, 1024, dtype=np.float64), "g": _n(r, 1024, 1024, dtype=np.float64)},
            lambda o, x, g: (o.gelu(x) * g).sum(), ("x",)),
    Program("sgd_momentum", "SGD(lr=0.01, momentum=0.9).step() of one (4M,) parameter",
            lambda r: {"p": _n(r, 1 << 22), "g": _n(r, 1 << 22)}, kind="step",
            opt=("SGD", {"lr": 0.01, "momentum": 0.9}), floor_extra=2 * 4 << 22),
    Program("adam", "Adam(lr=1e-3).step() of one (2048, 2048) parameter",
            lambda r: {"p": _n(r, 2048, 2048), "g": _n(r, 2048, 2048)}, kind="step",
            opt=("Adam", {"lr": 1e-3}), floor_extra=4 * 4 << 22),
    Program("mlp_infer_b1", "3-layer 256-wide MLP under no_grad, batch 1 (per-call overhead)",
            _mlp_inputs, _mlp, kind="fwd", memory_bound=False),
    Program("mlp_deep64_adam", "64 Linear(16,16)+relu, Linear(16,4), batch 8, cross-entropy, fwd+bwd+Adam in one "
            "step: 130 small parameters (per-call cost per tensor)",
            _deep_inputs(DEEP64, 8), kind="train", opt=("Adam",), memory_bound=False),
    Program("rotary_embed", "rotary embedding x*cos + rotate_half(x)*sin of (8, 512, 8, 64) (B, T, H, D), fwd+bwd x",
            lambda r: dict(zip(("cos_t", "sin_t"), _rope_tables(512, 64)), x=_n(r, 8, 512, 8, 64), g=_n(r, 8, 512, 8, 64)),
            lambda o, x, cos_t, sin_t, g: _rotary(o, x, cos_t, sin_t, g), ("x",)),
    Program("swiglu_mlp", "SwiGLU MLP (silu(x W1^T) * x W3^T) W2^T, x (512, 512), hidden 1376, fwd+bwd x, W1, W3, W2",
            lambda r: {"x": _n(r, 512, 512), "W1": 0.04 * _n(r, 1376, 512), "W3": 0.04 * _n(r, 1376, 512),
                       "W2": 0.03 * _n(r, 512, 1376), "g": _n(r, 512, 512)},
            _swiglu, ("x", "W1", "W3", "W2"), memory_bound=False),
    Program("gqa_attention", "grouped-query causal attention, 8 query heads over 2 key/value heads, T 256, D 64, "
            "batch 4, fwd+bwd q, k, v",
            lambda r: {"q": _n(r, 4, 2, 4, 256, 64), "k": _n(r, 4, 2, 1, 256, 64), "v": _n(r, 4, 2, 1, 256, 64),
                       "mask": np.tril(np.ones((256, 256), bool)), "g": _n(r, 4, 2, 4, 256, 64)},
            _gqa, ("q", "k", "v"), memory_bound=False),
    Program("conv_bn_relu", "conv2d 3x3 (32->64, pad 1) of (16, 32, 32, 32), batch-norm statistics, relu, fwd+bwd "
            "x, w, gamma, beta",
            lambda r: {"x": _n(r, 16, 32, 32, 32), "w": 0.06 * _n(r, 64, 32, 3, 3), "gamma": 1 + 0.1 * _n(r, 64),
                       "beta": 0.1 * _n(r, 64), "g": _n(r, 16, 64, 32, 32)},
            _conv_bn_relu, ("x", "w", "gamma", "beta"), memory_bound=False),
    Program("llama_block", "a Llama-style decoder block (RMSNorm, rotary q/k, causal attention 4x64, SwiGLU 688) "
            "of (4, 128, 256), fwd+bwd of x and all 9 weights", _llama_inputs, _llama_block, LLAMA_GRADS,
            memory_bound=False),
    Program("adamw", "AdamW(lr=1e-3, weight_decay=0.01).step() of one (2048, 2048) parameter",
            lambda r: {"p": _n(r, 2048, 2048), "g": _n(r, 2048, 2048)}, kind="step",
            opt=("AdamW", {"lr": 1e-3, "weight_decay": 0.01}), floor_extra=4 * 4 << 22),
]


def find(name):
    for p in PROGRAMS:
        if p.name == name:
            return p
    raise SystemExit(f"no survey program {name!r}; programs: {', '.join(p.name for p in PROGRAMS)}")
