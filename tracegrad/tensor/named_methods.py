"""Tensor methods of the everyday names scripts use: rounding (ceil, trunc, frac), bitwise and logical
operations, sorting and selecting, cross/diagonal/trace, random fills, in-place `*_` forms of the unary and binary operations, and the
in-place shape changes unsqueeze_/squeeze_/t_/transpose_, and type(). Tensor inherits them
(tensor_class.py).
"""
from ..composites import linalg as L
from ..composites import random as R
from ..composites import sort as S
from .. import dtypes as D
from ..modes import interpreter, is_grad_enabled
from .base import TraceError
from .dispatch import _P, _binary, dispatch
from .typed import type_of


class NamedMethods:
    """The methods; see the module docstring."""
    __slots__ = ()

    def type(self, dtype=None, non_blocking=False):
        return type_of(self, dtype)

    # ------------------------------------------------------------ rounding and math
    def ceil(self): return dispatch(_P["ceil"], (self,), {})
    def trunc(self): return dispatch(_P["trunc"], (self,), {})
    fix = trunc
    def frac(self): return L.frac(self)

    # ------------------------------------------------------------ bitwise and logical
    def bitwise_and(self, other): return _binary("logical_and" if _bools(self, other) else "bitwise_and", self, other)
    def bitwise_or(self, other): return _binary("logical_or" if _bools(self, other) else "bitwise_or", self, other)
    def bitwise_xor(self, other): return _binary("ne" if _bools(self, other) else "bitwise_xor", self, other)

    def bitwise_not(self):
        return dispatch(_P["logical_not" if self._dtype is D.bool_ else "bitwise_not"], (self,), {})

    def logical_and(self, other): return self.bool() & _as_bool(other)
    def logical_or(self, other): return self.bool() | _as_bool(other)
    def logical_xor(self, other): return _binary("ne", self.bool(), _as_bool(other))
    def logical_not(self): return dispatch(_P["logical_not"], (self,), {})

    def __xor__(self, o): return self.bitwise_xor(o)
    def __rand__(self, o): return self.bitwise_and(o)
    def __ror__(self, o): return self.bitwise_or(o)
    def __rxor__(self, o): return self.bitwise_xor(o)

    # ------------------------------------------------------------ sorting and selecting
    def sort(self, dim=-1, descending=False, stable=False): return S.sort(self, dim, descending, stable)
    def argsort(self, dim=-1, descending=False, stable=False): return S.argsort(self, dim, descending, stable)
    def msort(self): return S.msort(self)
    def topk(self, k, dim=-1, largest=True, sorted=True): return S.topk(self, k, dim, largest, sorted)
    def kthvalue(self, k, dim=-1, keepdim=False): return S.kthvalue(self, k, dim, keepdim)
    def nonzero(self, *, as_tuple=False): return S.nonzero(self, as_tuple=as_tuple)
    def argwhere(self): return S.argwhere(self)

    def unique(self, sorted=True, return_inverse=False, return_counts=False, dim=None):
        return S.unique(self, sorted, return_inverse, return_counts, dim)

    # ------------------------------------------------------------ products and diagonals
    def cross(self, other, dim=None): return L.cross(self, other, dim)
    def diagonal(self, offset=0, dim1=0, dim2=1): return L.diagonal(self, offset, dim1, dim2)
    def trace(self): return L.trace(self)

    # ------------------------------------------------------------ random
    def uniform_(self, a=0.0, b=1.0, *, generator=None): return R.uniform_(self, a, b)
    def normal_(self, mean=0.0, std=1.0, *, generator=None): return R.normal_(self, mean, std)
    def bernoulli(self, p=None, *, generator=None): return R.bernoulli(self, p)
    def bernoulli_(self, p=0.5, *, generator=None): return R.bernoulli_(self, p)

    def multinomial(self, num_samples, replacement=False, *, generator=None):
        return R.multinomial(self, num_samples, replacement)

    # ------------------------------------------------------------ in-place shape changes
    def unsqueeze_(self, dim): return _reshape_in_place(self, self.unsqueeze(dim), "unsqueeze_")
    def squeeze_(self, dim=None): return _reshape_in_place(self, self.squeeze(dim), "squeeze_")
    def t_(self): return _reshape_in_place(self, self.t(), "t_")
    def transpose_(self, dim0, dim1): return _reshape_in_place(self, self.transpose(dim0, dim1), "transpose_")


def _bools(a, b):
    return a._dtype is D.bool_ and (getattr(b, "_dtype", None) is D.bool_ or isinstance(b, bool))


def _as_bool(x):
    return x.bool() if hasattr(x, "_dtype") else bool(x)


def _reshape_in_place(x, view, name):
    """x becomes `view` of itself (its shape and strides change, its memory stays), as PyTorch's
    in-place shape changes; the result of an op that records takes the view's history."""
    if x.requires_grad and is_grad_enabled() and x.grad_fn is None:
        raise RuntimeError("a leaf Variable that requires grad is being used in an in-place operation.")
    if not interpreter().concrete:
        raise TraceError(f"{name}() inside a compiled function is not supported: the shape of a traced tensor is "
                         f"fixed (an argument's would not change for the caller); use the out-of-place form, "
                         f"x = x.{name[:-1]}(...)")
    if x._base is not None:
        raise RuntimeError(f"{name}() on a view is not supported by tracegrad; use the out-of-place form "
                           f"(x = x.{name[:-1]}(...)) instead")
    if view is x:
        return x
    x.data = view
    if view.grad_fn is not None:
        x.grad_fn, x._oi = view.grad_fn, view._oi
    return x


def _inplace_form(name):
    """x.<name>_(...): x.<name>(...) written into x (tensor/inplace.py: versions, views, autograd)."""
    def method(self, *args, **kwargs):
        return self._inplace(lambda s, *a: getattr(s, name)(*a, **kwargs), *args)
    method.__name__ = method.__qualname__ = name + "_"
    method.__doc__ = f"In place: x.{name}_(...) writes x.{name}(...) into x."
    return method


# in-place forms of the operations that have none of their own (a string: these are method names)
for _name in ("rsqrt abs log1p expm1 floor ceil round trunc frac sign reciprocal "
              "square bitwise_and bitwise_or bitwise_xor "
              "bitwise_not logical_and logical_or logical_xor logical_not lerp true_divide tril triu").split():
    setattr(NamedMethods, _name + "_", _inplace_form(_name))
del _name
