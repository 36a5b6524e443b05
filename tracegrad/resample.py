"""F.interpolate: nearest, nearest-exact, linear, bilinear, trilinear, as PyTorch computes them (its
source indices and weights, in the input's precision), one spatial axis at a time, last first: a gather
of the source rows (nearest) or of the two neighbours, weighted (linear). Differentiable through the
gathers (their gradient scatter-adds).

Traced with symbolic sizes (tg.compile's dynamic shapes), a size along a spatial axis stays a symbol where
the output size is an exact expression of it (`size=` given, or a scale factor p/2^k with a small p: 2, 0.5,
1.5, as every float is one, `floor(n * f) == n * p // 2^k`), and the indices and weights are computed from
the sizes at the call by the same float operations (`_grid`); a factor such as 0.3 pins the size, with a
guard that names it."""
import math

import numpy as np

from . import dtypes as D
from .symint import as_size, is_sym, same_size, specialize
from .tensor.base import _ArgError, TensorBase
from .tensor.dispatch import _named
from .tensor.factories import arange, full, tensor
from .tensor.functions import where

_LINEAR = {"linear": 1, "bilinear": 2, "trilinear": 3}


def _scale(n, out, factor, align_corners, np_float):
    """PyTorch's area_pixel_compute_scale / compute_scales_value, in `np_float`."""
    if align_corners:
        return np_float(n - 1) / np_float(out - 1) if out > 1 else np_float(0)
    return np_float(1.0 / factor) if factor is not None and factor > 0 else np_float(n) / np_float(out)


def _nearest_index(n, out, factor, exact):
    if not exact and out == n:
        return np.arange(out)
    if not exact and out == 2 * n:
        return np.arange(out) >> 1
    scale = _scale(n, out, factor, False, np.float32)
    i = np.arange(out, dtype=np.float32) + (np.float32(0.5) if exact else np.float32(0))
    return np.minimum(np.floor(i * scale).astype(np.int64), n - 1)


def _linear_weights(n, out, factor, align_corners, np_float):
    """(index0, index1, lambda0, lambda1) along one axis."""
    scale = _scale(n, out, factor, align_corners, np_float)
    i = np.arange(out).astype(np_float)
    src = scale * i if align_corners else np.maximum(scale * (i + np_float(0.5)) - np_float(0.5), np_float(0))
    i0 = src.astype(np.int64)
    lam1 = (src - i0.astype(np_float)).astype(np_float)
    return i0, i0 + (i0 < n - 1), (np_float(1) - lam1).astype(np_float), lam1


def _sizes(x, d, size, scale_factor, recompute_scale_factor):
    if (size is None) == (scale_factor is None):
        raise _ArgError("interpolate: either size or scale_factor should be defined, not both" if size is not None
                        else "interpolate: either size or scale_factor should be defined")
    spatial = x.shape[2:]
    if size is not None:
        out = tuple(size) if isinstance(size, (tuple, list)) else (size,) * d
        if len(out) != d:
            raise _ArgError(f"interpolate: Input and output must have the same number of spatial dimensions, but "
                            f"got input with spatial dimensions of {list(spatial)} and output size of {list(out)}. "
                            f"Please provide input tensor in (N, C, d1, d2, ...,dK) format and output size in "
                            f"(o1, o2, ...,oK) format.")
        return tuple(as_size(o) for o in out), (None,) * d
    factors = tuple(scale_factor) if isinstance(scale_factor, (tuple, list)) else (scale_factor,) * d
    if len(factors) != d:
        raise _ArgError(f"interpolate: scale_factor {list(factors)} must give one factor per spatial dimension of "
                        f"input {list(x.shape)}")
    out = tuple(_scaled(n, float(f)) for n, f in zip(spatial, factors))
    return out, (None,) * d if recompute_scale_factor else tuple(float(f) for f in factors)


def _scaled(n, f):
    """floor(n * f), PyTorch's output size; a symbolic n stays one where that is n * p // q exactly
    (f == p / q, q a power of two, n * p < 2**53 for every n below 2**32), else it is pinned."""
    if not is_sym(n):
        return math.floor(n * f)
    p, q = f.as_integer_ratio() if math.isfinite(f) else (0, 0)
    if 0 <= p < 2 ** 21 and q:
        return n * p // q
    n = specialize(n, f"interpolate's scale_factor {f}: the output size is no exact expression of the input's, compiled in")
    return math.floor(n * f)


def _grid(n, o, factor, mode, align_corners, dt, dev):
    """_nearest_index / _linear_weights as tensor operations on sizes known at the call (symbolic n or o):
    the same float32 (nearest) or `dt` (linear) operations in the same order, so the same values."""
    i = arange(o, device=dev)
    size = lambda v, t=dt: full((), v, dtype=t, device=dev)  # noqa: E731 -- a size as a 0-d tensor, bound per call
    if mode not in _LINEAR:
        exact = mode == "nearest-exact"
        if not exact and (same_size(o, n) or same_size(o, 2 * n)):
            return i if same_size(o, n) else i // 2
        pos = i.to(D.float32) + 0.5 if exact else i.to(D.float32)
        idx = (pos * _scale_t(n, o, factor, False, D.float32, size)).floor().to(D.int64).minimum(size(n - 1, D.int64))
        if exact:
            return idx
        o_t, n_t = size(o, D.int64), size(n, D.int64)        # PyTorch's shortcuts, decided at the call
        return where(o_t == n_t, i, where(o_t == 2 * n_t, i // 2, idx))
    scale, pos = _scale_t(n, o, factor, align_corners, dt, size), i.to(dt)
    src = scale * pos if align_corners else (scale * (pos + 0.5) - 0.5).clamp(min=0)
    i0 = src.to(D.int64)
    lam1 = src - i0.to(dt)
    return i0, i0 + (i0 < size(n - 1, D.int64)).to(D.int64), 1 - lam1, lam1


def _scale_t(n, o, factor, align_corners, dt, size):
    """_scale as a 0-d tensor of dtype `dt`."""
    if align_corners:
        return where(size(o, D.int64) > 1, size(n - 1, dt) / size(o - 1, dt), 0.0).to(dt)
    if factor is not None and factor > 0:
        return size(float(dt.np.type(1.0 / factor)), dt)
    return size(n, dt) / size(o, dt)


def _is_tensor(v):
    return isinstance(v, TensorBase)


def _take(x, axis, idx):
    return x[(slice(None),) * axis + (idx if _is_tensor(idx) else tensor(idx, dtype=D.int64, device=x.device),)]


def _weights(lam, shape, x):
    return lam.reshape(shape).to(x.dtype) if _is_tensor(lam) else tensor(lam.reshape(shape), dtype=x.dtype, device=x.device)


def interpolate(input, size=None, scale_factor=None, mode="nearest", align_corners=None,
                recompute_scale_factor=None, antialias=False):
    """PyTorch's F.interpolate for (N, C, *spatial) input; modes nearest, nearest-exact, linear (3-D
    input), bilinear (4-D), trilinear (5-D)."""
    x, d = input, input.ndim - 2
    if antialias:
        raise NotImplementedError("interpolate: antialias=True is not implemented; downsample with "
                                  "antialias=False or F.avg_pool2d first")
    if mode not in ("nearest", "nearest-exact", *_LINEAR):
        raise NotImplementedError(f"interpolate: mode {mode!r} is not implemented (nearest, nearest-exact, linear, "
                                  f"bilinear, trilinear are)")
    if mode in _LINEAR and x.ndim != _LINEAR[mode] + 2:
        raise _ArgError(f"Got {x.ndim}D input, but {mode} mode needs {_LINEAR[mode] + 2}D input")
    if mode not in _LINEAR and align_corners is not None:
        raise _ArgError("align_corners option can only be set with the interpolating modes: linear | bilinear | "
                        "bicubic | trilinear")
    if d < 1 or d > 3:
        raise NotImplementedError(f"interpolate: input of shape {list(x.shape)}: expected 3-D, 4-D or 5-D "
                                  f"(N, C, *spatial) input")
    out, factors = _sizes(x, d, size, scale_factor, recompute_scale_factor)
    if any(o < 1 for o in (*out, *x.shape[2:])):       # each its own guard: no order among sizes
        raise _ArgError(f"interpolate: Input and output sizes should be greater than 0, but got input "
                        f"{list(x.shape[2:])} and output {list(out)} (input shape {list(x.shape)})")
    np_float = np.float64 if x.dtype == D.float64 else np.float32
    grid_dtype = D.float64 if x.dtype == D.float64 else D.float32      # eager's positions and weights
    for axis in reversed(range(2, 2 + d)):
        n, o, f = x.shape[axis], out[axis - 2], factors[axis - 2]
        sym = is_sym(n) or is_sym(o)       # traced with symbolic sizes: indices and weights computed at the call
        if mode in _LINEAR:
            i0, i1, lam0, lam1 = _grid(n, o, f, mode, bool(align_corners), grid_dtype, x.device) if sym else \
                _linear_weights(n, o, f, bool(align_corners), np_float)
            shape = (o,) + (1,) * (x.ndim - 1 - axis)
            x = _take(x, axis, i0) * _weights(lam0, shape, x) + _take(x, axis, i1) * _weights(lam1, shape, x)
        else:
            x = _take(x, axis, _grid(n, o, f, mode, None, grid_dtype, x.device) if sym else
                      _nearest_index(n, o, f, mode == "nearest-exact"))
    name = {"nearest": "UpsampleNearest", "nearest-exact": "UpsampleNearestExact"}.get(mode, f"Upsample{mode.capitalize()}")
    return _named(x, f"{name}{d}DBackward")
