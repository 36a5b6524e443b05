"""tg.nn.functional: composite operations built from primitives (their gradients come for free)."""
import math

from .. import dtypes as D
from ..tensor import Tensor, _ArgError, _named, rand, where


def relu(x):
    return x.relu()


def sigmoid(x):
    return x.sigmoid()


def tanh(x):
    return x.tanh()


def gelu(x, approximate="none"):
    """GELU: x·Φ(x) exactly ("none", via erf) or with the tanh approximation ("tanh")."""
    if approximate == "tanh":
        return _named(0.5 * x * (1.0 + (math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)).tanh()),
                      "GeluBackward")
    if approximate != "none":
        raise _ArgError(f"gelu: approximate argument must be either 'none' or 'tanh', got {approximate!r}")
    return _named(0.5 * x * (1.0 + erf(x * (1.0 / math.sqrt(2.0)))), "GeluBackward")


def erf(x):
    from ..ops import bind
    return bind("erf", x if x.dtype.is_floating_point else x.float())


def softmax(x, axis=None, *, dim=None):
    return x.softmax(axis, dim=dim)


def log_softmax(x, axis=None, *, dim=None):
    return x.log_softmax(axis, dim=dim)


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
    if not isinstance(logits, Tensor) or not isinstance(target, Tensor):
        raise TypeError("cross_entropy expects tensors")
    axis = 0 if logits.ndim == 1 else 1
    logp = logits.log_softmax(axis)
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
    from ..tensor import arange
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


def linear(x, weight, bias=None):
    y = x @ weight.mT
    if bias is None:
        return y
    return _named(y + bias, "AddmmBackward") if x.ndim == 2 else y + bias


def dropout(x, p=0.5, training=True):
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if not training or p == 0.0:
        return x
    if p == 1.0:
        return x * 0.0
    keep = rand(x.shape, dtype=x.dtype if x.dtype.is_floating_point else None, device=x.device) >= p
    return _named(where(keep, x * (1.0 / (1.0 - p)), 0.0), "MulBackward")
