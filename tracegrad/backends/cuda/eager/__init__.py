"""Eager primitives on the device: `run(p, arrays, attrs, shape, dtype)` computes primitive `p` on
device arrays (given the result's shape and tracegrad dtype) and returns a device array, choosing
the way by the primitive's `kind` (core.py):

- view: a strided view of the input's memory, where the table's `remap` puts its elements (a reshape
  no strides express copies first, as NumPy's reshape does);
- copy (cat, unslice), index (gather, scatter-add), creation, random: kernels.py;
- extern (matmul): matmul.py (cuBLAS, or a tiled kernel);
- elementwise and reduction: generated.py (installed by tracegrad/cuda: pointwise.py, kernels the
  cuda compiler generates from the table's scalar lowering; prod, cumsum, prod_others: scan.py);
  argmax/argmin: argreduce.py; floor, round, floordiv, remainder: rounding.py.

`arrays` are device arrays, except that 0-d NumPy arrays stand for Python scalars and 0-d cpu tensors
(they combine with cuda tensors, as in PyTorch): elementwise kernels read them from a cache of device
constants (one upload per distinct value), the other kernels upload them.
A primitive without a device path raises NotImplementedError naming it; nothing runs on the host.
"""
import numpy as np

from .... import core
from ....ops.indexing import check_nonnegative
from .. import memory


def run(p, arrays, attrs, shape, dtype):
    kind = p.kind
    try:
        way = _KINDS[kind]
    except KeyError:
        raise unsupported(p, dtype, f"no device kernel for primitives of kind {kind!r}") from None
    return way(p, arrays, attrs, tuple(shape), dtype)


def unsupported(p, dtype, why):
    return NotImplementedError(f"{p.name} on cuda:0 ({dtype}): {why}; move its operands to the cpu with "
                               f".cpu() to run it there")


def _on_device(a):
    """A device array for an operand (a 0-d host array, i.e. a scalar operand, is uploaded)."""
    return a if memory.is_device_array(a) else memory.copy(np.asarray(a), "device")


def _view(p, arrays, attrs, shape, dtype):
    x = _on_device(arrays[0])
    where = p.remap(x.shape, shape, memory.strides_of(x), 0, **attrs)
    if where is None:                      # no strides express it (a reshape of a transposed value)
        x = memory.contiguous(x)
        where = p.remap(x.shape, shape, memory.strides_of(x), 0, **attrs)
    strides, offset = where
    return memory.view(x, shape, strides, offset)


def _copy(p, arrays, attrs, shape, dtype):
    from .kernels import copy_strided, zeros
    if p.name == "cat":
        out, axis, start = memory.empty(shape, dtype.np), attrs["axis"], 0
        strides = memory.strides_of(out)
        for a in map(_on_device, arrays):
            copy_strided(a, memory.view(out, a.shape, strides, start * strides[axis]))
            start += a.shape[axis]
        return out
    if p.name == "unslice":
        g, out = _on_device(arrays[0]), zeros(shape, dtype.np)
        strides = memory.strides_of(out)
        index = attrs["index"]
        offset = sum(start * s for (start, _, _), s in zip(index, strides))
        steps = [s * step for (_, _, step), s in zip(index, strides)] + list(strides[len(index):])
        copy_strided(g, memory.view(out, g.shape, steps, offset))
        return out
    raise unsupported(p, dtype, "no device kernel for this copy")


def _index(p, arrays, attrs, shape, dtype):
    from .kernels import gather, scatter_add
    x, *idx = map(_on_device, arrays)
    axes = tuple(attrs["axes"])
    if p.name == "index":
        if not attrs.get("wrap", True):
            check_nonnegative([memory.copy(i, "host") for i in idx], axes, x.shape)
        return gather(x, idx, axes, shape)
    if p.name == "index_add":
        return scatter_add(x, idx, axes, tuple(attrs["shape"]))
    raise unsupported(p, dtype, "no device kernel for this indexing primitive")


def _creation(p, arrays, attrs, shape, dtype):
    from .kernels import zeros
    if p.name == "zeros_like":
        return zeros(shape, dtype.np)
    raise unsupported(p, dtype, "no device kernel for this creation primitive")


def _random(p, arrays, attrs, shape, dtype):
    """rand/randn from a key drawn from the generator behind tg.manual_seed (core.RNG), so seeding
    reproduces cuda draws (they differ from cpu draws, as in PyTorch). A draw without a device
    kernel (randint, randperm) takes NumPy's stream on the host, as on the cpu, and is uploaded."""
    from .kernels import random
    if dtype.is_floating_point and dtype.np not in (np.float32, np.float64):
        raise unsupported(p, dtype, "random draws on the device are float32 or float64 (then .to(dtype))")
    out = None
    if dtype.is_floating_point:
        out = random(p.name, shape, dtype.np, int(core.RNG[0].integers(0, 2 ** 63)))
    return out if out is not None else _on_device(p.impl(**attrs))


def _extern(p, arrays, attrs, shape, dtype):
    if p.name != "matmul":
        raise unsupported(p, dtype, "no device kernel for this library call")
    from .matmul import matmul
    a, b = map(_on_device, arrays)
    try:
        return matmul(a, b, shape)
    except NotImplementedError as e:
        raise unsupported(p, dtype, str(e)) from None


def _pointwise(p, arrays, attrs, shape, dtype):
    from . import argreduce, rounding    # device kernels of primitives without a scalar lowering
    special = next(filter(None, (getattr(m, "run_" + p.name, None) for m in (argreduce, rounding))), None)
    if special is not None:
        return special([_on_device(a) for a in arrays], attrs, tuple(shape), dtype.np)
    if not _GENERATED:
        raise unsupported(p, dtype, "elementwise and reduction kernels are not installed (import tracegrad, "
                                    "which installs them)")
    return _GENERATED[0](p, arrays, attrs, shape, dtype)


# The elementwise and reduction kernels the cuda compiler generates (generated.py). They sit above this
# module, which the eager tensors below the compiler call, so tracegrad/cuda installs them here.
_GENERATED = []


def install_generated(run):
    """Make `run(p, arrays, attrs, shape, dtype)` compute the elementwise and reduction primitives."""
    _GENERATED[:] = [run]


def _collective(p, arrays, attrs, shape, dtype):
    """The process group's backend takes the device arrays (NCCL; MPI refuses them, naming the backend to use)."""
    return p.impl(*arrays, **attrs)


_KINDS = dict(view=_view, copy=_copy, index=_index, creation=_creation, random=_random, extern=_extern,
              elementwise=_pointwise, reduction=_pointwise, collective=_collective)     # kind -> how the device computes it
