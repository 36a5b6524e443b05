"""The losses: mse, l1, nll, cross_entropy, binary cross-entropy from probabilities and from logits,
smooth L1, Huber, KL divergence, with PyTorch's reductions (and its legacy size_average/reduce)."""
from .. import dtypes as D
from ..tensor.base import TensorBase
from ..tensor.dispatch import _named
from ..tensor.functions import where
from .gather import _take_along
from .reductions import log_softmax


def _reduce(loss, reduction):
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    if reduction == "none":
        return loss
    raise ValueError(f"{reduction} is not a valid value for reduction; expected 'mean', 'sum' or 'none'")


def legacy_reduction(size_average=None, reduce=None):
    """PyTorch's reading of the deprecated size_average/reduce flags as a reduction string."""
    size_average = True if size_average is None else size_average
    reduce = True if reduce is None else reduce
    return "none" if not reduce else "mean" if size_average else "sum"


def _reduction(reduction, size_average, reduce):
    return reduction if size_average is None and reduce is None else legacy_reduction(size_average, reduce)


def mse_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    d = input - target
    return _named(_reduce(d * d, _reduction(reduction, size_average, reduce)), "MseLossBackward")


def l1_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    return _named(_reduce((input - target).abs(), _reduction(reduction, size_average, reduce)), "L1LossBackward")


def _class_view(w, ndim, axis):
    """A per-class weight of shape (C,) reshaped to broadcast along the class axis."""
    return w.reshape(tuple(w.shape[0] if d == axis else 1 for d in range(ndim)))


def _check_weight(weight, n_classes):
    if weight is not None and (not isinstance(weight, TensorBase) or weight.shape != (n_classes,)):
        raise ValueError(f"weight must be a tensor of shape ({n_classes},) (one entry per class), got "
                         f"{getattr(weight, 'shape', type(weight).__name__)}")


def nll_loss(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None, reduction="mean"):
    """Negative log-likelihood of int class labels under log-probabilities `input` (class axis 1, or
    0 for a 1-D input); `weight` per class; labels equal to `ignore_index` count for nothing.
    The mean divides by the summed weights of the counted labels, as PyTorch."""
    reduction = _reduction(reduction, size_average, reduce)
    if not isinstance(input, TensorBase) or not isinstance(target, TensorBase):
        raise TypeError("nll_loss expects tensors")
    axis = 0 if input.ndim == 1 else 1
    if target.dtype not in (D.int64, D.int32):
        raise TypeError(f"nll_loss: class labels must be an int64 tensor, got {target.dtype}")
    expected = input.shape[:axis] + input.shape[axis + 1:]
    if target.shape != expected:
        raise ValueError(f"nll_loss: labels of shape {target.shape} do not match input of shape "
                         f"{input.shape}; expected labels of shape {expected}")
    _check_weight(weight, input.shape[axis])
    kept = target != ignore_index
    safe = where(kept, target, 0)            # ignored labels index class 0; their loss is masked out
    w = kept.to(input.dtype) if weight is None else where(kept, _take_along(weight, safe, 0), 0.0)
    loss = -_take_along(input, safe, axis) * w
    if reduction == "mean":
        return _named(loss.sum() / w.sum(), "NllLossBackward")
    return _named(_reduce(loss, reduction), "NllLossBackward")


def cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
                  reduction="mean", label_smoothing=0.0):
    """Log-softmax cross-entropy over axis 1 (or 0 for a 1-D input) with int class labels or class
    probabilities of the input's shape; `weight`, `ignore_index` and `label_smoothing` as PyTorch."""
    reduction = _reduction(reduction, size_average, reduce)
    if not isinstance(input, TensorBase) or not isinstance(target, TensorBase):
        raise TypeError("cross_entropy expects tensors")
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"label_smoothing must be between 0.0 and 1.0. Got: {label_smoothing}")
    axis = 0 if input.ndim == 1 else 1
    n_classes = input.shape[axis]
    _check_weight(weight, n_classes)
    logp = log_softmax(input, axis)
    if target.dtype.is_floating_point:
        if target.shape != input.shape:
            raise ValueError(f"cross_entropy: probability targets must have the input's shape {input.shape}, "
                             f"got {target.shape}")
        if ignore_index >= 0:
            raise RuntimeError("ignore_index is not supported for floating point target")
        if label_smoothing > 0:
            target = target * (1 - label_smoothing) + label_smoothing / n_classes
        prod = logp * target if weight is None else logp * target * _class_view(weight, input.ndim, axis)
        if reduction == "mean":
            return _named(-prod.sum() / (input.numel() // max(n_classes, 1)), "NllLossBackward")
        return _named(_reduce(-prod.sum(axis), reduction), "NllLossBackward")
    nll = nll_loss(logp, target, weight, ignore_index=ignore_index, reduction=reduction)
    if label_smoothing == 0:
        return nll
    kept = target != ignore_index
    smooth = -(logp if weight is None else logp * _class_view(weight, input.ndim, axis)).sum(axis)
    smooth = where(kept, smooth, 0.0)
    if reduction == "mean":
        denom = kept.sum() if weight is None else where(kept, _take_along(weight, where(kept, target, 0), 0), 0.0).sum()
        smooth = smooth.sum() / denom
    else:
        smooth = _reduce(smooth, reduction)
    return (1 - label_smoothing) * nll + smooth * (label_smoothing / n_classes)


def _softplus(x):
    """log(1 + exp(x)) without overflow; its gradient is sigmoid(x) everywhere, 0 included."""
    z = where(x > 0, -x, x)                  # -|x|, with slope +1 at 0 so the gradient at 0 is 1/2
    return where(x > 0, x, 0.0) + z.exp().log1p()


def binary_cross_entropy_with_logits(input, target, weight=None, size_average=None, reduce=None,
                                     reduction="mean", pos_weight=None):
    """-[p·t·log σ(x) + (1-t)·log(1-σ(x))] from logits x, stable for any |x|; `pos_weight` p
    weights the positive term (broadcast along the last axis), `weight` each element."""
    reduction = _reduction(reduction, size_average, reduce)
    if not isinstance(input, TensorBase) or not isinstance(target, TensorBase):
        raise TypeError("binary_cross_entropy_with_logits expects tensors")
    if target.shape != input.shape:
        raise ValueError(f"Target size ({list(target.shape)}) must be the same as input size "
                         f"({list(input.shape)})")
    if pos_weight is None:
        loss = _softplus(input) - input * target
    else:
        loss = (1 - target) * input + (1 + (pos_weight - 1) * target) * _softplus(-input)
    if weight is not None:
        loss = loss * weight
    return _named(_reduce(loss, reduction), "BinaryCrossEntropyWithLogitsBackward")


def binary_cross_entropy(input, target, weight=None, size_average=None, reduce=None, reduction="mean"):
    """-[t·log p + (1-t)·log(1-p)] from probabilities p; each log is clamped at -100, as PyTorch."""
    reduction = _reduction(reduction, size_average, reduce)
    if target.shape != input.shape:
        raise ValueError(f"Using a target size ({list(target.shape)}) that is different to the input size "
                         f"({list(input.shape)}) is deprecated. Please ensure they have the same size.")
    loss = -(target * input.log().clamp(min=-100) + (1 - target) * (1 - input).log().clamp(min=-100))
    if weight is not None:
        loss = loss * weight
    return _named(_reduce(loss, reduction), "BinaryCrossEntropyBackward")


def smooth_l1_loss(input, target, size_average=None, reduce=None, reduction="mean", beta=1.0):
    d = (input - target).abs()
    loss = d if beta == 0 else where(d < beta, d * d * (0.5 / beta), d - 0.5 * beta)
    return _named(_reduce(loss, _reduction(reduction, size_average, reduce)), "SmoothL1LossBackward")


def huber_loss(input, target, reduction="mean", delta=1.0):
    d = (input - target).abs()
    loss = where(d < delta, d * d * 0.5, (d - 0.5 * delta) * delta)
    return _named(_reduce(loss, _reduction(reduction, None, None)), "HuberLossBackward")


def kl_div(input, target, size_average=None, reduce=None, reduction="mean", log_target=False):
    """Pointwise target * (log target - input) (input: log-probabilities), 0 where target is 0;
    reduction "batchmean" divides the sum by the batch size, as PyTorch."""
    if log_target:
        loss = target.exp() * (target - input)
    else:
        pos = target > 0
        loss = where(pos, target * where(pos, target, 1.0).log(), 0.0) - target * input
    reduction = _reduction(reduction, size_average, reduce)
    if reduction == "batchmean":
        out = loss.sum() / (input.shape[0] if input.ndim else 1)
    else:
        out = _reduce(loss, reduction)
    return _named(out, "KlDivBackward")
