"""Module, Parameter and the layers of SPEC §3."""
import math
from collections import OrderedDict

from .. import dtypes as D
from ..autograd import no_grad
from ..pytree import register_object
from ..tensor import Tensor, _rng, ones, tensor, zeros
from . import functional as F


def Parameter(t, requires_grad=True):
    """A leaf tensor that requires grad (tracegrad has no separate Parameter class)."""
    if not isinstance(t, Tensor):
        raise TypeError(f"Parameter expects a tensor, got {type(t).__name__}")
    return t.detach().requires_grad_(requires_grad)


class Module:
    """Base class: tensors that require grad and sub-modules set as attributes are registered."""

    def __init__(self):
        object.__setattr__(self, "_params", OrderedDict())
        object.__setattr__(self, "_modules", OrderedDict())
        object.__setattr__(self, "training", True)

    def __setattr__(self, name, value):
        if "_params" not in self.__dict__:
            raise RuntimeError(f"call super().__init__() in {type(self).__name__}.__init__ before assigning "
                               f"attributes")
        self._params.pop(name, None)
        self._modules.pop(name, None)
        if isinstance(value, Module):
            self._modules[name] = value
        elif isinstance(value, Tensor) and value.requires_grad and value.is_leaf:
            self._params[name] = value
        object.__setattr__(self, name, value)

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    def forward(self, *args):
        raise NotImplementedError(f"{type(self).__name__} must define forward()")

    def named_parameters(self, prefix=""):
        for name, p in self._params.items():
            yield prefix + name, p
        for name, m in self._modules.items():
            yield from m.named_parameters(prefix + name + ".")

    def parameters(self):
        return [p for _, p in self.named_parameters()]

    def named_modules(self, prefix=""):
        yield prefix, self
        for name, m in self._modules.items():
            yield from m.named_modules(prefix + ("." if prefix else "") + name)

    def children(self):
        return list(self._modules.values())

    def zero_grad(self, set_to_none=True):
        for p in self.parameters():
            if set_to_none or p.grad is None:
                p.grad = None
            else:
                p.grad.zero_()

    def train(self, mode=True):
        for _, m in self.named_modules():
            object.__setattr__(m, "training", mode)
        return self

    def eval(self):
        return self.train(False)

    def state_dict(self):
        return OrderedDict((n, p.detach().clone()) for n, p in self.named_parameters())

    def load_state_dict(self, state):
        own = dict(self.named_parameters())
        missing, unexpected = set(own) - set(state), set(state) - set(own)
        if missing or unexpected:
            raise RuntimeError(f"Error(s) in loading state_dict for {type(self).__name__}: missing keys "
                               f"{sorted(missing)}, unexpected keys {sorted(unexpected)}")
        with no_grad():
            for n, p in own.items():
                v = state[n] if isinstance(state[n], Tensor) else tensor(state[n])
                if v.shape != p.shape:
                    raise RuntimeError(f"size mismatch for {n}: copying a param with shape {v.shape}, "
                                       f"the shape in current model is {p.shape}")
                p.copy_(v)

    def to(self, *args, **kwargs):
        """Convert parameters (and their grads) in place, keeping the same tensor objects, as PyTorch
        does, so optimizers built before the conversion still update the module."""
        with no_grad():
            for p in self.parameters():
                p.data = p.detach().to(*args, **kwargs)
                if p.grad is not None:
                    p.grad = p.grad.to(*args, **kwargs)
        return self

    def cuda(self, device="cuda"):
        return self.to(device)

    def cpu(self):
        return self.to("cpu")

    def float(self):
        return self.to(D.float32)

    def double(self):
        return self.to(D.float64)

    def __repr__(self):
        lines = [f"({n}): {m!r}".replace("\n", "\n  ") for n, m in self._modules.items()]
        body = "".join(f"\n  {line}" for line in lines)
        return f"{type(self).__name__}({self.extra_repr()}{body}{chr(10) if body else ''})"

    def extra_repr(self):
        return ""


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


def _module_state(m):
    """What a module holds, for tg.compile: each submodule, and each module's attributes (training
    flag, parameters, tensors, numbers and strings), named by their path."""
    for prefix, mod in m.named_modules():
        base = prefix + "." if prefix else ""
        if prefix:
            yield prefix, mod
        for k, v in mod.__dict__.items():
            if k not in ("_params", "_modules") and not isinstance(v, Module):
                yield base + k, v


register_object(Module, _module_state, watch=lambda m: [mod.__dict__ for _, mod in m.named_modules()])
