"""Composite operations, built from primitives (their gradients and fusion come for free):
softmax, log_softmax, logsumexp, var, std, gelu, layer_norm, mse_loss, cross_entropy.

Tensor methods (`x.softmax(1)`) and tg.nn.functional call these. Each labels its result with the
name PyTorch gives the whole operation's backward node (`grad_fn=<SoftmaxBackward>`)."""
import math

from . import dtypes as D
from .ops import _reduce_shape, bind, normalize_axes
from .tensor.base import TensorBase, _ArgError
from .tensor.dispatch import _axis_kw, _float_operand, _keep_kw, _named
from .tensor.factories import arange
from .tensor.functions import where


# ---------------------------------------------------------------- reductions

def var(x, axis=None, keepdims=False, unbiased=False, *, dim=None, keepdim=None, correction=None):
    x = _float_operand(x)
    axis = normalize_axes(_axis_kw(axis, dim), x.ndim)
    keep = _keep_kw(keepdims, keepdim)
    n = math.prod(x._shape[a] for a in axis)
    ddof = correction if correction is not None else int(bool(unbiased))
    d = x - x.mean(axis, keepdims=True)
    return _named((d * d)._reduce("sum", axis, keep) / (float(n - ddof) if n - ddof > 0 else float("nan")),
                  "VarBackward")


def std(x, axis=None, keepdims=False, unbiased=False, *, dim=None, keepdim=None, correction=None):
    return _named(var(x, axis, keepdims, unbiased, dim=dim, keepdim=keepdim, correction=correction).sqrt(),
                  "StdBackward")


def logsumexp(x, axis=None, keepdims=False, *, dim=None, keepdim=None):
    x = _float_operand(x)
    axis = normalize_axes(_axis_kw(axis, dim), x.ndim)
    m = x._reduce("max", axis, True).detach()
    m = where(m.abs() == float("inf"), 0.0, m)
    out = (x - m).exp()._reduce("sum", axis, True).log() + m
    out = out if _keep_kw(keepdims, keepdim) else out.reshape(_reduce_shape(x._shape, axis, False))
    return _named(out, "LogsumexpBackward")


def softmax(x, axis=None, *, dim=None):
    axis = _axis_kw(axis, dim)
    axis = -1 if axis is None else axis
    x = _float_operand(x)
    e = (x - x._reduce("max", axis, True).detach()).exp()
    return _named(e / e.sum(axis, keepdims=True), "SoftmaxBackward")


def log_softmax(x, axis=None, *, dim=None):
    axis = _axis_kw(axis, dim)
    axis = -1 if axis is None else axis
    x = _float_operand(x)
    axis = normalize_axes(axis, x.ndim)
    m = x._reduce("max", axis, True).detach()    # shift first, as PyTorch: x - m is exact
    d = x - where(m.abs() == float("inf"), 0.0, m)
    return _named(d - d.exp()._reduce("sum", axis, True).log(), "LogSoftmaxBackward")


# ---------------------------------------------------------------- activations and normalization

def gelu(x, approximate="none"):
    """GELU: x·Φ(x) exactly ("none", via erf) or with the tanh approximation ("tanh")."""
    if approximate == "tanh":
        return _named(0.5 * x * (1.0 + (math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)).tanh()),
                      "GeluBackward")
    if approximate != "none":
        raise _ArgError(f"gelu: approximate argument must be either 'none' or 'tanh', got {approximate!r}")
    return _named(0.5 * x * (1.0 + erf(x * (1.0 / math.sqrt(2.0)))), "GeluBackward")


def erf(x):
    """The error function (a primitive; integer tensors are promoted to float32)."""
    return bind("erf", x if x.dtype.is_floating_point else x.float())


def layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    if isinstance(normalized_shape, int):
        normalized_shape = (normalized_shape,)
    normalized_shape = tuple(normalized_shape)
    k = len(normalized_shape)
    if x.shape[x.ndim - k:] != normalized_shape:
        raise RuntimeError(f"layer_norm: input of shape {x.shape} does not end in normalized_shape "
                           f"{normalized_shape}")
    axes = tuple(range(x.ndim - k, x.ndim))
    mean = x.mean(axes, keepdims=True)
    d = x - mean
    var = (d * d).mean(axes, keepdims=True)
    y = d / (var + eps).sqrt()
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return _named(y, "NativeLayerNormBackward")


# ---------------------------------------------------------------- losses

def _reduce(loss, reduction):
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    if reduction == "none":
        return loss
    raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


def mse_loss(input, target, reduction="mean"):
    d = input - target
    return _named(_reduce(d * d, reduction), "MseLossBackward")


def cross_entropy(logits, target, reduction="mean"):
    """Log-softmax cross-entropy over axis 1 (or 0 for a 1-D input) with int class labels or
    class probabilities of the logits' shape."""
    if not isinstance(logits, TensorBase) or not isinstance(target, TensorBase):
        raise TypeError("cross_entropy expects tensors")
    axis = 0 if logits.ndim == 1 else 1
    logp = log_softmax(logits, axis)
    if target.dtype.is_floating_point:
        if target.shape != logits.shape:
            raise ValueError(f"cross_entropy: probability targets must have the logits' shape {logits.shape}, "
                             f"got {target.shape}")
        return _named(_reduce(-(logp * target).sum(axis), reduction), "NllLossBackward")
    if target.dtype not in (D.int64, D.int32):
        raise TypeError(f"cross_entropy: class labels must be an int64 tensor, got {target.dtype}")
    expected = logits.shape[:axis] + logits.shape[axis + 1:]
    if target.shape != expected:
        raise ValueError(f"cross_entropy: labels of shape {target.shape} do not match logits of shape "
                         f"{logits.shape}; expected labels of shape {expected}")
    return _named(_reduce(-_take_along(logp, target, axis), reduction), "NllLossBackward")


def _take_along(x, idx, axis):
    """x[..., idx[...], ...] along `axis` (take_along_axis), through integer-tensor indexing."""
    index = []
    for d in range(x.ndim):
        if d == axis:
            index.append(idx)
        else:
            shape = [1] * idx.ndim
            k = d if d < axis else d - 1
            shape[k] = x.shape[d]
            index.append(arange(x.shape[d], device=x.device).reshape(shape))
    return x[tuple(index)]
