"""Sorting and selecting along an axis: sort, argsort, msort, topk, kthvalue (the order from the
`argsort` primitive, the values gathered by it, so the gradient flows to the selected elements and
compiled code gathers in a fused kernel), and nonzero and unique, whose result sizes depend on the
values: eager only, a clear error inside tg.compile.

Ties keep their order (a stable sort, ascending or descending); PyTorch's unstable CPU sort may
order the indices of equal elements differently, its values are the same. NaN is the largest."""
import numpy as np

from .. import dtypes as D
from .. import return_types
from ..ops import _norm_axis, bind
from ..tensor.base import TraceError
from ..tensor.dispatch import _named
from ..tensor.factories import tensor
from .gather import _along


def _axis(x, dim):
    return _norm_axis(dim, x.ndim) if x.ndim else 0


def argsort(x, dim=-1, descending=False, stable=False):
    """The indices that sort x along `dim` (int64; stable whatever `stable` says)."""
    return bind("argsort", x, axis=_axis(x, dim), descending=bool(descending))


def _gathered(x, idx, axis, name):
    """x's elements at idx along axis (a 0-d x: itself), labelled with PyTorch's node name."""
    return _named(_along(x, idx, axis) if x.ndim else x.clone(), name)


def sort(x, dim=-1, descending=False, stable=False):
    """The named tuple (values, indices) of x sorted along `dim`; the gradient of values goes back
    to the element each came from."""
    idx = argsort(x, dim, descending)
    return return_types.sort(_gathered(x, idx, _axis(x, dim), "SortBackward"), idx)


def _check_k(x, a, k, low, what):
    n = x.shape[a] if x.ndim else 1
    if not low <= k <= n:
        raise RuntimeError(f"{what} out of range (k={k}, dim {a} of size {n} in shape {tuple(x.shape)})")


def topk(x, k, dim=-1, largest=True, sorted=True):
    """The k largest (or smallest) elements along `dim` and their indices, in sorted order (also
    with sorted=False, which allows any order)."""
    a = _axis(x, dim)
    _check_k(x, a, k, 0, "topk(): selected index k")
    idx = argsort(x, a, descending=largest)
    idx = idx.narrow(a, 0, k) if x.ndim else idx
    return return_types.topk(_gathered(x, idx, a, "TopkBackward"), idx)


def kthvalue(x, k, dim=-1, keepdim=False):
    """The k-th smallest element along `dim` (k from 1) and its index."""
    a = _axis(x, dim)
    _check_k(x, a, k, 1, "kthvalue(): selected number k")
    idx = argsort(x, a)
    idx = idx.narrow(a, k - 1, 1) if x.ndim else idx
    values = _gathered(x, idx, a, "KthvalueBackward")
    if not keepdim and x.ndim:
        values, idx = _named(values.squeeze(a), "KthvalueBackward"), idx.squeeze(a)
    return return_types.kthvalue(values, idx)


def msort(x):
    return sort(x, 0).values


def _values(x, name, instead):
    """x's NumPy values; inside tg.compile a TraceError saying why `name` cannot be compiled."""
    try:
        return x._host(name)
    except TraceError as e:
        raise TraceError(f"{name}: the size of its result depends on the values of the tensor, and a compiled "
                         f"function has fixed shapes. {instead} ({e})") from None


_NONZERO_INSTEAD = ("Keep the shape and mask instead: tg.where(mask, x, 0), x.masked_fill(~mask, 0), "
                    "(x * mask).sum(), or call nonzero outside the compiled function.")


def nonzero(x, *, as_tuple=False):
    """The indices of the non-zero elements: an (n, ndim) int64 tensor, or with as_tuple=True one
    1-D tensor per axis (a 0-d input counts as 1-D). Eager only."""
    arr = np.asarray(_values(x, "nonzero()", _NONZERO_INSTEAD))
    where = np.nonzero(arr.reshape(1) if arr.ndim == 0 else arr)
    if as_tuple:
        return tuple(tensor(w.astype(np.int64), device=x.device) for w in where)
    if arr.ndim == 0:
        return tensor(np.zeros((int(arr != 0), 0), np.int64), device=x.device)
    return tensor(np.stack(where, 1).astype(np.int64).reshape(-1, arr.ndim), device=x.device)


def argwhere(x):
    return nonzero(x)


def unique(x, sorted=True, return_inverse=False, return_counts=False, dim=None):
    """The distinct elements in ascending order (also with sorted=False, as PyTorch's CPU result),
    the inverse (each element's place among them, x's shape) and the counts. Not differentiable;
    eager only."""
    arr = np.asarray(_values(x, "unique()", "Use a fixed-size alternative instead (a histogram over known values: "
                                            "(x[..., None] == values).sum(...)), or call unique outside the "
                                            "compiled function."))
    if dim is not None:
        a = _axis(x, dim)
        vals, inv, counts = np.unique(arr, return_inverse=True, return_counts=True, axis=a)
    else:
        vals, inv, counts = np.unique(arr.reshape(-1), return_inverse=True, return_counts=True)
        inv = inv.reshape(arr.shape)
    out = [tensor(vals, dtype=x.dtype, device=x.device)]
    if return_inverse:
        out.append(tensor(inv.reshape(-1) if dim is not None else inv, dtype=D.int64, device=x.device))
    if return_counts:
        out.append(tensor(counts, dtype=D.int64, device=x.device))
    return out[0] if len(out) == 1 else tuple(out)
