"""tracegrad: eager tensors with reverse-mode autograd, and a tracing JIT for their graphs."""
from . import cuda, dtypes
from .modes import enable_grad, is_grad_enabled, no_grad, set_grad_enabled
from .broadcast import BroadcastError, BroadcastWarning, broadcast_shapes
from .device import device
from .dtypes import bool_ as bool
from .dtypes import float16, float32, float64, int8, int16, int32, int64, uint8
from .dtypes import DType as dtype
from .functional import GradcheckError, grad, gradcheck, jvp, value_and_grad, vjp
from .tensor import (Tensor, TraceError, arange, as_tensor, cat, empty, eye, from_numpy, full, full_like,
                     linspace, manual_seed, matmul, ones, ones_like, rand, randint, randn, randperm, stack,
                     tensor, where, zeros, zeros_like)
from . import nn, optim  # noqa: E402  (they build on the names above)
from . import ir  # noqa: E402
from .errors import CheckError  # noqa: E402
from .jit import compile, make_ir  # noqa: E402
from . import viz  # noqa: E402
from .viz import explain_broadcast  # noqa: E402

half, float, double, long, int, short = float16, float32, float64, int64, int32, int16

from ._version import __version__  # noqa: E402


def _fn(name):
    def f(x, *args, **kwargs):
        return getattr(x, name)(*args, **kwargs)
    f.__name__ = name
    f.__doc__ = f"tg.{name}(x, ...) is x.{name}(...)"
    return f


for _name in ("exp log sqrt rsqrt tanh sigmoid relu sin cos abs sign neg reciprocal square sum mean max min var std "
              "prod logsumexp argmax argmin reshape transpose permute squeeze unsqueeze flatten clamp maximum "
              "minimum softmax log_softmax expand broadcast_to log1p expm1").split():
    globals()[_name] = _fn(_name)
del _name
