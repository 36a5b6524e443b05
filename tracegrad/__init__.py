"""tracegrad: eager tensors with reverse-mode autograd, and a tracing JIT for their graphs."""
from . import backends, cuda, dtypes
from .modes import enable_grad, is_grad_enabled, no_grad, set_grad_enabled
from .broadcast import BroadcastError, BroadcastWarning, broadcast_shapes
from .device import device, get_default_device, set_default_device
from .dtypes import bool_ as bool
from .dtypes import float16, float32, float64, int8, int16, int32, int64, uint8
from .dtypes import DType as dtype
from .dtypes import get_default_dtype, set_default_dtype
from .functional import GradcheckError, grad, gradcheck, jvp, value_and_grad, vjp
from .tensor import (Tensor, TraceError, arange, as_tensor, cat, empty, empty_like, eye, from_numpy, full,
                     full_like, linspace, manual_seed, ones, ones_like, rand, rand_like, randint, randn, randn_like,
                     randperm, stack, tensor, zeros, zeros_like)
from .function_forms import *  # noqa: F401,F403  (tg.add, tg.exp, tg.sum, ... with out=)
from .size import Size  # noqa: E402
from .tensor.typed import (BoolTensor, ByteTensor, CharTensor, DoubleTensor, FloatTensor, HalfTensor,  # noqa: E402
                           IntTensor, LongTensor, ShortTensor)
from . import return_types  # noqa: E402
from . import nn, optim  # noqa: E402  (they build on the names above)
from . import ir  # noqa: E402
from .errors import CheckError  # noqa: E402
from .jit import compile, make_ir, mark_dynamic, mark_static  # noqa: E402
from . import viz  # noqa: E402
from .viz import explain_broadcast  # noqa: E402
from .generator import Generator  # noqa: E402
from .serialization import load, save  # noqa: E402
from . import utils  # noqa: E402  (tg.utils.data)

half, float, double, long, int, short = float16, float32, float64, int64, int32, int16

from ._version import __version__  # noqa: E402
from .function_forms import trace  # noqa: E402,F811  (torch.trace; importing the tracer bound the module's name)
