"""Functional forms of batch, instance and group normalization and channel dropout, as composites
(their gradients and fusion come from the primitives). Running statistics are updated in place
under no_grad, so inside tg.compile they are written back like an optimizer's state."""
import math
import warnings

from ..autograd import no_grad
from ..symint import is_sym
from ..tensor import _named, rand
from ..tensor import where as _where


def _stats(x, axes):
    """Mean and biased variance over `axes`, kept as size-1 dims."""
    mean = x.mean(axes, keepdims=True)
    d = x - mean
    return mean, d, (d * d).mean(axes, keepdims=True)


def _channel(t, ndim):
    """A per-channel vector (C,) shaped to broadcast over (N, C, *spatial)."""
    return t.reshape((1, -1) + (1,) * (ndim - 2))


def _affine(y, weight, bias):
    if weight is not None:
        y = y * _channel(weight, y.ndim)
    if bias is not None:
        y = y + _channel(bias, y.ndim)
    return y


def update_running(running, value, momentum):
    """running = (1 - momentum) * running + momentum * value, in place; momentum may be a tensor
    (a cumulative average's 1 / num_batches_tracked)."""
    with no_grad():
        running.mul_(1.0 - momentum).add_(value.detach().to(running.dtype) * momentum)


def batch_norm(input, running_mean, running_var, weight=None, bias=None, training=False, momentum=0.1,
               eps=1e-5):
    """torch.nn.functional.batch_norm: normalizes each channel (dim 1) over the batch and spatial
    dims. In training it uses the batch's statistics and, when running stats are given, updates them
    (the unbiased variance goes into running_var, the biased one normalizes); otherwise it normalizes
    with running_mean and running_var."""
    if input.ndim < 2:
        raise ValueError(f"batch_norm: expected an input of at least 2 dims (N, C, ...), got shape {input.shape}")
    c = input.shape[1]
    for name, t in (("running_mean", running_mean), ("running_var", running_var), ("weight", weight),
                    ("bias", bias)):
        if t is not None and tuple(t.shape) != (c,):
            raise RuntimeError(f"batch_norm: {name} should contain {c} elements (the input's channels), not "
                               f"{t.numel()} (shape {tuple(t.shape)})")
    axes = (0,) + tuple(range(2, input.ndim))
    if training:
        n = math.prod(input.shape[a] for a in axes)
        if n <= 1:
            raise ValueError(f"Expected more than 1 value per channel when training, got input size {input.shape}")
        mean, d, var = _stats(input, axes)
        y = d / (var + eps).sqrt()
        if running_mean is not None:
            update_running(running_mean, mean.reshape(c), momentum)
        if running_var is not None:
            update_running(running_var, var.reshape(c) * n / (n - 1) if is_sym(n) else var.reshape(c) * (n / (n - 1)),
                           momentum)          # a symbolic count: graph constants, no pin
    else:
        if running_mean is None or running_var is None:
            raise RuntimeError("batch_norm: running_mean and running_var must be given when training=False")
        y = (input - _channel(running_mean, input.ndim)) / (_channel(running_var, input.ndim) + eps).sqrt()
    return _named(_affine(y, weight, bias), "NativeBatchNormBackward")


def instance_norm(input, running_mean=None, running_var=None, weight=None, bias=None, use_input_stats=True,
                  momentum=0.1, eps=1e-5):
    """torch.nn.functional.instance_norm: normalizes each (sample, channel) over its spatial dims;
    running stats, when given, get the batch average of the per-instance statistics."""
    if input.ndim < 3:
        raise ValueError(f"instance_norm: expected an input of at least 3 dims (N, C, *spatial), got shape "
                         f"{input.shape}")
    if not use_input_stats:
        return batch_norm(input, running_mean, running_var, weight, bias, False, momentum, eps)
    axes = tuple(range(2, input.ndim))
    n = math.prod(input.shape[a] for a in axes)
    if n <= 1:
        raise ValueError(f"Expected more than 1 spatial element when training, got input size {input.shape}")
    mean, d, var = _stats(input, axes)
    c = input.shape[1]
    if running_mean is not None:
        update_running(running_mean, mean.reshape(-1, c).mean(0), momentum)
    if running_var is not None:
        v = var.reshape(-1, c).mean(0)
        update_running(running_var, v * n / (n - 1) if is_sym(n) else v * (n / (n - 1)), momentum)   # no pin
    return _named(_affine(d / (var + eps).sqrt(), weight, bias), "NativeBatchNormBackward")


def group_norm(input, num_groups, weight=None, bias=None, eps=1e-5):
    """torch.nn.functional.group_norm: channels split into num_groups groups, each normalized over
    its channels and spatial dims per sample; then a per-channel affine."""
    if input.ndim < 2:
        raise RuntimeError(f"group_norm: expected an input of at least 2 dims (N, C, ...), got shape {input.shape}")
    n, c = input.shape[0], input.shape[1]
    if num_groups <= 0 or c % num_groups:
        raise RuntimeError(f"Expected number of channels in input to be divisible by num_groups, but got input of "
                           f"shape {input.shape} and num_groups={num_groups}")
    g = input.reshape(n, num_groups, -1)
    _, d, var = _stats(g, (2,))
    y = (d / (var + eps).sqrt()).reshape(input.shape)
    return _named(_affine(y, weight, bias), "NativeGroupNormBackward")


def masked_dropout(x, p, training, mask_shape):
    """Dropout with one draw per element of mask_shape (x's shape, or x's with size-1 dims to drop
    whole channels), broadcast over x."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if not training or p == 0.0:
        return x
    if p == 1.0:
        return x * 0.0
    keep = rand(mask_shape, dtype=x.dtype if x.dtype.is_floating_point else None, device=x.device) >= p
    return _named(_where(keep, x * (1.0 / (1.0 - p)), 0.0), "MulBackward")


def dropout1d(input, p=0.5, training=True, inplace=False):
    """Zeroes whole channels of (N, C, L) or (C, L) with probability p, scaling the rest by 1/(1-p)."""
    if input.ndim not in (2, 3):
        raise RuntimeError(f"dropout1d: Expected 2D or 3D input, but received a {input.ndim}D input. Note that "
                           f"dropout1d exists to provide channel-wise dropout on inputs with 1 spatial dimension, a "
                           f"channel dimension, and an optional batch dimension (i.e. 2D or 3D inputs).")
    return masked_dropout(input, p, training, tuple(input.shape[:-1]) + (1,))


def dropout2d(input, p=0.5, training=True, inplace=False):
    """Zeroes whole channels of (N, C, H, W) with probability p, scaling the rest by 1/(1-p). As
    PyTorch's, it takes a 3-D input as (N, C, L) (with its warning), and any (N, C, ...) input."""
    if input.ndim not in (3, 4):
        warnings.warn(f"dropout2d: Received a {input.ndim}-D input to dropout2d, which is deprecated and will "
                      f"result in an error in a future release. To retain the behavior and silence this warning, "
                      f"please use dropout instead. Note that dropout2d exists to provide channel-wise dropout on "
                      f"inputs with 2 spatial dimensions, a channel dimension, and an optional batch dimension "
                      f"(i.e. 3D or 4D inputs).", UserWarning, stacklevel=2)
    if input.ndim == 3:
        warnings.warn("dropout2d: Received a 3D input to dropout2d and assuming that channel-wise 1D dropout "
                      "behavior is desired - input is interpreted as shape (N, C, L), where C is the channel dim. "
                      "This behavior will change in a future release to interpret the input as one without a "
                      "batch dimension, i.e. shape (C, H, W). To maintain the 1D channel-wise dropout behavior, "
                      "please switch to using dropout1d instead.", UserWarning, stacklevel=2)
    if input.ndim < 2:
        raise RuntimeError(f"dropout2d: expected an input of at least 2 dims (N, C, ...), got shape {input.shape}")
    return masked_dropout(input, p, training, tuple(input.shape[:2]) + (1,) * (input.ndim - 2))

