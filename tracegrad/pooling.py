"""Pooling as composites over the `windows` view (tracegrad/ops/windows.py), PyTorch's shapes and
rules: max_pool1d/2d/3d (indices, ceil_mode, dilation), avg_pool1d/2d/3d (count_include_pad,
ceil_mode, divisor_override), adaptive_avg_pool1d/2d/3d.

A max pool is the largest element of each window of the input padded with -inf, picked at its
first occurrence (NaN counts as the largest), so its gradient goes to that one element, as
PyTorch's; an average pool is each window's sum, divided by PyTorch's count of it. Under tg.compile
all of it fuses into loops: windows that tile their axes are plain views, others the `windows` view,
whose gradient (`unwindows`) is a fused sum of gathers (ir/passes/window_sums.py)."""
import math

import numpy as np

from . import dtypes as D
from .composites import take_along_dim
from .convolution import ntuple, pad, sliding
from .tensor.base import _ArgError
from .tensor.dispatch import _named
from .tensor.factories import arange, tensor
from .tensor.functions import where


def _out_size(n, k, s, p, d, ceil_mode):
    """PyTorch's pooling_output_shape: the last window must start inside the input or left padding."""
    out = (n + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil_mode else 0)) // s + 1
    if ceil_mode and (out - 1) * s >= n + p:
        out -= 1
    return out


def _geometry(x, d, kernel_size, stride, padding, dilation, ceil_mode, name):
    """(x batched, unbatched?, kernel, stride, padding, dilation, output sizes) with PyTorch's checks."""
    if x.ndim not in (d + 1, d + 2):
        raise RuntimeError(f"{name}: Expected {d + 1}D or {d + 2}D (batch mode) tensor for input, but got input of "
                           f"size: {list(x.shape)}")
    kernel = ntuple(kernel_size, d, f"{name}: kernel_size")
    stride = kernel if stride is None or stride == [] or stride == () else ntuple(stride, d, f"{name}: stride")
    padding, dilation = ntuple(padding, d, f"{name}: padding"), ntuple(dilation, d, f"{name}: dilation")
    if min(kernel) < 1 or min(stride) < 1 or min(dilation) < 1:
        raise RuntimeError(f"{name}: kernel_size {kernel}, stride {stride} and dilation {dilation} must be positive")
    if any(p < 0 or 2 * p > dl * (k - 1) + 1 for k, p, dl in zip(kernel, padding, dilation)):
        raise RuntimeError(f"{name}: pad should be at most half of effective kernel size, but got pad={padding}, "
                           f"kernel_size={kernel} and dilation={dilation}")
    unbatched = x.ndim == d + 1
    xb = x.unsqueeze(0) if unbatched else x
    sizes = tuple(xb.shape[2:])
    out = tuple(_out_size(*a, ceil_mode) for a in zip(sizes, kernel, stride, padding, dilation))
    if min(out) < 1:
        raise RuntimeError(f"{name}: Given input size: ({'x'.join(map(str, xb.shape[1:]))}). Calculated output "
                           f"size: ({'x'.join(map(str, (xb.shape[1],) + out))}). Output size is too small")
    return xb, unbatched, kernel, stride, padding, dilation, out


def _windows(x, kernel, stride, padding, dilation, out, value):
    """The windows of x padded on the left by `padding` and on the right as far as the last window
    reaches (ceil_mode may reach further than `padding`, or less), with `value`."""
    d = len(kernel)
    right = [(o - 1) * s + dl * (k - 1) + 1 - n - p
             for o, s, dl, k, n, p in zip(out, stride, dilation, kernel, x.shape[2:], padding)]
    amounts = [v for p, r in zip(reversed(padding), reversed(right)) for v in (p, r)]
    if any(amounts):
        x = pad(x, amounts, value=value)
    return sliding(x, tuple(range(2, 2 + d)), kernel, stride, dilation)


def _lowest(dtype):
    return -math.inf if dtype.is_floating_point else int(np.iinfo(dtype.np).min)


def _first_max(rows):
    """(the maximum of each row of the last axis, the position of its first occurrence), as argmax
    (NaN counts as the maximum) but from reductions that compile to fused loops; the gradient of
    the values goes to that one element."""
    k = rows.shape[-1]
    hit = (rows == rows.amax(-1, keepdims=True)) | (rows != rows)
    pick = where(hit, arange(k, device=rows.device), k).amin(-1, keepdims=True)
    return take_along_dim(rows, pick, -1).squeeze(-1), pick.squeeze(-1)


def max_pool(input, kernel_size, stride, padding, dilation, ceil_mode, return_indices, d, name):
    x, unbatched, kernel, stride, padding, dilation, out = _geometry(
        input, d, kernel_size, stride, padding, dilation, ceil_mode, name)
    win = _windows(x, kernel, stride, padding, dilation, out, _lowest(x.dtype))
    values, pick = _first_max(win.reshape(*win.shape[:2 + d], math.prod(kernel)))
    values = _named(values, f"MaxPool{d}DWithIndicesBackward")
    if not return_indices:
        return values.squeeze(0) if unbatched else values
    step = np.cumprod((1,) + tuple(x.shape[:1:-1]))[::-1][1:]       # element strides of the spatial axes
    grid = np.ix_(*[(np.arange(o) * s - p) * st for o, s, p, st in zip(out, stride, padding, step)])
    start = sum(grid)                                                # flat index of each window's corner
    offs = sum(np.ix_(*[np.arange(k) * dl * st for k, dl, st in zip(kernel, dilation, step)])).reshape(-1)
    indices = tensor(start, dtype=D.int64, device=x.device) + tensor(offs, dtype=D.int64, device=x.device)[pick]
    return (values.squeeze(0), indices.squeeze(0)) if unbatched else (values, indices)


def _divisors(sizes, kernel, stride, padding, out, count_include_pad):
    """PyTorch's divisor of each window (an array over the output's spatial shape): the window
    clipped to the padded input when padding counts, else to the input."""
    per_axis = []
    for n, k, s, p, o in zip(sizes, kernel, stride, padding, out):
        start = np.arange(o) * s - p
        end = np.minimum(start + k, n + p)
        per_axis.append(end - start if count_include_pad else np.minimum(end, n) - np.maximum(start, 0))
    return math.prod(np.ix_(*per_axis))


def avg_pool(input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, d, name):
    x, unbatched, kernel, stride, padding, _, out = _geometry(
        input, d, kernel_size, stride, padding, 1, ceil_mode, name)
    if divisor_override is not None and divisor_override == 0:
        raise RuntimeError(f"{name}: divisor must be not zero")
    win = _windows(x, kernel, stride, padding, (1,) * d, out, 0)
    total = win.sum(tuple(range(2 + d, 2 + 2 * d)))
    if divisor_override is not None:
        div = float(divisor_override)
    else:
        counts = np.broadcast_to(_divisors(x.shape[2:], kernel, stride, padding, out, count_include_pad), out)
        div = float(counts.flat[0]) if (counts == counts.flat[0]).all() else \
            tensor(counts, dtype=x.dtype, device=x.device)
    y = _named(total / div, f"AvgPool{d}DBackward")
    return y.squeeze(0) if unbatched else y


def _adaptive_axis(x, axis, size):
    """Sums over PyTorch's adaptive windows along one axis: [floor(i*n/size), ceil((i+1)*n/size)),
    and their lengths; windows of unequal length gather the longest and mask the rest."""
    n = int(x.shape[axis])      # the windows are numbers: a symbolic size pinned
    start = np.arange(size) * n // size
    end = -(-(np.arange(1, size + 1) * n) // size)
    longest = int((end - start).max())
    idx = np.minimum(start[:, None] + np.arange(longest), n - 1)
    picked = x[(slice(None),) * axis + (tensor(idx, dtype=D.int64, device=x.device),)]    # (.., size, longest, ..)
    if (end - start == longest).all():
        return picked.sum(axis + 1), end - start
    keep = (np.arange(longest) < (end - start)[:, None]).reshape((size, longest) + (1,) * (x.ndim - axis - 1))
    return where(tensor(keep, device=x.device), picked, 0).sum(axis + 1), end - start


def adaptive_avg_pool(input, output_size, d, name):
    if input.ndim not in (d + 1, d + 2):
        raise RuntimeError(f"{name}: Expected {d + 1}D or {d + 2}D tensor for input, but got input of size: "
                           f"{list(input.shape)}")
    sizes = tuple(input.shape[-d:])
    out = tuple(n if o is None else o for n, o in
                zip(sizes, (output_size,) * d if not isinstance(output_size, (tuple, list)) else output_size))
    out = ntuple(out, d, f"{name}: output_size")
    if min(out) < 0 or (0 in sizes and input.numel()):
        raise RuntimeError(f"{name}: output_size {out} must be non-negative and input {list(input.shape)} non-empty")
    first = input.ndim - d
    if all(n % o == 0 for n, o in zip(sizes, out)):       # equal windows: a plain average pool
        k = tuple(n // o for n, o in zip(sizes, out))
        win = sliding(input, tuple(range(first, input.ndim)), k, k, (1,) * d)
        y = win.mean(tuple(range(input.ndim, input.ndim + d)))
    else:
        y, count = input, 1
        for a, o in zip(range(first, input.ndim), out):
            y, lengths = _adaptive_axis(y, a, o)
            count = np.multiply.outer(count, lengths) if a > first else lengths
        y = y / tensor(count, dtype=input.dtype, device=input.device)
    return _named(y, f"AdaptiveAvgPool{d}DBackward")


def max_pool1d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    return max_pool(input, kernel_size, stride, padding, dilation, ceil_mode, return_indices, 1, "max_pool1d")


def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    return max_pool(input, kernel_size, stride, padding, dilation, ceil_mode, return_indices, 2, "max_pool2d")


def max_pool3d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    return max_pool(input, kernel_size, stride, padding, dilation, ceil_mode, return_indices, 3, "max_pool3d")


def avg_pool1d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
    return avg_pool(input, kernel_size, stride, padding, ceil_mode, count_include_pad, None, 1, "avg_pool1d")


def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    return avg_pool(input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, 2,
                    "avg_pool2d")


def avg_pool3d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    return avg_pool(input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, 3,
                    "avg_pool3d")


def adaptive_avg_pool1d(input, output_size):
    return adaptive_avg_pool(input, output_size, 1, "adaptive_avg_pool1d")


def adaptive_avg_pool2d(input, output_size):
    return adaptive_avg_pool(input, output_size, 2, "adaptive_avg_pool2d")


def adaptive_avg_pool3d(input, output_size):
    return adaptive_avg_pool(input, output_size, 3, "adaptive_avg_pool3d")
