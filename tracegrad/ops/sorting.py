"""argsort: the order of the elements along an axis (a NumPy host kernel in compiled code). sort,
topk, kthvalue and the values of each are composites that gather by these indices, so their
gradients are the gather's (tracegrad/composites/sort.py)."""
import numpy as np

from .. import dtypes as D
from ..core import prim


def _argsort_rule(shapes, dtypes, axis, descending):
    return shapes[0], D.int64


def _argsort_impl(x, axis, descending):
    """Stable: equal elements keep their order, ascending or descending; NaN counts as the largest
    (last ascending, first descending), as PyTorch's sort."""
    if x.ndim == 0:
        return np.zeros((), np.int64)
    if not descending:
        return np.argsort(x, axis=axis, kind="stable").astype(np.int64, copy=False)
    # a stable ascending sort of the reversed axis, reversed back: descending, ties in their order
    n = x.shape[axis]
    rev = np.argsort(np.flip(x, axis), axis=axis, kind="stable")
    return np.ascontiguousarray(np.flip(n - 1 - rev, axis)).astype(np.int64, copy=False)


prim("argsort", "reduction", _argsort_rule, _argsort_impl, vjp=None, jvp=None, save=(),
     lower=None, dtypes=(), cost=None)
