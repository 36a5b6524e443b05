"""The memory layout (strides, in elements) of values while a function is traced, as eager code
would have it: a traced value has no array, yet `contiguous()`, `is_contiguous()`, `stride()` and
`view()` versus `reshape()` must answer as they do eagerly (NumPy's layouts, see tensor/base.py).

Inputs have their arrays' strides (part of the signature), views the strides of their primitive's
`remap`, other results the layout NumPy gives them: row-major from row-major inputs, else what the
primitive's NumPy implementation makes of small stand-in arrays laid out as the inputs are.
"""
import warnings

import numpy as np

from .symint import is_sym

_PROBE = 2      # each axis of a stand-in array: 0 or 1 as the real one, else this size


def of_array(arr):
    """The strides of a NumPy array in elements (None when not a whole number of elements)."""
    size = arr.itemsize
    if any(s % size for s in arr.strides):
        return None
    return tuple(s // size for s in arr.strides)


def contiguous_strides(shape):
    """The strides of a row-major (C-contiguous) layout of `shape`, in elements; an axis of size 0
    counts as 1 (PyTorch's strides), a symbolic size as itself (where it is 0 there is no element to
    address; no guard is recorded). The one definition: tensors, the IR and every backend use it."""
    out, acc = [], 1
    for n in reversed(shape):
        out.insert(0, acc)
        acc *= n if is_sym(n) else max(n, 1)
    return tuple(out)


def dense_order(shape, strides):
    """The axes from outermost to innermost in memory when (shape, strides) is a permutation of a
    row-major layout with every size 2 or more (so the order alone says where each element is),
    else None."""
    if strides is None or any(n < 2 for n in shape):
        return None
    order = sorted(range(len(shape)), key=lambda i: -strides[i])
    acc = 1
    for i in reversed(order):
        if strides[i] != acc:
            return None
        acc *= shape[i]
    return tuple(order)


def dense_strides(shape, order):
    """The strides of `shape` laid out densely with its axes in memory `order` (outermost first)."""
    out, acc = [0] * len(shape), 1
    for i in reversed(order):
        out[i] = acc
        acc *= shape[i]
    return tuple(out)


def is_row_major(shape, strides):
    """NumPy's c_contiguous flag: axes of size 1 do not count, an empty array is contiguous."""
    if 0 in shape:
        return True
    acc = 1
    for n, s in zip(reversed(shape), reversed(strides)):
        if n != 1:
            if s != acc:
                return False
            acc *= n
    return True


def shown(shape, strides):
    """What `stride()` returns (PyTorch's strides for a row-major layout, as tensor/base.py)."""
    return contiguous_strides(shape) if is_row_major(shape, strides) else tuple(strides)


def of_result(p, inputs, shape, attrs):
    """The strides of a non-view primitive's result (None: unknown); `inputs` are (shape, strides
    or None, NumPy dtype)."""
    if all(s is not None and is_row_major(sh, s) for sh, s, _ in inputs):
        return contiguous_strides(shape)
    if any(s is None for _, s, _ in inputs):
        return None
    try:
        probes = [_stand_in(*i) for i in inputs]
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = np.asarray(p.impl(*probes, **attrs))
    except Exception:  # noqa: BLE001  (attributes tied to the real sizes: layout unknown)
        return None
    if out.ndim != len(shape) or any(min(n, 2) != min(m, 2) for n, m in zip(shape, out.shape)):
        return None          # (cat's result is larger than the stand-ins; its axes are as many and as empty)
    if out.flags.c_contiguous:
        return contiguous_strides(shape)
    # the axes from the largest stride to the smallest, then dense strides in that order
    order = sorted(range(len(shape)), key=lambda i: (-abs(out.strides[i]) if out.shape[i] > 1 else 0, i))
    strides, acc = [0] * len(shape), 1
    for i in reversed(order):
        strides[i] = acc
        acc *= max(shape[i], 1)
    return tuple(strides)


def _stand_in(shape, strides, dtype):
    """A small array of zeros whose axes are ordered in memory as (shape, strides) orders them
    (stride-0 axes stay broadcast)."""
    small = [n if n < _PROBE else _PROBE for n in shape]
    order = sorted(range(len(shape)), key=lambda i: (abs(strides[i]), -i))
    dense, acc = [0] * len(shape), 1
    for i in order:
        if strides[i] != 0:
            dense[i] = acc
            acc *= max(small[i], 1)
    buf = np.zeros(max(acc, 1), dtype)
    return np.lib.stride_tricks.as_strided(buf, small, [d * buf.itemsize for d in dense], writeable=False)

