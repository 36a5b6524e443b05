"""Reductions built from primitives: var, std, max/min along an axis (values and indices), norm, cumsum,
logsumexp, softmax, log_softmax; and round_, isnan, isinf, isfinite. `_float32_for_half` computes a
float16 input in float32, as PyTorch."""
import functools
import math

from .. import dtypes as D, return_types
from ..ops import _norm_axis, _reduce_shape, bind, normalize_axes
from ..tensor.base import _ArgError, TensorBase
from ..tensor.dispatch import _axis_kw, _float_operand, _keep_kw, _named, in_float32
from ..symint import is_sym
from ..tensor.factories import arange, full, ones, zeros
from ..tensor.functions import where


def _float32_for_half(f):
    """f computed by PyTorch's rule for float16: in float32, the result stored in float16."""
    @functools.wraps(f)
    def wrapped(x, *args, **kwargs):
        return in_float32(f, x, *args, **kwargs) if isinstance(x, TensorBase) else f(x, *args, **kwargs)
    return wrapped


@_float32_for_half
def var(x, axis=None, *, keepdims=False, unbiased=None, correction=None, dim=None, keepdim=None):
    """PyTorch's variance: divides by N - correction; correction is 1 unless `unbiased=False` or
    `correction=` says otherwise (N - correction <= 0 gives inf or nan, as PyTorch). The mean is
    corrected by the mean of the deviations from it (two-pass corrected mean): whatever order a sum
    adds in, data that is constant along the axes has a variance of exactly 0, as PyTorch's Welford
    variance gives (NumPy's x.var() of np.full(100, 0.1) is 7.7e-34), so std's gradient there is
    NaN in eager and compiled code alike."""
    if correction is not None and unbiased is not None:
        raise _ArgError("var/std: give either unbiased= or correction=, not both")
    ddof = correction if correction is not None else 1 if unbiased is None or unbiased else 0
    x = _float_operand(x)
    axis = normalize_axes(_axis_kw(axis, dim), x.ndim)
    n = math.prod(x._shape[a] for a in axis)
    m = x.mean(axis, keepdims=True)
    d = x - (m + (x - m).mean(axis, keepdims=True))
    return _named((d * d)._reduce("sum", axis, _keep_kw(keepdims, keepdim)) / _divisor(n, ddof, x), "VarBackward")


def _divisor(n, ddof, x):
    """max(n - ddof, 0), PyTorch's divisor of a variance; for a symbolic count n (traced), a 0-d tensor
    computed at the call, so that n <= ddof (an empty or one-row batch) gives eager's inf/nan with no guard."""
    if not is_sym(n):
        return max(n - ddof, 0)
    return (full((), n, dtype=x.dtype, device=x.device) - ddof).clamp(min=0)


def std(x, axis=None, *, keepdims=False, unbiased=None, correction=None, dim=None, keepdim=None):
    return _named(var(x, axis, keepdims=keepdims, unbiased=unbiased, correction=correction, dim=dim,
                      keepdim=keepdim).sqrt(), "StdBackward")


def extreme_along(x, axis, keepdims, kind):
    """x.max(dim) / x.min(dim): the named tuple (values, indices) of PyTorch; the first extreme
    element of each row is selected (NaN counts as the extreme) and gets the whole gradient."""
    if isinstance(axis, (tuple, list)):
        raise TypeError(f"{kind}(): dim must be an int, got {axis!r}; use {kind}() for all dims or a{kind}(dim) "
                        f"for a tuple of dims")
    a = _norm_axis(axis, x.ndim)
    if x.ndim == 0:
        return getattr(return_types, kind)(_named(x * 1, f"{kind.capitalize()}Backward"),
                                           zeros((), dtype=D.int64, device=x.device))
    if x._shape[a] == 0:
        raise IndexError(f"{kind}(): Expected reduction dim {a} to have non-zero size (shape {x._shape})")
    idx = (x.argmax if kind == "max" else x.argmin)(a, keepdims=True)
    index = [idx if d == a else arange(n, device=x.device).reshape(tuple(n if k == d else 1 for k in range(x.ndim)))
             for d, n in enumerate(x._shape)]
    values = x[tuple(index)]
    if not keepdims:
        values, idx = values.squeeze(a), idx.squeeze(a)
    return getattr(return_types, kind)(_named(values, f"{kind.capitalize()}Backward"), idx)


def norm(x, p="fro", dim=None, keepdim=False, dtype=None):
    """Vector p-norm over `dim` (all elements when None): "fro" and 2, 1, inf, -inf, 0, any p > 0.
    The gradient at a zero norm is 0, as PyTorch's (not 0/0)."""
    x = x if dtype is None else x.to(dtype)
    return in_float32(_norm, x, p, dim, keepdim)


def _norm(x, p, dim, keepdim):
    if not x.dtype.is_floating_point:
        raise RuntimeError(f"linalg.vector_norm: Expected a floating point tensor as input. Got {x.dtype}")
    axis = normalize_axes(dim, x.ndim)
    if p == "nuc":
        raise NotImplementedError("norm(p='nuc') needs singular values, which tracegrad does not compute")
    if p == "fro" or p == 2:
        s = (x * x)._reduce("sum", axis, keepdim)
        return _named(where(s == 0, 0.0, where(s == 0, 1.0, s).sqrt()), "LinalgVectorNormBackward")
    if not isinstance(p, (int, float)) or isinstance(p, bool):
        raise ValueError(f"norm: p must be a number, 'fro' or 'nuc', got {p!r}")
    a = x.abs()
    if p == math.inf:
        return _named(a._reduce("max", axis, keepdim), "LinalgVectorNormBackward")
    if p == -math.inf:
        return _named(a._reduce("min", axis, keepdim), "LinalgVectorNormBackward")
    if p == 0:
        return (x != 0).to(x.dtype)._reduce("sum", axis, keepdim)
    if p == 1:
        return _named(a._reduce("sum", axis, keepdim), "LinalgVectorNormBackward")
    s = (a ** p)._reduce("sum", axis, keepdim)
    return _named(where(s == 0, 0.0, where(s == 0, 1.0, s) ** (1.0 / p)), "LinalgVectorNormBackward")


def round_(x, decimals=0):
    """Round half to even (as PyTorch); with `decimals`, to that many decimal places (negative:
    tens, hundreds, ...), as PyTorch does it: round(x * 10^d) / 10^d."""
    if decimals == 0:
        return bind("round", x)
    if not x.dtype.is_floating_point:
        raise RuntimeError(f"round(decimals={decimals}) needs a floating-point tensor, got {x.dtype}")
    scale = 10.0 ** abs(decimals)
    return bind("round", x * scale) / scale if decimals > 0 else bind("round", x / scale) * scale


def cumsum(x, axis, dtype=None):
    if axis is None:
        raise TypeError("cumsum() missing required argument 'dim'")
    x = x if dtype is None else x.to(dtype)
    return in_float32(lambda t: bind("cumsum", t, axis=_norm_axis(axis, x.ndim), reverse=False), x)


def isnan(x):
    return x != x if x.dtype.is_floating_point else zeros(x.shape, dtype=D.bool_, device=x.device)


def isinf(x):
    return x.abs() == math.inf if x.dtype.is_floating_point else zeros(x.shape, dtype=D.bool_, device=x.device)


def isfinite(x):
    return x.abs() < math.inf if x.dtype.is_floating_point else ones(x.shape, dtype=D.bool_, device=x.device)


@_float32_for_half
def logsumexp(x, axis=None, keepdims=False, *, dim=None, keepdim=None):
    x = _float_operand(x)
    axis = normalize_axes(_axis_kw(axis, dim), x.ndim)
    if any(x._shape[a] == 0 for a in axis):      # an empty sum: log 0 = -inf, as PyTorch
        return _named(x.sum(axis, keepdims=_keep_kw(keepdims, keepdim)) + float("-inf"), "LogsumexpBackward")
    m = x._reduce("max", axis, True).detach()
    m = where(m.abs() == float("inf"), 0.0, m)
    out = (x - m).exp()._reduce("sum", axis, True).log() + m
    out = out if _keep_kw(keepdims, keepdim) else out.reshape(_reduce_shape(x._shape, axis, False))
    return _named(out, "LogsumexpBackward")


@_float32_for_half
def softmax(x, axis=None, *, dim=None):
    axis = _axis_kw(axis, dim)
    axis = -1 if axis is None else axis
    x = _float_operand(x)
    if x._shape and x._shape[_norm_axis(axis, x.ndim)] == 0:
        return _named(x * 1, "SoftmaxBackward")     # over an empty axis: empty, as PyTorch
    e = (x - x._reduce("max", axis, True).detach()).exp()
    return _named(e / e.sum(axis, keepdims=True), "SoftmaxBackward")


@_float32_for_half
def log_softmax(x, axis=None, *, dim=None):
    axis = _axis_kw(axis, dim)
    axis = -1 if axis is None else axis
    x = _float_operand(x)
    axis = normalize_axes(axis, x.ndim)
    if any(x._shape[a] == 0 for a in axis):
        return _named(x * 1, "LogSoftmaxBackward")  # over an empty axis: empty, as PyTorch
    m = x._reduce("max", axis, True).detach()    # shift first, as PyTorch: x - m is exact
    d = x - where(m.abs() == float("inf"), 0.0, m)
    return _named(d - d.exp()._reduce("sum", axis, True).log(), "LogSoftmaxBackward")
