"""Indexing: x[index] (basic slices, None, ..., integer and boolean tensor indices, PyTorch's order
of result axes) and x[index] = value (written through a view, or differentiably by scatter)."""
import builtins

import numpy as np

from .. import dtypes as D
from ..broadcast import broadcast_shapes
from ..device import mismatch_error
from ..modes import interpreter, is_grad_enabled, no_grad
from ..symint import is_size, same_shape, slice_bounds, slice_length
from .base import TensorBase, new, shares_memory
from .dispatch import _P, _SCALARS, _named, dispatch
from .factories import arange, full, ones, tensor, zeros
from .functions import where
from .inplace import inplace, positions, replaced, replaced_box, write


def _index_tensor(i, dev):
    if isinstance(i, TensorBase):
        return i
    arr = np.asarray(i)
    if arr.dtype == object or arr.dtype.kind not in "biu":
        raise IndexError(f"tensors used as indices must be long, int or bool tensors, got {i!r}")
    return new(arr, D.bool_, dev) if arr.dtype.kind == "b" else new(arr.astype(np.int64), D.int64, dev)


_EMPTY_AXIS = object()   # x[False]: a new axis of size 0


def _parse_index(x, index):
    """Split an index into (basic slices per dim, positions of new axes, tensor indices per dim)."""
    if not isinstance(index, tuple):
        index = (index,)
    items = []
    for i in index:
        if isinstance(i, (list, np.ndarray)) or isinstance(i, TensorBase):
            t = _index_tensor(i, x._device)
            if t._dtype is D.bool_:
                t._concrete("boolean-mask indexing (its result shape depends on the values)")
                if t.ndim == 0:     # as a Python bool
                    items.append(None if t.item() else _EMPTY_AXIS)
                    continue
                nz = np.nonzero(t._host("boolean-mask indexing"))    # (a cuda mask's values are copied)
                items.extend(new(a.astype(np.int64), D.int64, x._device) for a in nz)
                continue
            if t._dtype.is_floating_point:
                raise IndexError("tensors used as indices must be long, int or bool tensors")
            items.append(t)
        elif i is None or i is Ellipsis or isinstance(i, slice) or is_size(i):
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


def _getitem(x, index, wrap=True):
    """x[index]; a negative tensor index counts from the end unless `wrap` is False (then it raises,
    as PyTorch's embedding, index_select and gather do)."""
    items = _parse_index(x, index)
    bounds, shape, adv_axes, adv = [], [], [], []
    dim, label = 0, None
    if _EMPTY_AXIS in items:   # index as for True, then take nothing along that new axis
        k = items.index(_EMPTY_AXIS)
        out = _getitem(x, tuple(None if i is _EMPTY_AXIS else i for i in items), wrap)
        if any(isinstance(i, TensorBase) for i in items):
            raise IndexError("indexing with False together with tensor indices is not supported")
        axis = sum(1 for i in items[:k] if i is None or isinstance(i, slice))
        return out[(slice(None),) * axis + (slice(0, 0),)]
    for i in items:
        if i is None:
            shape.append(1)
            label = "UnsqueezeBackward"
            continue
        size = x._shape[dim]
        if is_size(i):   # PyTorch selects integer indices first, also beside tensor indices (NumPy does not)
            label = "SelectBackward"
            if not -size <= i < size:
                raise IndexError(f"index {i} is out of bounds for dimension {dim} with size {size}")
            i = i + size if i < 0 else i
            bounds.append((i, i + 1, 1))
        elif isinstance(i, slice):
            start, stop, step = slice_bounds(i, size)
            if step <= 0:
                raise ValueError("step must be greater than zero")
            stop = builtins.max(stop, start)
            bounds.append((start, stop, step))
            if not same_shape((start, stop, step), (0, size, 1)):
                label = "SliceBackward"
            shape.append(slice_length(start, stop, step))
        else:
            bounds.append((0, size, 1))
            adv_axes.append(len(shape))
            adv.append(i if isinstance(i, TensorBase) else new(np.array(i, np.int64), D.int64, x._device))
            shape.append(size)
        dim += 1
    out = x
    if not all(same_shape(b, (0, s, 1)) for b, s in zip(bounds, x._shape)):
        out = dispatch(_P["slice"], (out,), {"index": tuple(bounds)})
    out = out.reshape(tuple(shape)) if not same_shape(tuple(shape), out._shape) else out
    if adv:
        adv = [_index_on(out, a) for a in adv]
        adv = [a if a._dtype is D.int64 or a._dtype is D.int32 else a.to(D.int64) for a in adv]
        return dispatch(_P["index"], (out, *adv), {"axes": tuple(adv_axes)} if wrap else
                        {"axes": tuple(adv_axes), "wrap": False})
    return _named(out, label, x) if label else out


def _index_on(x, i):
    """Index tensor i on x's device: a cuda tensor takes cpu indices (copied, as PyTorch does)."""
    if i._device == x._device or not i._shape:
        return i
    if x._device.type == "cuda" and i._device.type == "cpu":
        return i.to(x._device)
    raise mismatch_error(x._device, i._device)


def _scatter_into(x, index, v):
    """x[index] = v for an advanced index: the positions the index selects (PyTorch's order of result
    axes) take v's values (on cuda by a device kernel; a repeated position takes the last of its values
    on the cpu, one of them on cuda).
    On the cpu each axis's coordinate, broadcast over x's shape without memory, is indexed as x is:
    arrays of the selection's size and of x's axes, never one of x's size."""
    if x._device.type == "cuda" or not x._shape:
        pos = _getitem(arange(x.numel(), device=x._device).reshape(x._shape), index)
        shape, coords = pos._shape, None
    else:
        coords = [_getitem(new(np.broadcast_to(np.arange(n).reshape((n,) + (1,) * (x.ndim - k - 1)), x._shape),
                               D.int64), index)._data for k, n in enumerate(x._shape)]
        shape = coords[0].shape
    if broadcast_shapes(v._shape, shape) != shape:
        raise RuntimeError(f"shape mismatch: value tensor of shape {list(v.shape)} cannot be broadcast to "
                           f"indexing result of shape {list(shape)}")
    if x._device.type == "cuda":
        if v._device != x._device and v._shape:
            raise mismatch_error(x._device, v._device)
        from ..backends.cuda.eager.kernels import put
        put(x._data, pos._data, v.to(x._device).expand(*pos._shape)._data)
    elif coords is None:
        x._data[np.unravel_index(pos._data.ravel(), x._shape)] = np.broadcast_to(v._data, shape).ravel()
    else:
        x._data[tuple(coords)] = np.broadcast_to(v._data, shape)
    x._ver[0] += 1


def _basic_box(shape, items):
    """The (start, stop, step) per axis that a basic index (integers, slices, None; bounds already checked)
    selects, from the sizes as they are (symbolic too); None where it selects nothing (positions decide)."""
    box = []
    for i, n in zip([i for i in items if i is not None], shape):
        if isinstance(i, slice):
            start, stop, step = slice_bounds(i, n)
            box.append((start, builtins.max(stop, start), step))
        else:
            i = i + n if i < 0 else i
            box.append((i, i + 1, 1))
    return tuple(box) if all(slice_length(*b) for b in box) else None


def _setitem(x, index, value):
    if not isinstance(value, TensorBase):
        if not isinstance(value, _SCALARS):
            value = tensor(value, dtype=x._dtype, device=x._device)
    recording = is_grad_enabled() and (x.requires_grad or isinstance(value, TensorBase) and value.requires_grad)
    if not recording and interpreter().concrete:
        view = _getitem(x.detach(), index)
        v = value.detach() if isinstance(value, TensorBase) else full((), value, dtype=x._dtype, device=x._device)
        v = v.to(x._dtype)      # setitem copies, casting as copy_ does (float into int truncates)
        if shares_memory(view, x):
            write(view, v, False)     # a basic index: write through the view
        else:
            _scatter_into(x, index, v)
        return
    # Functional form, differentiable in both x and value: positions hit by the index take value.
    v = value if isinstance(value, TensorBase) else full((), value, dtype=x._dtype, device=x._device)
    items = _parse_index(x, index)
    if x._shape and not any(isinstance(i, TensorBase) or i is _EMPTY_AXIS for i in items):   # a basic index
        shape = _getitem(zeros((), dtype=D.int64, device=x._device).expand(*x._shape), index)._shape   # checks it
        box = _basic_box(x._shape, items)
        if box is None:
            flat = positions(tuple(map(int, x._shape)), items)      # numbers: symbolic sizes pinned
            inplace(x, lambda s, v: replaced(s, flat, v), v.to(x._dtype).expand(*shape).reshape(-1))
        else:
            inplace(x, lambda s, v: replaced_box(s, box, v), v.to(x._dtype).expand(*shape).reshape(-1))
        if x.grad_fn is not None:
            _named(x, "CopySlices")
        return
    pos = arange(x.numel(), device=x._device).reshape(x._shape)
    hit = _getitem(pos, index)
    v = v.to(x._dtype).expand(*hit.shape).reshape(-1)
    flat_hit = hit.reshape(-1)
    mask = zeros(x.numel(), dtype=D.bool_, device=x._device)
    with no_grad():
        mask = dispatch(_P["index_add"], (ones(flat_hit.shape, dtype=D.int64, device=x._device), flat_hit),
                        {"shape": (x.numel(),), "axes": (0,)}) > 0
    scattered = dispatch(_P["index_add"], (v, flat_hit), {"shape": (x.numel(),), "axes": (0,)})
    inplace(x, lambda s, sc: where(mask, sc, s.reshape(-1)).reshape(x._shape), scattered)
    if x.grad_fn is not None:
        _named(x, "CopySlices")

