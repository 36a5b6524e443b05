"""Tensor: strided NumPy storage, dtype/device, dispatch to the primitive table, autograd hooks.

Every operation reaches the primitive table through `dispatch`: it checks devices, applies the
primitive's type rule (broadcasting lives there), runs the NumPy implementation (or, while a
function is being traced, asks the tracer to record the op), records an autograd node, and
propagates forward-mode tangents. Composite operations are tensor methods built from primitives.
"""
import builtins
import math
import numbers

import numpy as np

from . import dtypes as D
from . import ops
from .autograd import Hooks, Node, _Mode, is_grad_enabled, no_grad, run_backward
from .broadcast import BroadcastError
from .device import CPU, mismatch_error, to_device
from .device import device as Device
from .ops import PRIMS, normalize_axes
from .printing import format_tensor

_P = PRIMS
_SCALARS = (numbers.Number, np.bool_, np.number)


class TraceError(RuntimeError):
    """Python control flow or data access that depends on traced tensor values."""


class _ArgError(ValueError, RuntimeError):
    """A bad argument value (a negative size, an unknown mode): RuntimeError as PyTorch raises, ValueError too."""


def dispatch(p, inputs, attrs):
    """Apply primitive `p` to tensors `inputs`: the single path of every operation."""
    dev = inputs[0]._device if inputs else CPU
    for t in inputs:
        if t._device is not dev and t._device != dev:
            dev = _common_device(inputs)
            break
    shape, dtype = p.rule([t._shape for t in inputs], [t._dtype for t in inputs], **attrs)
    tracer = Hooks.tracer
    if tracer is not None:
        inputs = tracer.substitute(inputs)
        out = tracer.emit(p, inputs, attrs, shape, dtype, dev)
        if p.kind == "movement" and p.name != "unslice":   # traced views, so in-place on them is refused
            out._base = inputs[0]._base if inputs[0]._base is not None else inputs[0]
    else:
        arr = p.impl(*[t._data for t in inputs], **attrs)
        if type(arr) is not np.ndarray or arr.dtype is not dtype.np:
            arr = np.asarray(arr).astype(dtype.np, copy=False)
        out = Tensor._wrap(arr, dtype, dev)
        if p.kind == "movement" and p.name != "unslice" and arr.base is not None \
                and np.may_share_memory(arr, inputs[0]._data):
            out._ver, out._base = inputs[0]._ver, inputs[0]._base if inputs[0]._base is not None else inputs[0]
    if p.differentiable and _Mode.grad:
        for t in inputs:
            if t._requires_grad:
                out._requires_grad = True
                out.grad_fn = node = Node(p, inputs, attrs, out)
                if tracer is not None:
                    node.loc = out._ir.node.loc
                break
    if Hooks.jvp_depth and any(t._tangent is not None for t in inputs):
        out._tangent = _jvp(p, inputs, attrs, out)
    return out


def _bind(p, inputs, attrs):
    """`ops.bind`: VJP/JVP rules may pass Python scalars (`where(c, g, 0.0)`); lift them to tensors
    of the other operands' dtype (for `where`, of the branches, not of the bool condition)."""
    if any(not isinstance(t, Tensor) for t in inputs):
        if p.name == "where":
            inputs = (inputs[0], *_operands(*inputs[1:]))
        else:
            inputs = tuple(_operands(*inputs))
    return dispatch(p, inputs, attrs)


ops._dispatch = _bind


def _common_device(inputs):
    """The device of a mixed-device op: 0-d cpu tensors (lifted scalars) go anywhere."""
    real = [t for t in inputs if not (t._device == CPU and t._shape == ())] or list(inputs)
    dev = real[0]._device
    for t in real[1:]:
        if t._device != dev:
            raise mismatch_error(dev, t._device)
    return dev


class _JvpCtx:
    """What a JVP rule sees: the same interface as an autograd node."""
    __slots__ = ("prim_name", "attrs", "shapes", "dtypes", "xs", "out", "out_shape")

    def __init__(self, p, inputs, attrs, out):
        self.prim_name, self.attrs, self.xs, self.out, self.out_shape = p.name, attrs, inputs, out, out._shape
        self.shapes, self.dtypes = [t._shape for t in inputs], [t._dtype for t in inputs]

    def x(self, i):
        return self.xs[i]


def _jvp(p, inputs, attrs, out):
    if not p.differentiable or not out.dtype.is_floating_point:
        return None
    ts = [t._tangent for t in inputs]
    saved = [t._tangent for t in inputs]
    plain = [_untangled(t) for t in inputs]
    try:
        t = p.jvp(_JvpCtx(p, plain, attrs, _untangled(out)), ts)
    finally:
        for x, s in zip(inputs, saved):
            x._tangent = s
    if t is not None and t.shape != out.shape:
        t = t.expand(*out.shape)
    return t


def _untangled(t):
    """`t` without its tangent, so a JVP rule's own ops do not recurse into forward mode."""
    if t._tangent is None:
        return t
    u = Tensor._wrap(t._data, t._dtype, t._device) if t._data is not None else t.detach()
    u._ir = t._ir
    return u


def _scalar_tensor(v, dtype, dev):
    tracer = Hooks.tracer
    if tracer is not None:
        return tracer.constant(v, dtype, dev)
    return Tensor._wrap(np.array(v, dtype=dtype.np), dtype, dev)


def _operands(*xs, device=None):
    """Promote a mix of tensors and Python scalars to tensors of one dtype (PyTorch's rules).
    Scalars go to the tensors' device, or to `device` (default cpu) when all operands are scalars."""
    dims, zero, scalars, dev = [], [], [], None
    for x in xs:
        if isinstance(x, Tensor):
            (dims if x._shape else zero).append(x._dtype)
            if dev is None or dev == CPU and x._shape:
                dev = x._device
        elif isinstance(x, _SCALARS):
            scalars.append(D.scalar_dtype(x))
        else:
            raise TypeError(f"unsupported operand type {type(x).__name__!r}; expected a tensor or a Python number")
    dtype = D.result_type(dims, zero, scalars)
    out = []
    for x in xs:
        if isinstance(x, Tensor):
            out.append(x if x._dtype is dtype else x.to(dtype))
        else:
            out.append(_scalar_tensor(x, dtype, dev if dev is not None else device or CPU))
    return out


_KIND = {bool: 0, int: 1, float: 2}   # a Python scalar's dtype kind (DType.kind)


def _promote(a, b, device=None):
    """`_operands(a, b)`, with shortcuts for the common cases: two tensors of one dtype, and a tensor
    with a Python scalar of a kind no higher than the tensor's (the scalar takes the tensor's dtype)."""
    ta, tb = isinstance(a, Tensor), isinstance(b, Tensor)
    if ta and tb and a._dtype is b._dtype:
        return a, b
    if ta and _KIND.get(type(b), 3) <= a._dtype.kind:
        return a, _scalar_tensor(b, a._dtype, a._device)
    if tb and _KIND.get(type(a), 3) <= b._dtype.kind:
        return _scalar_tensor(a, b._dtype, b._device), b
    return _operands(a, b, device=device)


def _binary(name, a, b):
    a, b = _promote(a, b)
    return dispatch(_P[name], (a, b), {})


def _named(out, name, *inputs):
    """Label the node that produced `out` with PyTorch's name for the whole (composite) operation,
    e.g. mean = sum / n shows `grad_fn=<MeanBackward>`. Nothing to label when `out` is an input."""
    g = out.grad_fn
    if type(g) is Node and all(out is not x for x in inputs):
        g.label = name
    return out


def _float_operand(x):
    """Ops such as exp promote integer tensors to the default float dtype, as PyTorch does."""
    return x if x._dtype.is_floating_point else x.to(D.default_float)


def _axis_kw(axis, dim, name="axis"):
    if dim is not None:
        if axis is not None:
            raise TypeError("give either axis= or dim=, not both")
        return dim
    return axis


def _keep_kw(keepdims, keepdim):
    return bool(keepdim) if keepdim is not None else bool(keepdims)


def _shape_arg(args, what="shape"):
    """Accept f(2, 3), f((2, 3)) and f([2, 3]); validate the sizes."""
    if len(args) == 1 and isinstance(args[0], (tuple, list)):
        args = tuple(args[0])
    out = []
    for s in args:
        if isinstance(s, Tensor) and s.numel() == 1 and not s.dtype.is_floating_point:
            s = int(s.item())
        if not isinstance(s, (int, np.integer)) or isinstance(s, bool):
            raise TypeError(f"{what} must be a sequence of ints, got {args!r}")
        out.append(int(s))
    return tuple(out)


class Tensor:
    """An n-dimensional array with autograd, like torch.Tensor."""

    __slots__ = ("_data", "_shape", "_dtype", "_device", "_ver", "_base", "_requires_grad", "_grad", "grad_fn",
                 "_oi", "_ir", "_tangent", "_retains_grad", "__weakref__")
    __array_priority__ = 1000

    def __init__(self, *args, **kwargs):
        raise TypeError("create tensors with tg.tensor(data), tg.zeros(...), tg.from_numpy(array), ...")

    @classmethod
    def _wrap(cls, arr, dtype, dev=CPU):
        t = object.__new__(cls)
        t._data, t._shape, t._dtype, t._device, t._ver, t._base = \
            arr, arr.shape if arr is not None else None, dtype, dev, [0], None
        t._requires_grad, t._grad, t.grad_fn, t._oi, t._ir, t._tangent, t._retains_grad = \
            False, None, None, 0, None, None, False
        return t

    @classmethod
    def _symbolic(cls, shape, dtype, dev, ir):
        """A tensor without data that stands for an IR value (used by the tracer)."""
        t = cls._wrap(None, dtype, dev)
        t._shape, t._ir = tuple(shape), ir
        return t

    # ------------------------------------------------------------ attributes
    shape = property(lambda self: self._shape)
    dtype = property(lambda self: self._dtype)
    device = property(lambda self: self._device)
    ndim = property(lambda self: len(self._shape))
    is_leaf = property(lambda self: self.grad_fn is None)
    is_cuda = property(lambda self: self._device.type == "cuda")
    T = property(lambda self: self.permute(*range(self.ndim - 1, -1, -1)))
    mT = property(lambda self: self.transpose(-2, -1))
    itemsize = property(lambda self: self._dtype.itemsize)
    nbytes = property(lambda self: self.numel() * self._dtype.itemsize)

    _version = property(lambda self: self._ver[0], doc="the in-place version counter, as PyTorch's")

    def dim(self):
        return len(self._shape)

    def numel(self):
        return math.prod(self._shape)

    def size(self, dim=None):
        return self._shape if dim is None else self._shape[ops._norm_axis(dim, self.ndim)]

    def __len__(self):
        if not self._shape:
            raise TypeError("len() of a 0-d tensor")
        return self._shape[0]

    def element_size(self):
        return self._dtype.itemsize

    def _concrete(self, what):
        if self._data is None:
            raise _trace_error(what)
        return self._data

    def stride(self, dim=None):
        arr = self._concrete("stride()")
        if arr.flags.c_contiguous:  # PyTorch's strides (NumPy's differ for size-0 and size-1 dims)
            s, acc = [], 1
            for n in reversed(self._shape):
                s.insert(0, acc)
                acc *= builtins.max(n, 1)
            s = tuple(s)
        else:
            s = tuple(b // self.itemsize for b in arr.strides)
        return s if dim is None else s[ops._norm_axis(dim, self.ndim)]

    def is_contiguous(self):
        return bool(self._concrete("is_contiguous()").flags.c_contiguous)

    def data_ptr(self):
        return self._concrete("data_ptr()").ctypes.data

    def storage_offset(self):
        arr = self._concrete("storage_offset()")
        root = arr
        while isinstance(root.base, np.ndarray):
            root = root.base
        return (arr.ctypes.data - root.ctypes.data) // self.itemsize

    @property
    def data(self):
        t = Tensor._wrap(self._data, self._dtype, self._device)
        t._shape, t._ir = self._shape, self._ir
        return t

    @data.setter
    def data(self, value):
        if not isinstance(value, Tensor):
            raise TypeError(f"data must be a tensor, not {type(value).__name__}")
        self._data, self._shape, self._dtype, self._device = value._data, value._shape, value._dtype, value._device
        self._ir = value._ir

    @property
    def requires_grad(self):
        return self._requires_grad

    @requires_grad.setter
    def requires_grad(self, value):
        if value and self._dtype is not None and not self._dtype.is_floating_point:
            raise RuntimeError(f"only Tensors of floating point dtype can require gradients, got {self._dtype}")
        if self.grad_fn is not None and not value:
            raise RuntimeError("you can only change requires_grad flags of leaf variables. If you want to use a "
                               "computed variable in a subgraph that doesn't require differentiation use "
                               "var_no_grad = var.detach().")
        self._requires_grad = value

    @property
    def grad(self):
        if Hooks.tracer is not None:
            Hooks.tracer.grad_access(self)
        return self._grad

    @grad.setter
    def grad(self, value):
        if value is not None:
            if not isinstance(value, Tensor):
                raise TypeError(f"assigned grad expected to be a Tensor or None but got {type(value).__name__}")
            if value._shape != self._shape:
                raise RuntimeError(f"assigned grad has data of a different size: {value._shape} vs {self._shape}")
        if Hooks.tracer is not None:
            Hooks.tracer.grad_access(self)
        self._grad = value

    def requires_grad_(self, requires_grad=True):
        self.requires_grad = bool(requires_grad)
        return self

    def retain_grad(self):
        self._retains_grad = True
        return self

    def detach(self):
        if Hooks.tracer is not None and self._data is not None:
            return Hooks.tracer.lift(self).detach()
        t = Tensor._wrap(self._data, self._dtype, self._device)
        t._shape, t._ver, t._base, t._ir = self._shape, self._ver, self._base, self._ir
        return t

    def detach_(self):
        self.grad_fn, self.requires_grad = None, False
        return self

    # ------------------------------------------------------------ out to Python / NumPy
    def numpy(self):
        if self.requires_grad:
            raise RuntimeError("Can't call numpy() on Tensor that requires grad. Use tensor.detach().numpy() instead.")
        if self._device != CPU:
            raise TypeError(f"can't convert {self._device} tensor to numpy. Use Tensor.cpu() to copy the tensor "
                            f"to host memory first.")
        return self._concrete("numpy()")

    def __array__(self, dtype=None, copy=None):
        arr = self._concrete("conversion to a NumPy array")
        return arr if dtype is None else arr.astype(dtype)

    def item(self):
        arr = self._concrete("item()")
        if arr.size != 1:
            raise RuntimeError(f"a Tensor with {arr.size} elements cannot be converted to Scalar")
        return arr.reshape(()).item()

    def tolist(self):
        return self._concrete("tolist()").tolist()

    def __float__(self):
        return float(self._scalar_value("float()"))

    def __int__(self):
        return int(self._scalar_value("int()"))

    def __index__(self):
        if self._dtype.is_floating_point or self._dtype is D.bool_:
            raise TypeError("only integer tensors of a single element can be converted to an index")
        return int(self._scalar_value("an index"))

    def __bool__(self):
        return bool(self._scalar_value("bool()"))

    def _scalar_value(self, what):
        arr = self._concrete(what)
        if arr.size != 1:
            raise RuntimeError(f"a Tensor with {arr.size} elements cannot be converted to Scalar"
                               if what != "bool()" else
                               "Boolean value of Tensor with more than one value is ambiguous")
        return arr.reshape(()).item()

    def __repr__(self):
        if self._data is None:
            return f"Tensor(traced, shape={self._shape}, dtype={self._dtype})"
        suffixes = []
        if self._device != CPU:
            suffixes.append(f"device='{self._device}'")
        if self.numel() == 0:
            if self.ndim != 1:
                suffixes.append(f"size={self._shape}")
            if self._dtype is not D.float32:
                suffixes.append(f"dtype={self._dtype}")
        elif self._dtype not in (D.float32, D.int64, D.bool_):
            suffixes.append(f"dtype={self._dtype}")
        if self.grad_fn is not None:
            suffixes.append(f"grad_fn=<{self.grad_fn.name()}>")
        elif self.requires_grad:
            suffixes.append("requires_grad=True")
        return format_tensor(self._data, suffixes)

    __str__ = __repr__

    def __format__(self, spec):
        if self._data is not None and self.numel() == 1 and spec:
            return format(self.item(), spec)
        return repr(self) if not spec else format(repr(self), spec)

    def __hash__(self):
        return id(self)

    def __iter__(self):
        if not self._shape:
            raise TypeError("iteration over a 0-d tensor")
        return (self[i] for i in range(self._shape[0]))

    def __reduce__(self):
        return (_rebuild, (np.array(self._concrete("pickling")), self.requires_grad))

    # ------------------------------------------------------------ conversions
    def to(self, *args, dtype=None, device=None, copy=False):
        for a in args:
            if isinstance(a, (str, Device)):
                device = a
            elif isinstance(a, Tensor):
                dtype, device = a._dtype, a._device
            else:
                dtype = a
        out = self
        if dtype is not None:
            dtype = D.to_dtype(dtype)
            if dtype is not self._dtype:
                out = _named(dispatch(_P["cast"], (self,), {"dtype": dtype}), "ToCopyBackward")
        if device is not None:
            dev = to_device(device)
            if dev != out._device:
                out = _to_device(out, dev)
        if copy and out is self:
            out = self.clone()
        return out

    def float(self):
        return self.to(D.float32)

    def double(self):
        return self.to(D.float64)

    def half(self):
        return self.to(D.float16)

    def long(self):
        return self.to(D.int64)

    def int(self):
        return self.to(D.int32)

    def bool(self):
        return self.to(D.bool_)

    def type_as(self, other):
        return self.to(other._dtype)

    def cpu(self):
        return self.to(CPU)

    def cuda(self, device="cuda"):
        return self.to(device)

    def clone(self):
        return _named(dispatch(_P["copy"], (self,), {}), "CloneBackward")

    def contiguous(self):
        if self._data is not None and self._data.flags.c_contiguous:
            return self
        out = self.clone()  # clone keeps the layout (as PyTorch's does); contiguous() must be row-major
        if out._data is not None and not out._data.flags.c_contiguous:
            out._data = np.ascontiguousarray(out._data)
        return out

    # ------------------------------------------------------------ arithmetic
    def __add__(self, o): return _binary("add", self, o)
    def __radd__(self, o): return _binary("add", o, self)
    def __sub__(self, o): return _binary("sub", self, o)
    def __mul__(self, o): return _binary("mul", self, o)
    def __rmul__(self, o): return _binary("mul", o, self)

    def __truediv__(self, o):
        a, b = _promote(self, o)
        if not a._dtype.is_floating_point:
            a, b = a.to(D.default_float), b.to(D.default_float)
        return dispatch(_P["div"], (a, b), {})

    def __rtruediv__(self, o):
        a, b = _promote(o, self)
        if not a._dtype.is_floating_point:
            a, b = a.to(D.default_float), b.to(D.default_float)
        return dispatch(_P["div"], (a, b), {})

    def __floordiv__(self, o):
        return dispatch(_P["floordiv"], _promote(self, o), {})

    def __rfloordiv__(self, o):
        return _promote(o, self)[0] // self

    def __mod__(self, o):
        """Python's (and PyTorch's) remainder: the result takes the divisor's sign."""
        return dispatch(_P["remainder"], _promote(self, o), {})

    def __rmod__(self, o):
        return _promote(o, self)[0] % self

    def __pow__(self, o): return _binary("pow", self, o)
    def __rpow__(self, o): return _binary("pow", o, self)
    def __matmul__(self, o): return matmul(self, o)
    def __rmatmul__(self, o): return matmul(o, self)

    def __neg__(self):
        if self._dtype is D.bool_:
            raise RuntimeError("Negation, the `-` operator, on a bool tensor is not supported. If you are trying "
                               "to invert a mask, use the `~` or `logical_not()` operator instead.")
        return dispatch(_P["neg"], (self,), {})

    def __pos__(self):
        return self

    def __abs__(self):
        return self.abs()

    def __lt__(self, o): return _binary("lt", self, o)
    def __le__(self, o): return _binary("le", self, o)
    def __gt__(self, o): return _binary("gt", self, o)
    def __ge__(self, o): return _binary("ge", self, o)
    def __eq__(self, o): return _binary("eq", self, o) if isinstance(o, (Tensor,) + _SCALARS) else NotImplemented
    def __ne__(self, o): return _binary("ne", self, o) if isinstance(o, (Tensor,) + _SCALARS) else NotImplemented

    def __and__(self, o): return _binary("logical_and", self, o)
    def __or__(self, o): return _binary("logical_or", self, o)

    def __invert__(self):
        if self._dtype is not D.bool_:
            raise TypeError(f"~ is defined for bool tensors only, got {self._dtype}")
        return dispatch(_P["logical_not"], (self,), {})

    def __rsub__(self, o): return _named(_binary("sub", o, self), "RsubBackward")

    def add(self, o, alpha=1):
        return self + (o * alpha if alpha != 1 else o)

    def sub(self, o, alpha=1):
        return self - (o * alpha if alpha != 1 else o)

    def mul(self, o): return self * o
    def div(self, o): return self / o
    def pow(self, o): return self ** o
    def matmul(self, o): return matmul(self, o)
    def maximum(self, o): return _binary("maximum", self, o)
    def minimum(self, o): return _binary("minimum", self, o)

    def clamp(self, min=None, max=None):
        """Selects rather than takes maximum/minimum: the gradient passes where min <= x <= max,
        boundaries included, as in PyTorch (maximum would split it at a tie)."""
        if min is None and max is None:
            raise RuntimeError("torch.clamp: At least one of 'min' or 'max' must not be None")
        out = self
        if min is not None:
            out = where(out < min, min, out)
        if max is not None:
            out = where(out > max, max, out)
        return _named(out, "ClampBackward", self)

    clip = clamp

    def where(self, condition, other):
        return where(condition, self, other)

    # ------------------------------------------------------------ unary
    def _unary(self, name):
        return dispatch(_P[name], (_float_operand(self),), {})

    def exp(self): return self._unary("exp")
    def log(self): return self._unary("log")
    def sqrt(self): return self._unary("sqrt")
    def tanh(self): return self._unary("tanh")
    def sigmoid(self): return self._unary("sigmoid")
    def sin(self): return self._unary("sin")
    def cos(self): return self._unary("cos")
    def neg(self): return -self
    def relu(self): return dispatch(_P["relu"], (self,), {})
    def abs(self): return dispatch(_P["abs"], (self,), {})
    def sign(self): return dispatch(_P["sign"], (self,), {})
    def rsqrt(self): return _named(1.0 / self.sqrt(), "RsqrtBackward")
    def reciprocal(self): return _named(1.0 / self, "ReciprocalBackward")
    def square(self): return _named(self * self, "PowBackward")
    def log1p(self): return (self + 1.0).log()
    def expm1(self): return self.exp() - 1.0

    def floor(self):
        return dispatch(_P["floor"], (self,), {})

    # ------------------------------------------------------------ reductions
    def _reduce(self, name, axis, keepdims):
        return dispatch(_P[name], (self,), {"axis": normalize_axes(axis, self.ndim), "keepdims": keepdims})

    def sum(self, axis=None, keepdims=False, *, dim=None, keepdim=None, dtype=None):
        x = self if dtype is None else self.to(dtype)
        if x._dtype in (D.bool_, D.int32):
            x = x.to(D.int64)
        return x._reduce("sum", _axis_kw(axis, dim), _keep_kw(keepdims, keepdim))

    def mean(self, axis=None, keepdims=False, *, dim=None, keepdim=None, dtype=None):
        x = self if dtype is None else self.to(dtype)
        if not x._dtype.is_floating_point:
            raise RuntimeError(f"mean(): could not infer output dtype. Input dtype must be either a floating point "
                               f"or complex dtype. Got: {x._dtype}")
        axis = normalize_axes(_axis_kw(axis, dim), x.ndim)
        n = math.prod(x._shape[a] for a in axis)
        return _named(x._reduce("sum", axis, _keep_kw(keepdims, keepdim)) / (n if n else float("nan")),
                      "MeanBackward")

    def max(self, axis=None, keepdims=False, *, dim=None, keepdim=None):
        if isinstance(axis, Tensor):
            return self.maximum(axis)
        return self._reduce("max", _axis_kw(axis, dim), _keep_kw(keepdims, keepdim))

    def min(self, axis=None, keepdims=False, *, dim=None, keepdim=None):
        if isinstance(axis, Tensor):
            return self.minimum(axis)
        return self._reduce("min", _axis_kw(axis, dim), _keep_kw(keepdims, keepdim))

    def amax(self, axis=None, keepdims=False, *, dim=None, keepdim=None):
        return _named(self.max(axis, keepdims, dim=dim, keepdim=keepdim), "AmaxBackward", self)

    def amin(self, axis=None, keepdims=False, *, dim=None, keepdim=None):
        return _named(self.min(axis, keepdims, dim=dim, keepdim=keepdim), "AminBackward", self)

    def prod(self, axis=None, keepdims=False, *, dim=None, keepdim=None):
        if self._dtype in (D.bool_, D.int32):   # as sum: small integer types multiply in int64
            return self.to(D.int64).prod(axis, keepdims, dim=dim, keepdim=keepdim)
        return self._reduce("prod", _axis_kw(axis, dim), _keep_kw(keepdims, keepdim))

    def var(self, axis=None, keepdims=False, unbiased=False, *, dim=None, keepdim=None, correction=None):
        x = _float_operand(self)
        axis = normalize_axes(_axis_kw(axis, dim), x.ndim)
        keep = _keep_kw(keepdims, keepdim)
        n = math.prod(x._shape[a] for a in axis)
        ddof = correction if correction is not None else int(bool(unbiased))
        d = x - x.mean(axis, keepdims=True)
        return _named((d * d)._reduce("sum", axis, keep) / (float(n - ddof) if n - ddof > 0 else float("nan")),
                      "VarBackward")

    def std(self, axis=None, keepdims=False, unbiased=False, *, dim=None, keepdim=None, correction=None):
        return _named(self.var(axis, keepdims, unbiased, dim=dim, keepdim=keepdim, correction=correction).sqrt(),
                      "StdBackward")

    def logsumexp(self, axis=None, keepdims=False, *, dim=None, keepdim=None):
        x = _float_operand(self)
        axis = normalize_axes(_axis_kw(axis, dim), x.ndim)
        m = x._reduce("max", axis, True).detach()
        m = where(m.abs() == float("inf"), 0.0, m)
        out = (x - m).exp()._reduce("sum", axis, True).log() + m
        out = out if _keep_kw(keepdims, keepdim) else out.reshape(ops._reduce_shape(x._shape, axis, False))
        return _named(out, "LogsumexpBackward")

    def softmax(self, axis=None, *, dim=None):
        axis = _axis_kw(axis, dim)
        axis = -1 if axis is None else axis
        x = _float_operand(self)
        e = (x - x._reduce("max", axis, True).detach()).exp()
        return _named(e / e.sum(axis, keepdims=True), "SoftmaxBackward")

    def log_softmax(self, axis=None, *, dim=None):
        axis = _axis_kw(axis, dim)
        axis = -1 if axis is None else axis
        x = _float_operand(self)
        axis = normalize_axes(axis, x.ndim)
        m = x._reduce("max", axis, True).detach()    # shift first, as PyTorch: x - m is exact
        d = x - where(m.abs() == float("inf"), 0.0, m)
        return _named(d - d.exp()._reduce("sum", axis, True).log(), "LogSoftmaxBackward")

    def _arg(self, name, axis, keepdims):
        if axis is not None:
            axis = ops._norm_axis(axis, self.ndim) if self.ndim else None
        return dispatch(_P[name], (self,), {"axis": axis, "keepdims": keepdims})

    def argmax(self, axis=None, keepdims=False, *, dim=None, keepdim=None):
        return self._arg("argmax", _axis_kw(axis, dim), _keep_kw(keepdims, keepdim))

    def argmin(self, axis=None, keepdims=False, *, dim=None, keepdim=None):
        return self._arg("argmin", _axis_kw(axis, dim), _keep_kw(keepdims, keepdim))

    def all(self):
        return (self != 0).to(D.int64).sum() == self.numel()

    def any(self):
        return (self != 0).to(D.int64).sum() > 0

    # ------------------------------------------------------------ shapes and views
    def reshape(self, *shape):
        shape = _infer_shape(_shape_arg(shape), self.numel())
        if shape == self._shape:
            return self
        out = dispatch(_P["reshape"], (self,), {"shape": shape})
        return _named(out, "ViewBackward" if self._data is None or self._data.flags.c_contiguous
                      else "UnsafeViewBackward")

    def view(self, *shape):
        if len(shape) == 1 and isinstance(shape[0], (D.DType, type)) or shape and isinstance(shape[0], str):
            raise TypeError("view(dtype) is not supported; use .to(dtype)")
        shape = _infer_shape(_shape_arg(shape), self.numel())
        if self._data is not None:
            try:
                np.reshape(self._data, shape, copy=False)
            except ValueError:
                raise RuntimeError(
                    f"view size is not compatible with input tensor's size and stride (shape {self._shape}, "
                    f"stride {self.stride()}): at least one dimension spans across two contiguous subspaces. "
                    f"Use .reshape(...) instead.") from None
        return self if shape == self._shape else _named(dispatch(_P["reshape"], (self,), {"shape": shape}),
                                                        "ViewBackward")

    def view_as(self, other):
        return self.view(other.shape)

    def reshape_as(self, other):
        return self.reshape(other.shape)

    def flatten(self, start_dim=0, end_dim=-1):
        if self.ndim == 0:
            return self.reshape(1)
        s, e = ops._norm_axis(start_dim, self.ndim), ops._norm_axis(end_dim, self.ndim)
        if s > e:
            raise RuntimeError("flatten() has invalid args: start_dim cannot come after end_dim")
        shape = self._shape[:s] + (math.prod(self._shape[s:e + 1]),) + self._shape[e + 1:]
        return self.reshape(shape)

    def permute(self, *dims):
        dims = _shape_arg(dims, "dims")
        if len(dims) != self.ndim:
            raise RuntimeError(f"permute(sparse_coo): number of dimensions in the tensor input does not match the "
                               f"length of the desired ordering of dimensions i.e. input.dim() = {self.ndim} is "
                               f"not equal to len(dims) = {len(dims)}")
        perm = tuple(ops._norm_axis(d, self.ndim) for d in dims)
        if perm == tuple(range(self.ndim)):
            return self
        return dispatch(_P["permute"], (self,), {"perm": perm})

    def transpose(self, dim0, dim1):
        perm = list(range(self.ndim))
        a, b = ops._norm_axis(dim0, self.ndim), ops._norm_axis(dim1, self.ndim)
        if self.ndim == 0:
            return self
        perm[a], perm[b] = perm[b], perm[a]
        return _named(self.permute(*perm), "TransposeBackward", self)

    swapaxes = transpose

    def t(self):
        if self.ndim > 2:
            raise RuntimeError(f"t() expects a tensor with <= 2 dimensions, but self is {self.ndim}D")
        return self.T

    def expand(self, *shape):
        shape = _shape_arg(shape)
        off = len(shape) - self.ndim
        if off < 0:
            raise RuntimeError(f"expand: the number of sizes provided ({len(shape)}) must be greater or equal to "
                               f"the number of dimensions in the tensor ({self.ndim})")
        shape = tuple(self._shape[i - off] if s == -1 and i >= off else s for i, s in enumerate(shape))
        if any(s < 0 for s in shape):
            raise RuntimeError(f"expand: invalid target shape {shape}")
        if shape == self._shape:
            return self
        return dispatch(_P["expand"], (self,), {"shape": shape})

    def expand_as(self, other):
        return self.expand(*other.shape)

    def broadcast_to(self, shape):
        return self.expand(*_shape_arg((shape,)))

    def squeeze(self, dim=None):
        if dim is None:
            shape = tuple(s for s in self._shape if s != 1)
        else:
            dims = normalize_axes(dim, self.ndim)
            shape = tuple(s for i, s in enumerate(self._shape) if not (i in dims and s == 1))
        return _named(self.reshape(shape), "SqueezeBackward", self)

    def unsqueeze(self, dim):
        d = ops._norm_axis(dim, self.ndim + 1)
        return _named(self.reshape(self._shape[:d] + (1,) + self._shape[d:]), "UnsqueezeBackward")

    def __getitem__(self, index):
        return _getitem(self, index)

    def __setitem__(self, index, value):
        _setitem(self, index, value)

    # ------------------------------------------------------------ in place
    def _inplace(self, compute, *others):
        """Run `compute(src, *others)` out of place and write the result into self."""
        recording = is_grad_enabled() and (self.requires_grad or
                                           any(isinstance(o, Tensor) and o.requires_grad for o in others))
        if recording and self.requires_grad and self.grad_fn is None:
            raise RuntimeError("a leaf Variable that requires grad is being used in an in-place operation.")
        if recording and self._base is not None and self._base.requires_grad:
            raise RuntimeError("in-place modification of a view of a tensor that requires grad is not supported "
                               "by tracegrad's autograd; compute the new value out of place (tg.where, tg.cat) "
                               "or modify the base tensor instead.")
        src = self.clone() if recording and self.requires_grad else self.detach() if recording else self
        with (_nullctx() if recording else no_grad()):
            new = compute(src, *others)
        _write(self, new, recording)
        return self

    def add_(self, o, alpha=1): return self._inplace(lambda s, o: s.add(o, alpha), o)
    def sub_(self, o, alpha=1): return self._inplace(lambda s, o: s.sub(o, alpha), o)
    def mul_(self, o): return self._inplace(lambda s, o: s * o, o)
    def div_(self, o): return self._inplace(lambda s, o: s / o, o)
    def pow_(self, o): return self._inplace(lambda s, o: s ** o, o)
    def clamp_(self, min=None, max=None): return self._inplace(lambda s: s.clamp(min, max))
    def relu_(self): return self._inplace(lambda s: s.relu())
    def neg_(self): return self._inplace(lambda s: -s)
    def exp_(self): return self._inplace(lambda s: s.exp())

    def zero_(self):
        return self.fill_(0)

    def fill_(self, value):
        if isinstance(value, Tensor):
            return self._inplace(lambda s, v: v.to(s.dtype).expand(*s.shape), value)
        return self._inplace(lambda s: full(s.shape, value, dtype=s.dtype, device=s.device))

    def copy_(self, src):
        if not isinstance(src, Tensor):
            raise TypeError(f"copy_() expects a tensor, got {type(src).__name__}")
        return self._inplace(lambda s, v: v.to(s.dtype, device=s.device).expand(*s.shape), src)

    def __iadd__(self, o): return self.add_(o)
    def __isub__(self, o): return self.sub_(o)
    def __imul__(self, o): return self.mul_(o)
    def __itruediv__(self, o): return self.div_(o)

    # ------------------------------------------------------------ autograd
    def backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
        if gradient is None:
            if self.numel() != 1:
                raise RuntimeError("grad can be implicitly created only for scalar outputs")
            if self._data is None:
                gradient = ones_like(self)
            elif create_graph:      # the gradient may be stored as a .grad: a private array
                gradient = Tensor._wrap(np.ones(self._shape, self._dtype.np), self._dtype, self._device)
            else:
                gradient = Tensor._wrap(_implicit_gradient(self._shape, self._dtype), self._dtype, self._device)
        elif not isinstance(gradient, Tensor):
            gradient = tensor(gradient, dtype=self._dtype)
        if gradient._shape != self._shape:
            raise RuntimeError(f"Mismatch in shape: grad_output[0] has a shape of {gradient.shape} and output[0] "
                               f"has a shape of {self.shape}.")
        retain = create_graph if retain_graph is None else retain_graph
        run_backward([self], [gradient], retain, create_graph)


_ONES = {}


def _implicit_gradient(shape, dtype):
    """A shared read-only ones array of `shape`: backward()'s gradient (VJP rules only read their
    cotangents, the engine copies one before storing it as a .grad, and a compiled backward binds
    the same array each call)."""
    arr = _ONES.get((shape, dtype))
    if arr is None:
        arr = _ONES[(shape, dtype)] = np.ones(shape, dtype.np)
        arr.flags.writeable = False
    return arr


class _nullctx:
    def __enter__(self):
        pass

    def __exit__(self, *exc):
        pass


def _write(self, new, recording):
    """Store `new` (broadcast to self's shape) into self's memory and bump its version."""
    if new._shape != self._shape:
        try:
            from .broadcast import broadcast_shapes
            ok = broadcast_shapes(new._shape, self._shape) == self._shape
        except BroadcastError:
            ok = False
        if not ok:
            raise RuntimeError(f"output with shape {list(self._shape)} doesn't match the broadcast shape "
                               f"{list(new._shape)}")
        new = new.expand(*self._shape)
    if new._dtype is not self._dtype:
        if new._dtype.kind > self._dtype.kind:
            raise RuntimeError(f"result type {new._dtype} can't be cast to the desired output type {self._dtype}")
        new = new.to(self._dtype)
    if Hooks.tracer is not None:
        self = Hooks.tracer.mutate(self, new)   # functionalized: the stand-in takes the new value
    else:
        if not self._data.flags.writeable:
            raise RuntimeError("unsupported operation: more than one element of the written-to tensor refers to a "
                               "single memory location (an expanded tensor). Please clone() the tensor before "
                               "performing the operation.")
        np.copyto(self._data, new._data)
        self._ver[0] += 1
    if recording:
        self._requires_grad = True
        self.grad_fn, self._oi = new.grad_fn, new._oi


def _trace_error(what):
    from .broadcast import user_frame
    f = user_frame()
    where = f" at {f.f_code.co_filename}:{f.f_lineno}" if f else ""
    return TraceError(f"{what} needs the value of a traced tensor{where}; control flow that depends on tensor "
                      f"values cannot be compiled. Use tg.where(cond, a, b) to select values instead.")


def _infer_shape(shape, numel):
    if shape.count(-1) > 1:
        raise RuntimeError("only one dimension can be inferred")
    if any(s < -1 for s in shape):
        raise RuntimeError(f"invalid shape dimension {min(shape)}")
    if -1 in shape:
        rest = math.prod(s for s in shape if s != -1)
        if rest == 0 or numel % rest:
            raise RuntimeError(f"shape '{list(shape)}' is invalid for input of size {numel}")
        shape = tuple(numel // rest if s == -1 else s for s in shape)
    if math.prod(shape) != numel:
        raise RuntimeError(f"shape '{list(shape)}' is invalid for input of size {numel}")
    return shape


def _to_device(t, dev):
    from . import cuda
    cuda.require(dev)
    raise RuntimeError(f"moving tensors to {dev} needs the CUDA backend, which this version of tracegrad does "
                       f"not implement yet; keep tensors on the cpu")


def _rebuild(arr, requires_grad):
    return tensor(arr, requires_grad=requires_grad)


# ---------------------------------------------------------------- indexing

def _is_int(i):
    return isinstance(i, (int, np.integer)) and not isinstance(i, (bool, np.bool_))


def _index_tensor(i, dev):
    if isinstance(i, Tensor):
        return i
    arr = np.asarray(i)
    if arr.dtype == object or arr.dtype.kind not in "biu":
        raise IndexError(f"tensors used as indices must be long, int or bool tensors, got {i!r}")
    return Tensor._wrap(arr if arr.dtype.kind == "b" else arr.astype(np.int64), D.from_numpy(arr.dtype), dev)


_EMPTY_AXIS = object()   # x[False]: a new axis of size 0


def _parse_index(x, index):
    """Split an index into (basic slices per dim, positions of new axes, tensor indices per dim)."""
    if not isinstance(index, tuple):
        index = (index,)
    items = []
    for i in index:
        if isinstance(i, (list, np.ndarray)) or isinstance(i, Tensor):
            t = _index_tensor(i, x._device)
            if t._dtype is D.bool_:
                if t._data is None:
                    raise _trace_error("boolean-mask indexing (its result shape depends on the values)")
                if t.ndim == 0:     # as a Python bool
                    items.append(None if t._data else _EMPTY_AXIS)
                    continue
                nz = np.nonzero(t._data)
                items.extend(Tensor._wrap(a.astype(np.int64), D.int64, x._device) for a in nz)
                continue
            if t._dtype.is_floating_point:
                raise IndexError("tensors used as indices must be long, int or bool tensors")
            items.append(t)
        elif i is None or i is Ellipsis or isinstance(i, slice) or _is_int(i):
            items.append(i)
        elif isinstance(i, (bool, np.bool_)):
            items.append(None if i else _EMPTY_AXIS)  # x[True] adds an axis, x[False] an empty one, as in NumPy
        else:
            raise IndexError(f"only integers, slices (`:`), ellipsis (`...`), None and integer or boolean tensors "
                             f"are valid indices, got {type(i).__name__}")
    if items.count(Ellipsis) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    used = sum(1 for i in items if i is not None and i is not Ellipsis and i is not _EMPTY_AXIS)
    if used > x.ndim:
        raise IndexError(f"too many indices for tensor of dimension {x.ndim}")
    if Ellipsis in items:
        k = items.index(Ellipsis)
        items[k:k + 1] = [slice(None)] * (x.ndim - used)
    else:
        items += [slice(None)] * (x.ndim - used)
    return items


def _getitem(x, index):
    items = _parse_index(x, index)
    bounds, shape, adv_axes, adv = [], [], [], []
    dim, label = 0, None
    if _EMPTY_AXIS in items:   # index as for True, then take nothing along that new axis
        k = items.index(_EMPTY_AXIS)
        out = _getitem(x, tuple(None if i is _EMPTY_AXIS else i for i in items))
        if any(isinstance(i, Tensor) for i in items):
            raise IndexError("indexing with False together with tensor indices is not supported")
        axis = sum(1 for i in items[:k] if i is None or isinstance(i, slice))
        return out[(slice(None),) * axis + (slice(0, 0),)]
    for i in items:
        if i is None:
            shape.append(1)
            label = "UnsqueezeBackward"
            continue
        size = x._shape[dim]
        if _is_int(i):   # PyTorch selects integer indices first, also beside tensor indices (NumPy does not)
            label = "SelectBackward"
            if not -size <= i < size:
                raise IndexError(f"index {i} is out of bounds for dimension {dim} with size {size}")
            i = int(i) % size
            bounds.append((i, i + 1, 1))
        elif isinstance(i, slice):
            start, stop, step = i.indices(size)
            if step <= 0:
                raise ValueError("step must be greater than zero")
            stop = builtins.max(stop, start)
            bounds.append((start, stop, step))
            if (start, stop, step) != (0, size, 1):
                label = "SliceBackward"
            shape.append(len(range(start, stop, step)))
        else:
            bounds.append((0, size, 1))
            adv_axes.append(len(shape))
            adv.append(i if isinstance(i, Tensor) else Tensor._wrap(np.array(i, np.int64), D.int64, x._device))
            shape.append(size)
        dim += 1
    out = x
    if any(b != (0, s, 1) for b, s in zip(bounds, x._shape)):
        out = dispatch(_P["slice"], (out,), {"index": tuple(bounds)})
    out = out.reshape(tuple(shape)) if tuple(shape) != out._shape else out
    if adv:
        if out._device != adv[0]._device and adv[0]._shape:
            raise mismatch_error(out._device, adv[0]._device)
        adv = [a if a._dtype is D.int64 or a._dtype is D.int32 else a.to(D.int64) for a in adv]
        return dispatch(_P["index"], (out, *adv), {"axes": tuple(adv_axes)})
    return _named(out, label, x) if label else out


def _setitem(x, index, value):
    if not isinstance(value, Tensor):
        if not isinstance(value, _SCALARS):
            value = tensor(value, dtype=x._dtype, device=x._device)
    recording = is_grad_enabled() and (x.requires_grad or isinstance(value, Tensor) and value.requires_grad)
    if not recording and Hooks.tracer is None and x._data is not None:
        view = _getitem(x.detach(), index)
        v = value.detach() if isinstance(value, Tensor) else full((), value, dtype=x._dtype)
        v = v.to(x._dtype)      # setitem copies, casting as copy_ does (float into int truncates)
        if view._data is not None and np.may_share_memory(view._data, x._data):
            _write(view, v, False)     # a basic index: write through the view
            return
        # an advanced index: the flat positions it selects (PyTorch's order of result axes) take value
        pos = _getitem(Tensor._wrap(np.arange(x.numel()).reshape(x._shape), D.int64, x._device), index)._data
        try:
            vals = np.broadcast_to(v._data, pos.shape)
        except ValueError:
            raise RuntimeError(f"shape mismatch: value tensor of shape {list(v.shape)} cannot be broadcast to "
                               f"indexing result of shape {list(pos.shape)}") from None
        x._data[np.unravel_index(pos.ravel(), x._shape)] = vals.ravel()
        x._ver[0] += 1
        return
    # Functional form, differentiable in both x and value: positions hit by the index take value.
    pos = arange(x.numel(), device=x._device).reshape(x._shape)
    hit = _getitem(pos, index)
    v = value if isinstance(value, Tensor) else full((), value, dtype=x._dtype, device=x._device)
    v = v.to(x._dtype).expand(*hit.shape).reshape(-1)
    flat_hit = hit.reshape(-1)
    mask = zeros(x.numel(), dtype=D.bool_, device=x._device)
    with no_grad():
        mask = dispatch(_P["index_add"], (ones(flat_hit.shape, dtype=D.int64, device=x._device), flat_hit),
                        {"shape": (x.numel(),), "axes": (0,)}) > 0
    scattered = dispatch(_P["index_add"], (v, flat_hit), {"shape": (x.numel(),), "axes": (0,)})
    x._inplace(lambda s, sc: where(mask, sc, s.reshape(-1)).reshape(x._shape), scattered)
    if x.grad_fn is not None:
        _named(x, "CopySlices")


# ---------------------------------------------------------------- free functions

def matmul(a, b):
    """NumPy's matmul semantics: 1-D operands are promoted and the added axis removed."""
    if not isinstance(a, Tensor) or not isinstance(b, Tensor):
        raise TypeError(f"matmul expects tensors, got {type(a).__name__} and {type(b).__name__}")
    if a.ndim == 0 or b.ndim == 0:
        raise RuntimeError(f"both arguments to matmul need to be at least 1D, but they are {a.ndim}D and {b.ndim}D")
    a, b = _operands(a, b)
    a2 = a.unsqueeze(0) if a.ndim == 1 else a
    b2 = b.unsqueeze(-1) if b.ndim == 1 else b
    out = dispatch(_P["matmul"], (a2, b2), {})
    if a.ndim == 1:
        out = out.squeeze(-2)
    if b.ndim == 1:
        out = out.squeeze(-1)
    name = {(2, 2): "MmBackward", (2, 1): "MvBackward", (1, 1): "DotBackward", (1, 2): "SqueezeBackward",
            (3, 3): "BmmBackward"}.get((a.ndim, b.ndim), "UnsafeViewBackward")
    return _named(out, name)


def where(cond, a, b):
    if not isinstance(cond, Tensor):
        raise TypeError(f"where: the condition must be a bool tensor, got {type(cond).__name__}")
    if cond._dtype is not D.bool_:
        cond = cond != 0
    a, b = _promote(a, b, device=cond._device)
    return dispatch(_P["where"], (cond, a, b), {})


def cat(tensors, axis=None, *, dim=None):
    tensors = list(tensors)
    if not tensors or not all(isinstance(t, Tensor) for t in tensors):
        raise TypeError("cat expects a non-empty sequence of tensors")
    axis = _axis_kw(axis, dim)
    axis = 0 if axis is None else axis
    ref = tensors[0]
    if ref.ndim == 0:
        raise RuntimeError("zero-dimensional tensor cannot be concatenated")
    axis = ops._norm_axis(axis, ref.ndim)
    if ref.ndim != 1:   # PyTorch skips empty 1-D tensors (the legacy "no data" tensor) beside others
        tensors = [t for t in tensors if t._shape != (0,)] or tensors[:1]
    tensors = _operands(*tensors)
    return dispatch(_P["cat"], tuple(tensors), {"axis": axis})


def stack(tensors, axis=None, *, dim=None):
    tensors = list(tensors)
    if not tensors or not all(isinstance(t, Tensor) for t in tensors):
        raise TypeError("stack expects a non-empty sequence of tensors")
    shapes = {t.shape for t in tensors}
    if len(shapes) > 1:
        raise RuntimeError(f"stack expects each tensor to be equal size, but got shapes {sorted(shapes)}")
    axis = _axis_kw(axis, dim)
    axis = ops._norm_axis(0 if axis is None else axis, tensors[0].ndim + 1)
    return _named(cat([t.unsqueeze(axis) for t in tensors], axis), "StackBackward")


# ---------------------------------------------------------------- factories

_rng = ops.RNG


def manual_seed(seed):
    _rng[0] = np.random.default_rng(int(seed))


def _factory_args(dtype, dev, default):
    dt = D.to_dtype(dtype) if dtype is not None else default
    dev = to_device(dev) if dev is not None else CPU
    if dev != CPU:
        _to_device(None, dev)
    return dt, dev


def _make(arr, dtype, dev, requires_grad):
    if Hooks.tracer is not None:   # a tensor created inside a traced function is a constant of the graph
        return Hooks.tracer.constant_array(arr, dtype, dev)
    t = Tensor._wrap(arr, dtype, dev)
    if requires_grad:
        t.requires_grad = True
    return t


def _alloc(shape, fn, dtype):
    try:
        return fn(shape, dtype.np)
    except (MemoryError, ValueError) as e:
        raise ValueError(f"cannot allocate a tensor of shape {shape} and dtype {dtype}: {e}") from None


def _sizes(size):
    shape = _shape_arg(size, "size")
    if any(s < 0 for s in shape):
        raise _ArgError(f"Trying to create tensor with negative dimension {min(shape)}: {list(shape)}")
    return shape


def tensor(data, dtype=None, device=None, requires_grad=False):
    """A new tensor holding a copy of `data` (nested lists, scalars, NumPy arrays or tensors)."""
    if isinstance(data, Tensor):
        arr = np.array(data._concrete("tg.tensor(traced)"))
    elif isinstance(data, (str, bytes)) or data is None:
        raise TypeError(f"tg.tensor() expects numbers, nested lists of numbers or an array, not {type(data).__name__}")
    else:
        try:
            arr = np.array(data)
        except ValueError as e:
            raise ValueError(f"tg.tensor(): data is ragged or malformed (every row must have the same length): "
                             f"{e}") from None
        if arr.dtype == object or arr.dtype.kind not in "biuf":
            raise TypeError(f"tg.tensor() expects numbers, nested lists of numbers or an array, got data of type "
                            f"{type(data).__name__} (NumPy kind {arr.dtype})")
        if not isinstance(data, (np.ndarray, np.generic)) and arr.dtype.kind == "f":
            arr = arr.astype(D.default_float.np)
    dt, dev = _factory_args(dtype, device, D.from_numpy(arr.dtype))
    return _make(np.array(arr, dtype=dt.np, order="C"), dt, dev, requires_grad)  # 0-d stays 0-d


def as_tensor(data, dtype=None, device=None):
    if isinstance(data, Tensor) and dtype is None:
        return data
    return tensor(data, dtype=dtype, device=device)


def from_numpy(arr):
    """A tensor sharing memory with the NumPy array `arr`."""
    if not isinstance(arr, np.ndarray):
        raise TypeError(f"expected np.ndarray (got {type(arr).__name__})")
    if any(s < 0 for s in arr.strides):
        raise ValueError("from_numpy: arrays with negative strides are not supported; copy the array first")
    return Tensor._wrap(arr, D.from_numpy(arr.dtype), CPU)


def zeros(*size, dtype=None, device=None, requires_grad=False):
    shape = _sizes(size)
    dt, dev = _factory_args(dtype, device, D.default_float)
    return _make(_alloc(shape, np.zeros, dt), dt, dev, requires_grad)


def ones(*size, dtype=None, device=None, requires_grad=False):
    shape = _sizes(size)
    dt, dev = _factory_args(dtype, device, D.default_float)
    return _make(_alloc(shape, np.ones, dt), dt, dev, requires_grad)


def empty(*size, dtype=None, device=None, requires_grad=False):
    shape = _sizes(size)
    dt, dev = _factory_args(dtype, device, D.default_float)
    return _make(_alloc(shape, np.empty, dt), dt, dev, requires_grad)


def full(size, fill_value, dtype=None, device=None, requires_grad=False):
    shape = _sizes((size,) if _is_int(size) else tuple(size))
    if not isinstance(fill_value, _SCALARS):
        raise TypeError(f"full: fill_value must be a number, got {type(fill_value).__name__}")
    dt, dev = _factory_args(dtype, device, D.scalar_dtype(fill_value))
    arr = _alloc(shape, np.empty, dt)
    arr.fill(fill_value)
    return _make(arr, dt, dev, requires_grad)


def zeros_like(t, dtype=None, device=None, requires_grad=False):
    return zeros(t.shape, dtype=dtype or t.dtype, device=device or t.device, requires_grad=requires_grad)


def ones_like(t, dtype=None, device=None, requires_grad=False):
    return ones(t.shape, dtype=dtype or t.dtype, device=device or t.device, requires_grad=requires_grad)


def full_like(t, fill_value, dtype=None, device=None, requires_grad=False):
    return full(t.shape, fill_value, dtype=dtype or t.dtype, device=device or t.device, requires_grad=requires_grad)


def arange(start, end=None, step=1, dtype=None, device=None, requires_grad=False):
    if end is None:
        start, end = 0, start
    for v in (start, end, step):
        if not isinstance(v, _SCALARS) or isinstance(v, bool):
            raise TypeError(f"arange expects numbers, got {v!r}")
    if step == 0:
        raise ValueError("arange: step must be nonzero")
    all_int = all(_is_int(v) for v in (start, end, step))
    dt, dev = _factory_args(dtype, device, D.int64 if all_int else D.default_float)
    n = builtins.max(0, math.ceil((end - start) / step))
    arr = (np.arange(n, dtype=np.float64 if not all_int else np.int64) * step + start).astype(dt.np)
    return _make(arr, dt, dev, requires_grad)


def linspace(start, end, steps, dtype=None, device=None, requires_grad=False):
    dt, dev = _factory_args(dtype, device, D.default_float)
    return _make(np.linspace(start, end, int(steps)).astype(dt.np), dt, dev, requires_grad)


def eye(n, m=None, dtype=None, device=None, requires_grad=False):
    dt, dev = _factory_args(dtype, device, D.default_float)
    _sizes((n,) if m is None else (n, m))
    return _make(np.eye(n, m, dtype=dt.np), dt, dev, requires_grad)


def _random(name, shape, dtype, dev, requires_grad):
    """Random tensors come from a primitive, so a compiled function draws fresh values per call."""
    t = dispatch(_P[name], (), {"shape": shape, "dtype": dtype})
    if t._device != dev:
        _to_device(t, dev)
    if requires_grad:
        t.requires_grad = True
    return t


def randn(*size, dtype=None, device=None, requires_grad=False):
    shape = _sizes(size)
    dt, dev = _factory_args(dtype, device, D.default_float)
    if not dt.is_floating_point:
        raise TypeError(f"randn needs a floating-point dtype, got {dt}")
    return _random("randn", shape, dt, dev, requires_grad)


def rand(*size, dtype=None, device=None, requires_grad=False):
    shape = _sizes(size)
    dt, dev = _factory_args(dtype, device, D.default_float)
    if not dt.is_floating_point:
        raise TypeError(f"rand needs a floating-point dtype, got {dt}")
    return _random("rand", shape, dt, dev, requires_grad)


def randint(low, high=None, size=(), dtype=None, device=None):
    if high is None:
        low, high = 0, low
    dt, dev = _factory_args(dtype, device, D.int64)
    return _make(_rng[0].integers(low, high, _sizes((size,) if _is_int(size) else tuple(size))).astype(dt.np),
                 dt, dev, False)


def randperm(n, dtype=None, device=None):
    dt, dev = _factory_args(dtype, device, D.int64)
    return _make(_rng[0].permutation(int(n)).astype(dt.np), dt, dev, False)
