"""The Tensor class: the operations a tensor offers, each a thin call into this package's modules
(dispatch, indexing, inplace, factories, functions) or into tracegrad.composites; the reductions are
in reduce_methods.py, the everyday named methods in named_methods.py.

Where a new method goes: a primitive's method calls `dispatch(_P[name], ...)` in the section of its
kind below; a composite is a function in tracegrad/composites/ with a one-line method here; a
new in-place method is a one-line `inplace(self, ...)` call in the "in place" section.
"""
import math

import numpy as np

from .. import composites as C
from .. import dtypes as D
from .. import ops
from ..autograd import ones_backward, register_post_accumulate_grad_hook, run_backward
from ..device import CPU, to_device
from ..device import device as Device
from ..ops import normalize_axes
from ..symint import same_shape, same_size
from .base import TensorBase, _row_major_copy, register
from .dispatch import (_P, _SCALARS, _axis_kw, _binary, _infer_shape, _named, _promote,
                       _shape_arg, _to_device, dispatch)
from .factories import _implicit_gradient, _rebuild, empty, full, legacy_tensor, ones, tensor, zeros
from .functions import bmm, div_rounded, dot, matmul, mm, mv, where
from .indexing import _getitem, _setitem
from .direct import (ADD, ADD_SCALED, CLAMP, DIV, EXP, MUL, NEG, POW, RELU, SUB, SUB_SCALED,
                     scaled)
from .inplace import copy_from, fill_with, inplace
from .named_methods import NamedMethods
from .reduce_methods import ReduceMethods, _dim_arg
from .declared import install


def _or_nan(cond, bound):
    """cond, and True where a clamp bound is NaN: a NaN bound gives NaN, as PyTorch's clamp."""
    return cond | (bound != bound) if isinstance(bound, TensorBase) or bound != bound else cond


@install
@register
class Tensor(NamedMethods, ReduceMethods, TensorBase):
    """An n-dimensional array with autograd, like torch.Tensor."""

    __slots__ = ()

    def __new__(cls, *args, device=None):
        """tg.Tensor(data) / tg.Tensor(2, 3): PyTorch's legacy constructor (tensors made by the
        library itself bypass it)."""
        return legacy_tensor(args, device)

    def __init__(self, *args, **kwargs):
        pass

    def __reduce__(self):
        return (_rebuild, (np.array(self._host("pickling")), self.requires_grad, str(self._device)))

    # ------------------------------------------------------------ conversions
    def to(self, *args, dtype=None, device=None, copy=False, non_blocking=False):
        """This tensor of `dtype` and/or on `device` (self if already); copies complete before returning."""
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

    def cuda(self, device="cuda", non_blocking=False):
        return self.to(device)

    def clone(self):
        return _named(dispatch(_P["copy"], (self,), {}), "CloneBackward")

    def contiguous(self):
        if self._row_major():
            return self
        out = self.clone()  # clone keeps the layout (as PyTorch's does); contiguous() must be row-major
        if not out._row_major():
            out._data = _row_major_copy(out._data)
        return out

    # ------------------------------------------------------------ arithmetic
    def __add__(self, o): return _binary("add", self, o)
    def __radd__(self, o): return _binary("add", self, o)     # self first, as PyTorch's next_functions
    def __sub__(self, o): return _binary("sub", self, o)
    def __mul__(self, o): return _binary("mul", self, o)
    def __rmul__(self, o): return _binary("mul", self, o)

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
    __hash__ = TensorBase.__hash__      # by identity, as PyTorch's (optimizer.state[p])
    def __ne__(self, o): return _binary("ne", self, o) if isinstance(o, (Tensor,) + _SCALARS) else NotImplemented

    def __and__(self, o): return self.bitwise_and(o)
    def __or__(self, o): return self.bitwise_or(o)
    def __invert__(self): return self.bitwise_not()

    def __rsub__(self, o): return _named(_binary("sub", o, self), "RsubBackward")

    def add(self, o, alpha=1):
        return self + (o * alpha if alpha != 1 else o)

    def sub(self, o, alpha=1):
        return self - (o * alpha if alpha != 1 else o)

    def mul(self, o): return self * o
    def div(self, o, *, rounding_mode=None):
        return self / o if rounding_mode is None else div_rounded(self, o, rounding_mode)

    def pow(self, o): return self ** o
    def matmul(self, o): return matmul(self, o)
    def mm(self, mat2): return mm(self, mat2)
    def bmm(self, mat2): return bmm(self, mat2)
    def mv(self, vec): return mv(self, vec)
    def dot(self, other): return dot(self, other)
    def true_divide(self, o): return self / o
    def maximum(self, o): return _binary("maximum", self, o)
    def minimum(self, o): return _binary("minimum", self, o)

    def clamp(self, min=None, max=None):
        """Selects rather than takes maximum/minimum: the gradient passes where min <= x <= max,
        boundaries included, as in PyTorch (maximum would split it at a tie)."""
        if min is None and max is None:
            raise RuntimeError("torch.clamp: At least one of 'min' or 'max' must not be None")
        out = self
        if min is not None:
            out = where(_or_nan(out < min, min), min, out)
        if max is not None:
            out = where(_or_nan(out > max, max), max, out)
        return _named(out, "ClampBackward", self)

    clip = clamp

    def where(self, condition, other):
        return where(condition, self, other)

    # ------------------------------------------------------------ unary
    # exp, log, sqrt, tanh, sigmoid, sin, cos: declared with the primitive (ops/elementwise.py, tensor/declared.py)
    def neg(self): return -self
    def relu(self): return dispatch(_P["relu"], (self,), {})
    def abs(self): return dispatch(_P["abs"], (self,), {})
    def sign(self): return dispatch(_P["sign"], (self,), {})
    def rsqrt(self): return _named(1.0 / self.sqrt(), "RsqrtBackward")
    def reciprocal(self): return _named(1.0 / self, "ReciprocalBackward")
    def square(self): return _named(self * self, "PowBackward")
    def log1p(self): return C.log1p(self)
    def expm1(self): return C.expm1(self)

    def floor(self):
        return dispatch(_P["floor"], (self,), {})

    def round(self, *, decimals=0): return C.round_(self, decimals)
    def isnan(self): return C.isnan(self)
    def isinf(self): return C.isinf(self)
    def isfinite(self): return C.isfinite(self)

    # ------------------------------------------------------------ shapes and views
    def reshape(self, *shape):
        shape = _infer_shape(_shape_arg(shape), self.numel())
        if same_shape(shape, self._shape):
            return self
        out = dispatch(_P["reshape"], (self,), {"shape": shape})
        return _named(out, "ViewBackward" if self._row_major() else "UnsafeViewBackward")

    def view(self, *shape):
        if len(shape) == 1 and isinstance(shape[0], (D.DType, type)) or shape and isinstance(shape[0], str):
            raise TypeError("view(dtype) is not supported; use .to(dtype)")
        shape = _infer_shape(_shape_arg(shape), self.numel())
        if not self._viewable(shape):
            raise RuntimeError(
                f"view size is not compatible with input tensor's size and stride (shape {self._shape}, "
                f"stride {self.stride()}): at least one dimension spans across two contiguous subspaces. "
                f"Use .reshape(...) instead.")
        return self if same_shape(shape, self._shape) else _named(dispatch(_P["reshape"], (self,), {"shape": shape}),
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
        if len(shape) == self.ndim and all(map(same_size, shape, self._shape)):     # records no guard
            return self
        return dispatch(_P["expand"], (self,), {"shape": shape})

    def expand_as(self, other):
        return self.expand(*other.shape)

    def broadcast_to(self, shape):
        return self.expand(*_shape_arg((shape,)))

    def squeeze(self, dim=None, *, axis=None):
        dim = _axis_kw(axis, dim)
        if dim is None:
            shape = tuple(s for s in self._shape if s != 1)
        else:
            dims = normalize_axes(dim, self.ndim)
            shape = tuple(s for i, s in enumerate(self._shape) if not (i in dims and s == 1))
        return _named(self.reshape(shape), "SqueezeBackward", self)

    def unsqueeze(self, dim=None, *, axis=None):
        d = ops._norm_axis(_dim_arg("unsqueeze", axis, dim), self.ndim + 1)
        return _named(self.reshape(self._shape[:d] + (1,) + self._shape[d:]), "UnsqueezeBackward")

    def split(self, split_size, dim=None, *, axis=None):
        return C.split(self, split_size, _axis_kw(axis, dim, default=0))

    def chunk(self, chunks, dim=None, *, axis=None):
        return C.chunk(self, chunks, _axis_kw(axis, dim, default=0))

    def flip(self, *dims, axis=None, **kw):
        """x.flip(0, 1), x.flip((0, 1)), x.flip(dims=...) (or axis=)."""
        if kw.keys() - {"dims"} or (dims and (kw or axis is not None)):
            raise TypeError(f"flip() takes the dims once, positionally or as dims= (or axis=), got {dims} and {kw}")
        dims = _axis_kw(axis, kw.get("dims")) if not dims else dims
        if dims is None:
            raise TypeError("flip() missing required argument 'dims'")
        return C.flip(self, dims[0] if len(dims) == 1 and isinstance(dims[0], (list, tuple)) else
                      (dims,) if isinstance(dims, int) else dims)

    def roll(self, shifts, dims=None, *, axis=None):
        return C.roll(self, shifts, _axis_kw(axis, dims))

    def repeat(self, *sizes):
        return C.repeat(self, sizes[0] if len(sizes) == 1 and isinstance(sizes[0], (list, tuple)) else sizes)

    def index_select(self, dim=None, index=None, *, axis=None):
        return C.index_select(self, _dim_arg("index_select", axis, dim), index)

    def tril(self, diagonal=0):
        return C.tril(self, diagonal)

    def masked_fill(self, mask, value):
        return C.masked_fill(self, mask, value)

    def masked_fill_(self, mask, value):
        return self.copy_(C.masked_fill(self, mask, value))

    def unbind(self, dim=None, *, axis=None):
        return C.unbind(self, _axis_kw(axis, dim, default=0))

    def narrow(self, dim=None, start=None, length=None, *, axis=None):
        return C.narrow(self, _dim_arg("narrow", axis, dim), start, length)

    def unfold(self, dimension, size, step):
        """A view of every slice of `size` elements `step` apart along `dimension` (a new last axis)."""
        d = normalize_axes(dimension, self.ndim)[0]
        return _named(ops.bind("windows", self, axes=(d,), size=(int(size),), step=(int(step),), dilation=(1,)),
                      "UnfoldBackward")

    def outer(self, vec2):
        return C.outer(self, vec2)

    def lerp(self, end, weight):
        return C.lerp(self, end, weight)

    def addmm(self, mat1, mat2, *, beta=1, alpha=1):
        return C.addmm(self, mat1, mat2, beta=beta, alpha=alpha)

    def repeat_interleave(self, repeats, dim=None, *, axis=None):
        return C.repeat_interleave(self, repeats, _axis_kw(axis, dim))

    def triu(self, diagonal=0):
        return C.triu(self, diagonal)

    def __getitem__(self, index):
        return _getitem(self, index)

    def __setitem__(self, index, value):
        _setitem(self, index, value)

    # ------------------------------------------------------------ new tensors like this one
    def _like(self, dtype, device):
        return dict(dtype=dtype or self._dtype, device=device or self._device)

    def new_tensor(self, data, dtype=None, device=None, requires_grad=False):
        return tensor(data, **self._like(dtype, device), requires_grad=requires_grad)

    def new_zeros(self, *size, dtype=None, device=None, requires_grad=False):
        return zeros(*size, **self._like(dtype, device), requires_grad=requires_grad)

    def new_ones(self, *size, dtype=None, device=None, requires_grad=False):
        return ones(*size, **self._like(dtype, device), requires_grad=requires_grad)

    def new_empty(self, *size, dtype=None, device=None, requires_grad=False):
        return empty(*size, **self._like(dtype, device), requires_grad=requires_grad)

    def new_full(self, size, fill_value, dtype=None, device=None, requires_grad=False):
        return full(size, fill_value, **self._like(dtype, device), requires_grad=requires_grad)

    # ------------------------------------------------------------ in place
    def _inplace(self, compute, *others, direct=None):
        return inplace(self, compute, *others, direct=direct)

    def add_(self, o, alpha=1):
        return self._inplace(lambda s, o: s.add(o, alpha), o, direct=scaled(ADD, ADD_SCALED, o, alpha))

    def sub_(self, o, alpha=1):
        return self._inplace(lambda s, o: s.sub(o, alpha), o, direct=scaled(SUB, SUB_SCALED, o, alpha))

    def mul_(self, o): return self._inplace(lambda s, o: s * o, o, direct=(MUL, (o,)))
    def div_(self, o, *, rounding_mode=None):
        if rounding_mode is not None:
            return self._inplace(lambda s, o: div_rounded(s, o, rounding_mode), o)
        return self._inplace(lambda s, o: s / o, o, direct=(DIV, (o,)))

    def pow_(self, o): return self._inplace(lambda s, o: s ** o, o, direct=(POW, (o,)))
    def relu_(self): return self._inplace(lambda s: s.relu(), direct=(RELU, ()))
    def neg_(self): return self._inplace(lambda s: -s, direct=(NEG, ()))
    def exp_(self): return self._inplace(lambda s: s.exp(), direct=(EXP, ()))

    def clamp_(self, min=None, max=None):
        direct = (CLAMP, (min, max)) if min is not None or max is not None else None
        return self._inplace(lambda s: s.clamp(min, max), direct=direct)

    def zero_(self):
        return self.fill_(0)

    def fill_(self, value):
        return fill_with(self, value)

    def copy_(self, src):
        return copy_from(self, src)

    def __iadd__(self, o): return self.add_(o)
    def __isub__(self, o): return self.sub_(o)
    def __imul__(self, o): return self.mul_(o)
    def __itruediv__(self, o): return self.div_(o)

    # ------------------------------------------------------------ autograd
    def backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
        if gradient is None:
            if self._shape and math.prod(self._shape) != 1:
                raise RuntimeError("grad can be implicitly created only for scalar outputs")
            if not create_graph and inputs is None and ones_backward(self, retain_graph):
                return
            gradient = self._implicit_gradient(create_graph)
        elif not isinstance(gradient, Tensor):
            gradient = tensor(gradient, dtype=self._dtype, device=self._device)
        elif gradient._device != self._device:
            raise RuntimeError(f"invalid gradient at index 0 - expected device {self._device} but got "
                               f"{gradient._device}")
        if gradient._shape != self._shape:
            raise RuntimeError(f"Mismatch in shape: grad_output[0] has a shape of {gradient.shape} and output[0] "
                               f"has a shape of {self.shape}.")
        retain = create_graph if retain_graph is None else retain_graph
        run_backward([self], [gradient], retain, create_graph)

    def register_post_accumulate_grad_hook(self, hook):
        return register_post_accumulate_grad_hook(self, hook)

    def _implicit_gradient(self, create_graph):
        """backward()'s gradient of a one-element tensor: ones (with create_graph it may be stored as a
        .grad: a private array)."""
        arr = _implicit_gradient(self._shape, self._dtype, self._device, private=create_graph)
        return Tensor._wrap(arr, self._dtype, self._device)
