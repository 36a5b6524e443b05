"""tg.nn.init: fill a tensor in place with values from a distribution, as torch.nn.init (PyTorch's
fan and gain rules). Each function runs without recording autograd history and returns the tensor."""
import math

import numpy as np

from ..autograd import no_grad
from ..generator import numpy_rng
from ..tensor import Tensor, tensor as make_tensor

_LINEAR = ("linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
           "sigmoid")


def calculate_gain(nonlinearity, param=None):
    """The recommended gain for a nonlinearity (PyTorch's table): 1 for linear, conv and sigmoid, 5/3
    for tanh, sqrt(2) for relu, sqrt(2 / (1 + slope^2)) for leaky_relu (slope 0.01 by default), 3/4
    for selu."""
    if nonlinearity in _LINEAR:
        return 1
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        if param is None:
            slope = 0.01
        elif isinstance(param, (int, float)) and not isinstance(param, bool):
            slope = param
        else:
            raise ValueError(f"negative_slope {param} not a valid number")
        return math.sqrt(2.0 / (1 + slope ** 2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"Unsupported nonlinearity {nonlinearity}")


def _calculate_fan_in_and_fan_out(tensor):
    if tensor.ndim < 2:
        raise ValueError("Fan in and fan out can not be computed for tensor with fewer than 2 dimensions")
    receptive = math.prod(tensor.shape[2:])
    return tensor.shape[1] * receptive, tensor.shape[0] * receptive


def _fan(tensor, mode):
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"Mode {mode} not supported, please use one of fan_in, fan_out")
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    return fan_in if mode == "fan_in" else fan_out


def _fill(tensor, values):
    """Write `values` (a NumPy array of tensor's shape) into tensor, keeping its dtype and device."""
    if not isinstance(tensor, Tensor):
        raise TypeError(f"nn.init expects a tensor, got {type(tensor).__name__}")
    with no_grad():
        tensor.copy_(make_tensor(np.broadcast_to(values, tensor.shape), dtype=tensor.dtype, device=tensor.device))
    return tensor


def uniform_(tensor, a=0.0, b=1.0, generator=None):
    return _fill(tensor, numpy_rng(generator).uniform(a, b, tensor.shape))


def normal_(tensor, mean=0.0, std=1.0, generator=None):
    return _fill(tensor, numpy_rng(generator).normal(mean, std, tensor.shape))


def trunc_normal_(tensor, mean=0.0, std=1.0, a=-2.0, b=2.0, generator=None):
    """Normal(mean, std) restricted to [a, b] (redrawn until inside: the exact truncated distribution)."""
    lo, hi = (a - mean) / std, (b - mean) / std
    mass = 0.5 * (math.erf(hi / math.sqrt(2)) - math.erf(lo / math.sqrt(2)))
    if not mass > 1e-4:
        raise ValueError(f"trunc_normal_: [a, b] = [{a}, {b}] holds {mass:.3g} of the mass of Normal({mean}, {std}); "
                         f"an interval this far in the tail is not supported: move mean or widen [a, b]")
    rng, n = numpy_rng(generator), math.prod(tensor.shape)
    out = np.empty(0)
    while out.size < n:
        draw = rng.standard_normal(max(2 * (n - out.size), 16) + int((n - out.size) / mass))
        out = np.concatenate([out, draw[(draw >= lo) & (draw <= hi)]])
    return _fill(tensor, (out[:n] * std + mean).reshape(tensor.shape))


def constant_(tensor, val):
    return _fill(tensor, np.asarray(val))


def zeros_(tensor):
    return constant_(tensor, 0)


def ones_(tensor):
    return constant_(tensor, 1)


def eye_(tensor):
    if tensor.ndim != 2:
        raise ValueError("Only tensors with 2 dimensions are supported")
    return _fill(tensor, np.eye(*tensor.shape))


def dirac_(tensor, groups=1):
    """Conv weights (out, in, *k) that pass each input channel through unchanged, per group."""
    if tensor.ndim not in (3, 4, 5):
        raise ValueError("Only tensors with 3, 4, or 5 dimensions are supported")
    out_per = tensor.shape[0] // groups
    if tensor.shape[0] % groups:
        raise ValueError("dim 0 must be divisible by groups")
    vals = np.zeros(tensor.shape)
    centre = tuple(k // 2 for k in tensor.shape[2:])
    for g in range(groups):
        for d in range(min(out_per, tensor.shape[1])):
            vals[(g * out_per + d, d) + centre] = 1
    return _fill(tensor, vals)


def xavier_uniform_(tensor, gain=1.0, generator=None):
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    bound = math.sqrt(3.0) * gain * math.sqrt(2.0 / float(fan_in + fan_out))
    return uniform_(tensor, -bound, bound, generator)


def xavier_normal_(tensor, gain=1.0, generator=None):
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    return normal_(tensor, 0.0, gain * math.sqrt(2.0 / float(fan_in + fan_out)), generator)


def _kaiming_std(tensor, a, mode, nonlinearity):
    if 0 in tensor.shape:
        return None
    return calculate_gain(nonlinearity, a) / math.sqrt(_fan(tensor, mode))


def kaiming_uniform_(tensor, a=0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    """Uniform in ±sqrt(3) * gain / sqrt(fan); PyTorch's default layer init is a=sqrt(5)."""
    std = _kaiming_std(tensor, a, mode, nonlinearity)
    return tensor if std is None else uniform_(tensor, -math.sqrt(3.0) * std, math.sqrt(3.0) * std, generator)


def kaiming_normal_(tensor, a=0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    std = _kaiming_std(tensor, a, mode, nonlinearity)
    return tensor if std is None else normal_(tensor, 0.0, std, generator)


def orthogonal_(tensor, gain=1, generator=None):
    """A (semi-)orthogonal matrix over the first dimension and the rest flattened, from the QR
    decomposition of a normal matrix with R's diagonal signs folded in (uniform over the group)."""
    if tensor.ndim < 2:
        raise ValueError("Only tensors with 2 or more dimensions are supported")
    if tensor.numel() == 0:
        return tensor
    rows = tensor.shape[0]
    cols = tensor.numel() // rows
    flat = numpy_rng(generator).standard_normal((rows, cols))
    if rows < cols:
        flat = flat.T
    q, r = np.linalg.qr(flat)
    q = q * np.sign(np.diag(r))
    if rows < cols:
        q = q.T
    return _fill(tensor, gain * q.reshape(tensor.shape))


def sparse_(tensor, sparsity, std=0.01, generator=None):
    """A 2-D tensor of Normal(0, std) values with a fraction `sparsity` of each column zero."""
    if tensor.ndim != 2:
        raise ValueError("Only tensors with 2 dimensions are supported")
    rng = numpy_rng(generator)
    rows, cols = tensor.shape
    vals = rng.normal(0.0, std, (rows, cols))
    for c in range(cols):
        vals[rng.permutation(rows)[:int(math.ceil(sparsity * rows))], c] = 0
    return _fill(tensor, vals)
