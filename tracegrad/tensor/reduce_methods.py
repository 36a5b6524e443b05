"""Tensor methods that reduce: sum, mean, max/min and their a- and arg- forms, prod, var/std, norm,
cumsum, logsumexp, softmax, gather, all/any. Tensor inherits them (tensor_class.py).
"""
import math

from .. import composites as C
from .. import dtypes as D
from .. import ops
from ..ops import normalize_axes
from ..symint import is_sym
from .base import TensorBase
from .dispatch import _P, _axis_kw, _keep_kw, _named, dispatch, in_float32


def _dim_arg(name, axis, dim):
    """A required dim, given as dim or as its alias axis=."""
    dim = _axis_kw(axis, dim)
    if dim is None:
        raise TypeError(f"{name}() missing required argument 'dim'")
    return dim


class ReduceMethods:
    """The methods; see the module docstring."""
    __slots__ = ()

    def _reduce(self, name, axis, keepdims):
        return dispatch(_P[name], (self,), {"axis": normalize_axes(axis, self.ndim), "keepdims": keepdims})

    def sum(self, axis=None, keepdims=False, *, dim=None, keepdim=None, dtype=None):
        x = self if dtype is None else self.to(dtype)
        if x._dtype in D.SMALL_INTS:
            x = x.to(D.int64)
        return x._reduce("sum", _axis_kw(axis, dim), _keep_kw(keepdims, keepdim))

    def mean(self, axis=None, keepdims=False, *, dim=None, keepdim=None, dtype=None):
        x = self if dtype is None else self.to(dtype)
        if not x._dtype.is_floating_point:
            raise RuntimeError(f"mean(): could not infer output dtype. Input dtype must be either a floating point "
                               f"or complex dtype. Got: {x._dtype}")
        axis = normalize_axes(_axis_kw(axis, dim), x.ndim)
        n = math.prod(x._shape[a] for a in axis)
        # a symbolic count divides as it is (0 / 0 is NaN at the call, no guard); a plain 0 divides as NaN
        return in_float32(lambda t: _named(t._reduce("sum", axis, _keep_kw(keepdims, keepdim)) /
                                           (n if is_sym(n) or n else float("nan")), "MeanBackward"), x)

    def max(self, axis=None, keepdims=False, *, dim=None, keepdim=None):
        """x.max(): the largest element; x.max(dim): the named tuple (values, indices); x.max(other)."""
        if isinstance(axis, TensorBase):
            return self.maximum(axis)
        axis = _axis_kw(axis, dim)
        if axis is None:
            return self._reduce("max", None, False)
        return C.extreme_along(self, axis, _keep_kw(keepdims, keepdim), "max")

    def min(self, axis=None, keepdims=False, *, dim=None, keepdim=None):
        if isinstance(axis, TensorBase):
            return self.minimum(axis)
        axis = _axis_kw(axis, dim)
        if axis is None:
            return self._reduce("min", None, False)
        return C.extreme_along(self, axis, _keep_kw(keepdims, keepdim), "min")

    def amax(self, axis=None, keepdims=False, *, dim=None, keepdim=None):
        """The largest values over an int or a tuple of axes (all when None or ()); the gradient is
        split evenly among ties, as PyTorch's."""
        axis = _axis_kw(axis, dim)
        return _named(self._reduce("max", axis if axis != () else None, _keep_kw(keepdims, keepdim)),
                      "AmaxBackward", self)

    def amin(self, axis=None, keepdims=False, *, dim=None, keepdim=None):
        axis = _axis_kw(axis, dim)
        return _named(self._reduce("min", axis if axis != () else None, _keep_kw(keepdims, keepdim)),
                      "AminBackward", self)

    def prod(self, axis=None, keepdims=False, *, dim=None, keepdim=None):
        if self._dtype in D.SMALL_INTS:   # as sum: small integer types multiply in int64
            return self.to(D.int64).prod(axis, keepdims, dim=dim, keepdim=keepdim)
        return self._reduce("prod", _axis_kw(axis, dim), _keep_kw(keepdims, keepdim))

    def var(self, axis=None, *, keepdims=False, unbiased=None, correction=None, dim=None, keepdim=None):
        """Unbiased (N - 1) by default, as PyTorch; `unbiased=False` or `correction=k` (N - k)."""
        return C.var(self, axis, keepdims=keepdims, unbiased=unbiased, correction=correction, dim=dim,
                     keepdim=keepdim)

    def std(self, axis=None, *, keepdims=False, unbiased=None, correction=None, dim=None, keepdim=None):
        return C.std(self, axis, keepdims=keepdims, unbiased=unbiased, correction=correction, dim=dim,
                     keepdim=keepdim)

    def norm(self, p="fro", dim=None, keepdim=False, dtype=None, *, axis=None):
        return C.norm(self, p, _axis_kw(axis, dim), keepdim, dtype)

    def cumsum(self, dim=None, *, dtype=None, axis=None):
        """Running sums along `dim` (required, as PyTorch's); differentiable and compiled."""
        return C.cumsum(self, _axis_kw(axis, dim), dtype)

    def logsumexp(self, axis=None, keepdims=False, *, dim=None, keepdim=None):
        return C.logsumexp(self, axis, keepdims, dim=dim, keepdim=keepdim)

    def softmax(self, axis=None, *, dim=None):
        return C.softmax(self, axis, dim=dim)

    def gather(self, dim=None, index=None, *, axis=None):
        return C.gather(self, _dim_arg("gather", axis, dim), index)

    def take_along_dim(self, indices, dim=None):
        return C.take_along_dim(self, indices, dim)

    def log_softmax(self, axis=None, *, dim=None):
        return C.log_softmax(self, axis, dim=dim)

    def _arg(self, name, axis, keepdims):
        if axis is not None:
            axis = ops._norm_axis(axis, self.ndim) if self.ndim else None
        return dispatch(_P[name], (self,), {"axis": axis, "keepdims": keepdims})

    def argmax(self, axis=None, keepdims=False, *, dim=None, keepdim=None):
        return self._arg("argmax", _axis_kw(axis, dim), _keep_kw(keepdims, keepdim))

    def argmin(self, axis=None, keepdims=False, *, dim=None, keepdim=None):
        return self._arg("argmin", _axis_kw(axis, dim), _keep_kw(keepdims, keepdim))

    def all(self, dim=None, keepdim=False, *, axis=None):
        """Whether every element (along `dim`: an int or a tuple; all when None) is nonzero."""
        axis = normalize_axes(_axis_kw(axis, dim), self.ndim)
        n = math.prod(self._shape[a] for a in axis)
        return (self != 0).to(D.int64).sum(axis, keepdim) == n

    def any(self, dim=None, keepdim=False, *, axis=None):
        axis = normalize_axes(_axis_kw(axis, dim), self.ndim)
        return (self != 0).to(D.int64).sum(axis, keepdim) > 0
