"""Eager elementwise and reduction primitives on the device, from the primitives' scalar lowerings
(the same translation the compiled CUDA path uses: emit/). One kernel per primitive, dtypes
and rank (reductions: also per reduced axes and memory order), generated, compiled and cached once.

Inputs are device arrays of any strides (views stay views; a broadcast operand is read through a
stride-0 view); results are new row-major device arrays. A primitive whose lowering does not cover
the dtypes raises, naming the op, dtype and device: nothing runs on the host behind the caller's back.
float16 goes wherever float32 does: computed in float32, each result rounded to float16 once.
"""
import math

import numpy as np

from ..emit import eager
from ..emit.expr import held
from .. import plan
from ..emit.reduce import acc_dtype
from ....strides import contiguous_strides
from ....ops import PRIMS
from .. import memory


def run(p, arrays, attrs, shape, dtype):
    """Primitive p (kind "elementwise" or "reduction") on device `arrays` with `attrs`; the result,
    of `shape` and `dtype` (the type rule's), as a new device array."""
    out_dtype = np.dtype(getattr(dtype, "np", dtype))
    in_dtypes = tuple(np.dtype(a.dtype).name for a in arrays)
    _check_lowered(p, in_dtypes, out_dtype.name)
    if p.kind == "elementwise":
        return _elementwise(p, arrays, tuple(shape), in_dtypes, out_dtype)
    if p.kind == "reduction":
        return _reduction(p, arrays[0], attrs, tuple(shape), out_dtype)
    raise TypeError(f"pointwise.run runs elementwise and reduction primitives, not {p.name} ({p.kind})")


def _check_lowered(p, in_dtypes, out_dtype):
    if p.lower is None:
        raise RuntimeError(f'"{p.name}" is not implemented on cuda: the primitive has no scalar lowering, so '
                           f"no CUDA kernel ({'/'.join(in_dtypes)} inputs). Compute it on the CPU (.cpu()).")
    # a reduction whose type rule converts (sum of bools -> int64) converts each element first
    converted = p.kind == "reduction" and in_dtypes[0] != out_dtype and in_dtypes[0] in PRIMS["cast"].dtypes
    bad = [d for d in (in_dtypes if not converted else ()) + (out_dtype,) if held(d) not in p.dtypes]
    if bad:
        raise RuntimeError(f'"{p.name}" is not implemented on cuda for {bad[0]} '
                           f"({'/'.join(in_dtypes)} inputs, {out_dtype} result): its CUDA kernel covers "
                           f"{', '.join(p.dtypes)}. Convert with .to(dtype) first, or compute on the CPU (.cpu()).")


def _as_shape(a, shape):
    """`a` viewed with `shape` (broadcast by stride 0; rank 0 seen as rank 1)."""
    shape = shape or (1,)
    lead = len(shape) - a.ndim
    strides = [0] * lead + [0 if n == 1 and m != 1 else s for n, m, s in
                            zip(a.shape, shape[lead:], memory.strides_of(a))]
    if tuple(a.shape) == tuple(shape):
        return a
    return memory.view(a, shape, strides)


def _elementwise(p, arrays, shape, in_dtypes, out_dtype):
    out = memory.empty(shape, out_dtype)
    n = math.prod(shape)
    if n == 0:
        return out
    rank = max(len(shape), 1)
    kernel, _ = eager.elementwise(p.name, p.lower, in_dtypes, out_dtype.name, rank)
    threads = plan.eager_threads(n)
    kernel[plan.eager_grid(n, threads), threads](_as_shape(out, shape), *[_as_shape(a, shape) for a in arrays])
    return out


def _reduction(p, x, attrs, shape, out_dtype):
    nd = max(x.ndim, 1)
    axis = attrs.get("axis")
    axes = tuple(range(x.ndim)) if axis is None else tuple(sorted(
        a % nd for a in ((axis,) if isinstance(axis, int) else axis)))
    if x.ndim == 0:
        x, axes = _as_shape(x, (1,)), (0,)
    keep = tuple(1 if d in axes else n for d, n in enumerate(x.shape))
    out = memory.empty(keep, out_dtype)
    kept, reduced, bx, by = plan.eager_reduction(x.shape, memory.strides_of(x), axes)
    nkept = math.prod(keep)
    if nkept:
        cast = PRIMS["cast"].lower if np.dtype(x.dtype) != out_dtype else None
        key = (p.name, p.lower, np.dtype(x.dtype).name, out_dtype.name, nd, kept, reduced)
        tiles = plan.eager_grid(nkept, bx)
        slices, chunk = plan.slices_of(tiles, math.prod(x.shape[d] for d in reduced), by)
        if slices == 1:
            kernel, _ = eager.reduction(*key, bx, by, cast)
            kernel[tiles, bx * by](out, x)
        else:          # too few tiles to fill the GPU: split the reduced elements, then join
            partials = memory.empty((slices * nkept,), acc_dtype(p.lower, out_dtype.name))
            kernel, _ = eager.reduction(*key, bx, by, cast, True)
            kernel[(tiles, slices), bx * by](out, x, partials, chunk)
            join, _ = eager.reduction_join(*key, cast)
            threads = plan.eager_threads(nkept)
            join[plan.eager_grid(nkept, threads), threads](out, x, partials, slices)
    return memory.view(out, shape, contiguous_strides(shape)) if keep != shape else out
