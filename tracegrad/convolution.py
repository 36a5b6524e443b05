"""Convolutions and padding as composites over the `windows` view (tracegrad/ops/windows.py): F.pad,
conv1d/2d/3d and conv_transpose1d/2d/3d, in PyTorch's NCHW layout.

A convolution is the windows of its padded input, permuted so the reduced axes (channel, window) come
first and reshaped to columns (the one copy, im2col), times the weight as a matrix product per group
and batch entry (BLAS; the weight the same matrix for each entry), whose result is the output in NCHW
order, no permuted view: what follows (bias, batch norm, pooling) reads it in order. Its weight
gradient is a product per entry and their sum: split over the batch, the first layers' long thin
products (LeNet's 6 x 25 over 50,176 positions) ran 2-5x faster than one (one thread). Its input
gradient is the transposed product scattered back by `unwindows` (col2im), which is also
conv_transpose's forward.

Where each entry has few output positions (ONE_PRODUCT_POSITIONS or less, one group), the product is
one for the whole batch instead, W (O, K) times the columns (K, N * positions), its result (O, N, ...)
permuted to NCHW (in compiled code a permuted read; in eager a copy, so the output is contiguous as
PyTorch's): per entry, W10's last convolution (128 x 576 by 576 x 64) made 32 small products and its
weight gradient 32 products of 128 x 576 and their sum, where one product of inner size 2048 runs
at BLAS's rate (bench.ab --rev HEAD --only W10 --cpu, 11 x 10 calls, load 10-12: 2 threads 0.952,
TRACEGRAD_THREADS=1 0.972; with 256 positions, also the second convolution, 1.009: its per-entry
products of 256 columns already run at BLAS's rate). W9's second convolution (16 x 150 by 150 x 100
per entry, 64 entries) as one product: 2 threads 0.881 CPU, 0.979 wall; one thread 0.995."""
import math

import numpy as np

from . import dtypes as D
from .ops import bind
from .symint import hint
from .tensor.base import _ArgError
from .tensor.dispatch import _named
from .tensor.factories import ones, tensor
from .tensor.functions import where

ONE_PRODUCT_POSITIONS = 100      # output positions per batch entry, at most, for one product (see above)


def ntuple(v, d, name):
    """An int or a sequence of d ints as a tuple of d ints."""
    t = (v,) * d if isinstance(v, (int, np.integer)) and not isinstance(v, bool) else tuple(v)
    if len(t) != d or not all(isinstance(a, (int, np.integer)) and not isinstance(a, bool) for a in t):
        raise _ArgError(f"{name} must be an int or a tuple of {d} ints, got {v!r}")
    return tuple(int(a) for a in t)


# ---------------------------------------------------------------- padding

def _pad_pairs(x, pad):
    pad = tuple(int(p) for p in pad)
    if len(pad) % 2:
        raise _ArgError(f"Padding length must be divisible by 2, got {len(pad)} values {list(pad)}")
    if len(pad) // 2 > x.ndim:
        raise _ArgError(f"Padding length too large: {len(pad)} values pad {len(pad) // 2} dimensions of an input "
                        f"of shape {list(x.shape)}")
    return {x.ndim - 1 - i: (pad[2 * i], pad[2 * i + 1]) for i in range(len(pad) // 2)}


def _source_index(mode, n, lo, hi):
    """The input position each padded position reads along an axis of size n (reflect, replicate, circular)."""
    i = np.arange(-lo, n + hi)
    if mode == "replicate":
        return np.clip(i, 0, n - 1)
    if mode == "circular":
        return i % n
    period = 2 * (n - 1)                          # reflect: the edge itself is not repeated
    i = np.abs(i) % period if period else np.zeros_like(i)
    return np.where(i >= n, period - i, i)


def pad(input, pad, mode="constant", value=None):
    """PyTorch's F.pad: `pad` lists (left, right) pairs from the last dimension backwards; "constant"
    (negative amounts crop), "reflect", "replicate" and "circular"."""
    x, pairs = input, _pad_pairs(input, pad)
    if mode == "constant":
        crop = tuple((max(-lo, 0), n - max(-hi, 0), 1)
                     for n, (lo, hi) in zip(x.shape, (pairs.get(a, (0, 0)) for a in range(x.ndim))))
        if any(start > stop for start, stop, _ in crop) or any(n + lo + hi < 0 for n, (lo, hi) in
                                                                zip(x.shape, (pairs.get(a, (0, 0)) for a in range(x.ndim)))):
            raise _ArgError(f"The input size {list(x.shape)}, plus negative padding {list(pad)} resulted in a "
                            f"negative output size")
        if any(lo < 0 or hi < 0 for lo, hi in pairs.values()):
            x = bind("slice", x, index=crop)
        grow = {a: (max(lo, 0), max(hi, 0)) for a, (lo, hi) in pairs.items()}
        if not any(lo or hi for lo, hi in grow.values()):
            return _named(x * 1 if x is input else x, "ConstantPadNdBackward")
        shape = tuple(n + sum(grow.get(a, (0, 0))) for a, n in enumerate(x.shape))
        index = tuple((grow.get(a, (0, 0))[0], grow.get(a, (0, 0))[0] + n, 1) for a, n in enumerate(x.shape))
        out = bind("unslice", x, shape=shape, index=index)
        if value:
            inside = bind("unslice", ones(x.shape, dtype=D.bool_, device=x.device), shape=shape, index=index)
            out = where(inside, out, value)
        return _named(out, "ConstantPadNdBackward")
    if mode not in ("reflect", "replicate", "circular"):
        raise NotImplementedError(f"F.pad: mode {mode!r} is not one of 'constant', 'reflect', 'replicate', "
                                  f"'circular'")
    if value:
        raise _ArgError(f"Padding mode {mode!r} doesn't take in value argument")
    for a, (lo, hi) in sorted(pairs.items()):
        n = x.shape[a]
        limit = n - 1 if mode == "reflect" else n
        if max(lo, hi) > limit or min(lo, hi) < -n or (mode == "replicate" and n == 0):
            raise _ArgError(f"{mode} padding ({lo}, {hi}) of dimension {a} of input {list(x.shape)}: padding must "
                            f"be {'less than' if mode == 'reflect' else 'at most'} the dimension's size {n}")
        idx = tensor(_source_index(mode, n, lo, hi), dtype=D.int64, device=x.device)
        x = x[(slice(None),) * a + (idx,)]
    return _named(x, f"{mode.capitalize()}PadBackward")


# ---------------------------------------------------------------- convolution

def _check(x, weight, bias, groups, d, name, transposed):
    if x.ndim not in (d + 1, d + 2):
        raise RuntimeError(f"Expected {d + 1}D (unbatched) or {d + 2}D (batched) input to {name}, but got input "
                           f"of size: {list(x.shape)}")
    if weight.ndim != d + 2:
        raise RuntimeError(f"{name}: expected weight to be {d + 2}-dimensional, but got weight of size "
                           f"{list(weight.shape)}")
    if not isinstance(groups, int) or groups < 1:
        raise RuntimeError(f"{name}: non-positive groups is not supported, got groups={groups!r}")
    c = x.shape[1] if x.ndim == d + 2 else x.shape[0]
    if transposed:
        if weight.shape[0] != c:
            raise RuntimeError(f"Given transposed=1, weight of size {list(weight.shape)}, expected input"
                               f"{list(x.shape)} to have {weight.shape[0]} channels, but got {c} channels instead")
        if c % groups:
            raise RuntimeError(f"Given groups={groups}, expected input channels {c} (input {list(x.shape)}) to be "
                               f"divisible by {groups}")
    else:
        if weight.shape[0] % groups:
            raise RuntimeError(f"Given groups={groups}, expected weight to be divisible by {groups} at dimension 0, "
                               f"but got weight of size {list(weight.shape)} instead")
        if c != weight.shape[1] * groups:
            raise RuntimeError(f"Given groups={groups}, weight of size {list(weight.shape)}, expected input"
                               f"{list(x.shape)} to have {weight.shape[1] * groups} channels, but got {c} channels "
                               f"instead")
    out_channels = weight.shape[1] * groups if transposed else weight.shape[0]
    if bias is not None and tuple(bias.shape) != (out_channels,):
        raise RuntimeError(f"Given weight of size {list(weight.shape)}, expected bias to be 1-dimensional with "
                           f"{out_channels} elements, but got bias of size {list(bias.shape)} instead")
    for t, what in ((weight, "weight"), (bias, "bias")):
        if t is not None and t.dtype != x.dtype:
            raise RuntimeError(f"{name}: input type ({x.dtype}) and {what} type ({t.dtype}) should be the same")


def _same_padding(kernel, dilation, stride, name):
    if any(s != 1 for s in stride):
        raise _ArgError(f"{name}: padding='same' is not supported for strided convolutions (stride {stride})")
    total = [d * (k - 1) for k, d in zip(kernel, dilation)]
    return [(t // 2, t - t // 2) for t in total]


def _padding(padding, kernel, dilation, stride, d, name):
    """((left, right) per spatial axis) of int, tuple, "valid" or "same" (the extra one on the right, as PyTorch)."""
    if isinstance(padding, str):
        if padding == "valid":
            return [(0, 0)] * d
        if padding == "same":
            return _same_padding(kernel, dilation, stride, name)
        raise _ArgError(f"{name}: Invalid padding string {padding!r}, should be one of ['valid', 'same']")
    p = ntuple(padding, d, f"{name}: padding")
    if min(p) < 0:
        raise RuntimeError(f"{name}: negative padding is not supported, got padding={p}")
    return [(a, a) for a in p]


def _batched(x, d):
    return (x, False) if x.ndim == d + 2 else (x.unsqueeze(0), True)


def _conv_windows(x, kernel, stride, dilation, pads, name):
    """The windows of x (N, C, *spatial) padded by `pads` with zeros: (N, C, *out_spatial, *kernel)."""
    d = len(kernel)
    if any(lo or hi for lo, hi in pads):
        x = pad(x, [p for lo_hi in reversed(pads) for p in lo_hi])
    padded = x.shape[2:]
    if any(dl * (k - 1) + 1 > n for k, dl, n in zip(kernel, dilation, padded)):
        raise RuntimeError(f"{name}: Calculated padded input size per channel: ({' x '.join(map(str, padded))}). "
                           f"Kernel size: ({' x '.join(str(dl * (k - 1) + 1) for k, dl in zip(kernel, dilation))}). "
                           f"Kernel size can't be greater than actual input size")
    return sliding(x, tuple(range(2, 2 + d)), tuple(kernel), tuple(stride), tuple(dilation))


def sliding(x, axes, size, step, dilation):
    """The `windows` view of x; windows that tile their axes (step == size, no dilation: 2x2 pooling,
    patches) as a slice, a reshape and a permute instead, views whose gradient compiles to a fused
    copy where the windows' scatter-add would be a host kernel."""
    k = dict(zip(axes, size))
    counts = {a: x.shape[a] // k[a] for a in axes}
    if any(s != n or d != 1 for n, s, d in zip(size, step, dilation)) or 0 in counts.values():
        return bind("windows", x, axes=axes, size=size, step=step, dilation=dilation)
    if any(counts[a] * k[a] != x.shape[a] for a in axes):
        x = bind("slice", x, index=tuple((0, counts[a] * k[a] if a in k else n, 1) for a, n in enumerate(x.shape)))
    split, order, inner = [], [], []
    for a, n in enumerate(x.shape):
        order.append(len(split))
        if a in k:
            inner.append(len(split) + 1)
        split += [counts[a], k[a]] if a in k else [n]
    return x.reshape(*split).permute(*order, *inner)


def conv(input, weight, bias, stride, padding, dilation, groups, d, name):
    """An N-d convolution (cross-correlation, as PyTorch's) of (N, C_in, *S) or (C_in, *S) input."""
    _check(input, weight, bias, groups, d, name, transposed=False)
    stride, dilation = ntuple(stride, d, f"{name}: stride"), ntuple(dilation, d, f"{name}: dilation")
    if min(stride) < 1 or min(dilation) < 1:
        raise RuntimeError(f"{name}: stride {stride} and dilation {dilation} must be positive")
    kernel = tuple(weight.shape[2:])
    x, unbatched = _batched(input, d)
    win = _conv_windows(x, kernel, stride, dilation, _padding(padding, kernel, dilation, stride, d, name), name)
    n, c, out_sp = x.shape[0], x.shape[1], win.shape[2:2 + d]
    o, g = weight.shape[0], groups
    k = c // g * math.prod(kernel)
    cols = win.permute(1, *range(2 + d, 2 + 2 * d), 0, *range(2, 2 + d)).reshape(g, k, n, math.prod(out_sp))
    if g == 1 and hint(math.prod(out_sp)) <= ONE_PRODUCT_POSITIONS:     # few positions per entry (no guard)
        y = weight.reshape(o, k) @ cols.reshape(k, -1)          # (O, N * prod(out_spatial))
        y = y.reshape(o, n, *out_sp).transpose(0, 1).contiguous()
    else:
        y = weight.reshape(1, g, o // g, k) @ cols.permute(2, 0, 1, 3)     # (N, G, O/G, prod(out_spatial))
        y = y.reshape(n, o, *out_sp)
    if bias is not None:
        y = y + bias.reshape(o, *(1,) * d)
    return _named(y.squeeze(0) if unbatched else y, "ConvolutionBackward")


def conv_transpose(input, weight, bias, stride, padding, output_padding, groups, dilation, d, name):
    """The transpose of `conv` (its gradient with respect to its input), weight (C_in, C_out/groups, *K)."""
    _check(input, weight, bias, groups, d, name, transposed=True)
    stride, dilation = ntuple(stride, d, f"{name}: stride"), ntuple(dilation, d, f"{name}: dilation")
    padding, extra = ntuple(padding, d, f"{name}: padding"), ntuple(output_padding, d, f"{name}: output_padding")
    if min(stride) < 1 or min(dilation) < 1 or min(padding) < 0:
        raise RuntimeError(f"{name}: stride {stride}, dilation {dilation} must be positive, padding {padding} "
                           f"non-negative")
    if any(e >= s and e >= dl for e, s, dl in zip(extra, stride, dilation)):
        raise RuntimeError(f"{name}: output padding must be smaller than either stride or dilation, but got "
                           f"output_padding={extra}, stride={stride}, dilation={dilation}")
    x, unbatched = _batched(input, d)
    n, c, sp = x.shape[0], x.shape[1], tuple(x.shape[2:])
    kernel, g = tuple(weight.shape[2:]), groups
    og = weight.shape[1]
    rows = weight.reshape(g, c // g, og * math.prod(kernel)).mT @ \
        x.permute(1, 0, *range(2, 2 + d)).reshape(g, c // g, n * math.prod(sp))
    win = rows.reshape(og * g, *kernel, n, *sp).permute(1 + d, 0, *range(2 + d, 2 + 2 * d), *range(1, 1 + d))
    full = tuple((s - 1) * st + dl * (k - 1) + 1 for s, st, dl, k in zip(sp, stride, dilation, kernel))
    y = bind("unwindows", win, shape=(n, og * g) + full, axes=tuple(range(2, 2 + d)), size=kernel,
             step=stride, dilation=dilation)
    crop = [v for p, e in zip(reversed(padding), reversed(extra)) for v in (-p, e - p)]
    if any(crop):
        if any(f - 2 * p + e < 1 for f, p, e in zip(full, padding, extra)):
            raise RuntimeError(f"{name}: the output size of input {list(input.shape)} with weight "
                               f"{list(weight.shape)}, padding {padding} is not positive")
        y = pad(y, crop)
    if bias is not None:
        y = y + bias.reshape(og * g, *(1,) * d)
    return _named(y.squeeze(0) if unbatched else y, "ConvolutionBackward")


def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    return conv(input, weight, bias, stride, padding, dilation, groups, 1, "conv1d")


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    return conv(input, weight, bias, stride, padding, dilation, groups, 2, "conv2d")


def conv3d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    return conv(input, weight, bias, stride, padding, dilation, groups, 3, "conv3d")


def conv_transpose1d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    return conv_transpose(input, weight, bias, stride, padding, output_padding, groups, dilation, 1, "conv_transpose1d")


def conv_transpose2d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    return conv_transpose(input, weight, bias, stride, padding, output_padding, groups, dilation, 2, "conv_transpose2d")


def _unfold_args(x, kernel_size, dilation, padding, stride, name):
    if x.ndim not in (3, 4):
        raise RuntimeError(f"{name}: Expected 3D (unbatched) or 4D (batched) input, but got input of size: "
                           f"{list(x.shape)}")
    return (ntuple(kernel_size, 2, f"{name}: kernel_size"), ntuple(dilation, 2, f"{name}: dilation"),
            ntuple(padding, 2, f"{name}: padding"), ntuple(stride, 2, f"{name}: stride"))


def unfold(input, kernel_size, dilation=1, padding=0, stride=1):
    """PyTorch's F.unfold (im2col): (N, C, H, W) -> (N, C * prod(kernel_size), L), L the windows."""
    kernel, dilation, padding, stride = _unfold_args(input, kernel_size, dilation, padding, stride, "unfold")
    x, unbatched = _batched(input, 2)
    win = _conv_windows(x, kernel, stride, dilation, [(p, p) for p in padding], "unfold")
    n, c, oh, ow = win.shape[:4]
    y = win.permute(0, 1, 4, 5, 2, 3).reshape(n, c * math.prod(kernel), oh * ow)
    return _named(y.squeeze(0) if unbatched else y, "Im2ColBackward")


def fold(input, output_size, kernel_size, dilation=1, padding=0, stride=1):
    """PyTorch's F.fold (col2im), unfold's transpose: (N, C * prod(kernel_size), L) -> (N, C, *output_size),
    overlapping windows added."""
    kernel, dilation, padding, stride = _unfold_args(input.unsqueeze(-1), kernel_size, dilation, padding, stride,
                                                     "fold")
    out = ntuple(output_size, 2, "fold: output_size")
    x, unbatched = (input, False) if input.ndim == 3 else (input.unsqueeze(0), True)
    full = tuple(o + 2 * p for o, p in zip(out, padding))
    counts = [(f - dl * (k - 1) - 1) // s + 1 for f, dl, k, s in zip(full, dilation, kernel, stride)]
    k = math.prod(kernel)
    if x.shape[1] % k or min(counts) < 1 or x.shape[2] != math.prod(counts):
        raise RuntimeError(f"fold: expected input of size (N, C * {k}, {math.prod(counts)}) for output_size {out}, "
                           f"kernel_size {kernel}, dilation {dilation}, padding {padding}, stride {stride}, but got "
                           f"input of size {list(input.shape)}")
    n, c = x.shape[0], x.shape[1] // k
    win = x.reshape(n, c, *kernel, *counts).permute(0, 1, 4, 5, 2, 3)
    y = bind("unwindows", win, shape=(n, c) + full, axes=(2, 3), size=kernel, step=stride, dilation=dilation)
    if any(padding):
        y = pad(y, [-padding[1], -padding[1], -padding[0], -padding[0]])
    return _named(y.squeeze(0) if unbatched else y, "Col2ImBackward")
