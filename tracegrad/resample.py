"""F.interpolate: nearest, nearest-exact, linear, bilinear, trilinear, as PyTorch computes them (its
source indices and weights, in the input's precision), one spatial axis at a time, last first: a gather
of the source rows (nearest) or of the two neighbours, weighted (linear). Differentiable through the
gathers (their gradient scatter-adds)."""
import math

import numpy as np

from . import dtypes as D
from .tensor.base import _ArgError
from .tensor.dispatch import _named
from .tensor.factories import tensor

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
        return tuple(int(o) for o in out), (None,) * d
    factors = tuple(scale_factor) if isinstance(scale_factor, (tuple, list)) else (scale_factor,) * d
    if len(factors) != d:
        raise _ArgError(f"interpolate: scale_factor {list(factors)} must give one factor per spatial dimension of "
                        f"input {list(x.shape)}")
    out = tuple(math.floor(float(n) * float(f)) for n, f in zip(spatial, factors))
    return out, (None,) * d if recompute_scale_factor else tuple(float(f) for f in factors)


def _take(x, axis, idx):
    return x[(slice(None),) * axis + (tensor(idx, dtype=D.int64, device=x.device),)]


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
    if min(out) < 1:
        raise _ArgError(f"interpolate: output size {list(out)} of input {list(x.shape)} must be positive")
    np_float = np.float64 if x.dtype == D.float64 else np.float32
    for axis in reversed(range(2, 2 + d)):
        # the weights and indices are NumPy constants: a symbolic size is compiled in (int() records its guard)
        n, o, f = int(x.shape[axis]), int(out[axis - 2]), factors[axis - 2]
        if mode in _LINEAR:
            i0, i1, lam0, lam1 = _linear_weights(n, o, f, bool(align_corners), np_float)
            shape = (o,) + (1,) * (x.ndim - 1 - axis)
            x = _take(x, axis, i0) * tensor(lam0.reshape(shape), dtype=x.dtype, device=x.device) + \
                _take(x, axis, i1) * tensor(lam1.reshape(shape), dtype=x.dtype, device=x.device)
        else:
            x = _take(x, axis, _nearest_index(n, o, f, mode == "nearest-exact"))
    name = {"nearest": "UpsampleNearest", "nearest-exact": "UpsampleNearestExact"}.get(mode, f"Upsample{mode.capitalize()}")
    return _named(x, f"{name}{d}DBackward")
