"""Activations and normalization: gelu (exact, via erf, or tanh), layer_norm, silu, leaky_relu, elu,
softplus, normalize, cosine_similarity; log1p and expm1 (accurate for small arguments)."""
import math

from ..broadcast import broadcast_shapes
from ..ops import bind
from ..symint import is_size
from ..tensor.base import _ArgError
from ..tensor.dispatch import _float_operand, _named
from ..tensor.functions import where
from .losses import _softplus
from .reductions import _float32_for_half, norm


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


@_float32_for_half
def layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    if is_size(normalized_shape):
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


def _maybe_inplace(x, out, inplace):
    """`out`, or x updated in place to it (inplace=True, as PyTorch's activations take)."""
    return x.copy_(out) if inplace else out


def silu(x, inplace=False):
    y = _float_operand(x)
    return _maybe_inplace(x, _named(y * y.sigmoid(), "SiluBackward"), inplace)


def leaky_relu(x, negative_slope=0.01, inplace=False):
    y = _float_operand(x)
    return _maybe_inplace(x, _named(where(y > 0, y, y * negative_slope), "LeakyReluBackward"), inplace)


def elu(x, alpha=1.0, inplace=False):
    y = _float_operand(x)
    return _maybe_inplace(x, _named(where(y > 0, y, y.expm1() * alpha), "EluBackward"), inplace)


def softplus(x, beta=1.0, threshold=20.0):
    """log(1 + exp(beta x)) / beta, x itself where beta x > threshold (PyTorch's linear region)."""
    x = _float_operand(x)
    return _named(where(x * beta > threshold, x, _softplus(x * beta) / beta), "SoftplusBackward")


def normalize(x, p=2.0, dim=1, eps=1e-12):
    """x divided by its p-norm along `dim`, the norm at least `eps`."""
    return x / norm(x, p, dim, True).clamp(min=eps)


def _at_least(n, eps):
    """n with its values raised to eps, its gradient n's own (PyTorch clamps the norms in place)."""
    return n + (n.clamp(min=eps) - n).detach()


def cosine_similarity(x1, x2, dim=1, eps=1e-8):
    """Cosine of the angle between x1 and x2 along `dim` (broadcast); each norm at least `eps`."""
    shape = broadcast_shapes(x1.shape, x2.shape)
    x1, x2 = _float_operand(x1).expand(*shape), _float_operand(x2).expand(*shape)
    n1, n2 = _at_least(norm(x1, 2, dim, True), eps), _at_least(norm(x2, 2, dim, True), eps)
    return _named(((x1 / n1) * (x2 / n2)).sum(dim), "SumBackward")


def log1p(x):
    """log(1 + x), accurate for small |x|: log(u) of u = 1 + x, less ((u - 1) - x) / u, the rounding
    of u (its first-order effect); the gradient 1/u. log(1 + x) alone lost the digits of x below u's
    last bit: log1p(8.2e-10) in float64 was 1.2e-7 off relatively, in float32 log1p(1e-8) was 0."""
    x = _float_operand(x)
    u = x + 1.0
    d = x.detach()
    ud = d + 1.0
    c = ((ud - 1.0) - d) / ud
    c = where(c == c, c, 0.0)                # u = 0 or inf: no correction (-inf, inf as log's)
    return _named(where(x == 0.0, x, u.log() - c), "Log1PBackward")      # (-0.0 stays -0.0)


def expm1(x):
    """exp(x) - 1, accurate for small |x|: Kahan's (u - 1) x / log(u) of u = exp(x) (x itself where
    u rounds to 1); the gradient u. exp(x) - 1 alone kept only the digits of u's last bit."""
    x = _float_operand(x)
    u = x.exp()
    d = x.detach()
    ud = d.exp()
    inside = (ud != 1.0) & (ud > 0.0) & (ud < math.inf)
    k = where(inside, (ud - 1.0) * d / where(inside, ud.log(), 1.0), where(ud == 1.0, d, ud - 1.0))
    c = where(inside | (ud == 1.0), k - (ud - 1.0), 0.0)
    return _named(where(x == 0.0, x, (u - 1.0) + c), "Expm1Backward")    # (-0.0 stays -0.0)
