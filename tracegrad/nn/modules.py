"""The layers of SPEC §3 (Linear, Sequential, activations, LayerNorm); Module is in module.py."""
import math
from .. import dtypes as D
from ..tensor import _rng, ones, tensor, zeros
from . import functional as F
from .module import Module, Parameter  # noqa: F401  (layers import them from here)


def _uniform(shape, bound, dtype, device):
    dtype = D.to_dtype(dtype) if dtype is not None else D.default_float
    arr = _rng[0].uniform(-bound, bound, shape)
    return tensor(arr, dtype=dtype, device=device, requires_grad=True)


class Linear(Module):
    """y = x @ weight.T + bias, PyTorch's init: uniform in ±1/sqrt(in_features)."""

    def __init__(self, in_features, out_features, bias=True, dtype=None, device=None):
        super().__init__()
        for v in (in_features, out_features):
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise ValueError(f"Linear: feature sizes must be non-negative ints, got {v!r}")
        self.in_features, self.out_features = in_features, out_features
        bound = 1.0 / math.sqrt(in_features) if in_features else 0.0
        self.weight = _uniform((out_features, in_features), bound, dtype, device)
        self.bias = _uniform((out_features,), bound, dtype, device) if bias else None

    def forward(self, x):
        return F.linear(x, self.weight, self.bias)

    def extra_repr(self):
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class Sequential(Module):
    def __init__(self, *modules):
        super().__init__()
        for i, m in enumerate(modules):
            if not isinstance(m, Module):
                raise TypeError(f"Sequential: argument {i} is a {type(m).__name__}, not a Module")
            setattr(self, str(i), m)

    def forward(self, x):
        for m in self._modules.values():
            x = m(x)
        return x

    def __getitem__(self, i):
        return list(self._modules.values())[i]

    def __len__(self):
        return len(self._modules)


class ReLU(Module):
    def forward(self, x):
        return x.relu()


class Tanh(Module):
    def forward(self, x):
        return x.tanh()


class Sigmoid(Module):
    def forward(self, x):
        return x.sigmoid()


class SiLU(Module):
    def __init__(self, inplace=False):
        super().__init__()
        self.inplace = inplace

    def forward(self, x):
        return F.silu(x, self.inplace)


class LeakyReLU(Module):
    def __init__(self, negative_slope=0.01, inplace=False):
        super().__init__()
        self.negative_slope, self.inplace = negative_slope, inplace

    def forward(self, x):
        return F.leaky_relu(x, self.negative_slope, self.inplace)


class ELU(Module):
    def __init__(self, alpha=1.0, inplace=False):
        super().__init__()
        self.alpha, self.inplace = alpha, inplace

    def forward(self, x):
        return F.elu(x, self.alpha, self.inplace)


class Softplus(Module):
    def __init__(self, beta=1.0, threshold=20.0):
        super().__init__()
        self.beta, self.threshold = beta, threshold

    def forward(self, x):
        return F.softplus(x, self.beta, self.threshold)


class GELU(Module):
    def __init__(self, approximate="none"):
        super().__init__()
        self.approximate = approximate

    def forward(self, x):
        return F.gelu(x, self.approximate)


def _implicit_softmax_dim(name, ndim):
    """PyTorch's legacy axis for Softmax(dim=None): 0 for 0-, 1- and 3-D inputs, else 1 (it warns)."""
    import warnings
    warnings.warn(f"Implicit dimension choice for {name} has been deprecated. Change the call to include dim=X "
                  f"as an argument.", UserWarning, stacklevel=3)
    return 0 if ndim in (0, 1, 3) else 1


class Softmax(Module):
    def __init__(self, dim=None):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return x.softmax(self.dim if self.dim is not None else _implicit_softmax_dim("softmax", x.ndim))

    def extra_repr(self):
        return f"dim={self.dim}"


class LogSoftmax(Softmax):
    def forward(self, x):
        return x.log_softmax(self.dim if self.dim is not None else _implicit_softmax_dim("log_softmax", x.ndim))


class Identity(Module):
    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, x):
        return x


class LayerNorm(Module):
    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, dtype=None, device=None):
        super().__init__()
        self.normalized_shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        self.eps = eps
        self.weight = ones(self.normalized_shape, dtype=dtype, device=device, requires_grad=True) \
            if elementwise_affine else None
        self.bias = zeros(self.normalized_shape, dtype=dtype, device=device, requires_grad=True) \
            if elementwise_affine else None

    def forward(self, x):
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return f"{self.normalized_shape}, eps={self.eps}"
