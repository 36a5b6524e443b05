"""Eager kernels: one primitive's scalar lowering over N-d device arrays of any strides, generated
by the same skeletons as compiled programs but with the shapes read at run time, so one kernel
serves every shape of a (primitive, dtypes, rank) — and, for reductions, of a (reduced axes, memory
order, tile geometry) — and is built once.

Arrays are indexed as N-d arrays (numba applies their strides; a broadcast operand is a view with
stride 0); the iteration space is the output's (elementwise) or the input's (reductions).
"""
import functools

from ....ir.kernels import Load, Op
from .. import compile as build
from .expr import Lines
from .skeletons import combine_body, map_body, tiles_body



class _Buf:
    """A kernel argument standing where a graph Value would: its dtype and rank."""

    def __init__(self, name, dtype, ndim):
        self.name, self.dtype, self.shape = name, _Dtype(dtype), (1,) * ndim


class _Dtype:
    def __init__(self, name):
        self.name = name


class NdArrays:
    """Eager layout: every buffer an N-d array over the space's axes; sizes read from `space`'s shape."""

    def __init__(self, space, ndim):
        self.dims = [f"n{d}" for d in range(ndim)]
        self.prologue = [f"n{d} = int64({space}.shape[{d}])" for d in range(ndim)]

    def load(self, ld, idx):
        return f"{ld.buf.name}[{_index(idx, len(self.dims))}]"

    def store_full(self, v, idx):
        return f"{v.name}[{_index(idx, len(self.dims))}]"

    def store_kept(self, v, idx, kept):            # the output keeps the reduced axes as size 1
        return f"{v.name}[{_index({d: idx[d] for d in kept}, len(self.dims))}]"

    def same_element(self, ld, v):
        return False

    def reads_row(self, ld, split):
        return False


def _index(idx, ndim):
    return ", ".join(idx.get(d, "0") for d in range(ndim))


class _Phase:
    def __init__(self, kind, outputs, lower=None, axes=None):
        self.kind, self.outputs, self.lower, self.axes = kind, outputs, lower, axes


def _function(name, args, layout, emit):
    src = Lines()
    for line in layout.prologue:
        src.emit(line)
    emit(src)
    return f"def {name}({', '.join(args)}):\n" + src.text()


@functools.lru_cache(maxsize=None)
def elementwise(op, lower, in_dtypes, out_dtype, ndim):
    """(dispatcher, source) of `out[...] = lower(a, b, c)` over arrays of rank ndim (>= 1): launch
    as `k[grid, threads](out, *inputs)` (plan.eager_grid, plan.eager_threads)."""
    ins = [_Buf(f"a{j}", d, ndim) for j, d in enumerate(in_dtypes)]
    out = _Buf("out", out_dtype, ndim)
    tree = Op(op, [Load(b, (0,) * ndim) for b in ins], out.dtype, lower, None)
    lay = NdArrays("out", ndim)
    name = f"eager_{op}_{'_'.join(in_dtypes)}_{ndim}d"
    body = _function(name, ["out"] + [b.name for b in ins], lay, lambda src: map_body(
        src, lay, [_Phase("map", [(out, tree)])], list(range(ndim)), None))
    return build.kernel(body, name), body


@functools.lru_cache(maxsize=None)
def reduction(op, lower, in_dtype, out_dtype, ndim, kept, reduced, bx, by, cast_lower=None, split=False):
    """(dispatcher, source) reducing an array x of rank ndim over the axes `reduced` into `out` (the
    same rank, reduced axes of size 1): `k[blocks, bx * by](out, x)`. `kept`/`reduced`
    list the axes in memory order (fastest last); bx kept elements side by side, by threads
    splitting each one's reduced elements (plan.eager_reduction). An input of another dtype than
    the result is converted with `cast_lower` first (sum of bools). split: the grid's y blocks
    take `chunk` reduced elements each and write partials: `k[(tiles, slices), bx * by](out, x,
    partials, chunk)`, then `reduction_join`'s kernel finishes."""
    ph, lay = _reduce_phase(op, lower, in_dtype, out_dtype, ndim, reduced, cast_lower)
    name = (f"eager_{op}_{in_dtype}_{ndim}d_r{''.join(map(str, reduced))}_k{''.join(map(str, kept))}_{bx}x{by}"
            + "_split" * split)
    args = ["out", "x"] + ["p0", "chunk"] * split
    body = _function(name, args, lay, lambda src: tiles_body(
        src, lay, [ph], [], list(kept), list(reduced), bx, by, (None, "chunk", ["p0"]) if split else None))
    return build.kernel(body, name), body


@functools.lru_cache(maxsize=None)
def reduction_join(op, lower, in_dtype, out_dtype, ndim, kept, reduced, cast_lower=None):
    """(dispatcher, source) of a split reduction's second launch: `k[blocks, t](out, x,
    partials, slices)` (x gives the shape only)."""
    ph, lay = _reduce_phase(op, lower, in_dtype, out_dtype, ndim, reduced, cast_lower)
    name = f"eager_{op}_{in_dtype}_{ndim}d_r{''.join(map(str, reduced))}_k{''.join(map(str, kept))}_join"
    body = _function(name, ["out", "x", "p0", "slices"], lay, lambda src: combine_body(
        src, lay, [ph], list(kept), "slices", ["p0"], None))
    return build.kernel(body, name), body


def _reduce_phase(op, lower, in_dtype, out_dtype, ndim, reduced, cast_lower):
    x, out = _Buf("x", in_dtype, ndim), _Buf("out", out_dtype, ndim)
    elem = Load(x, (0,) * ndim)
    if in_dtype != out_dtype:
        elem = Op("cast", [elem], out.dtype, cast_lower, None)
    return _Phase("reduce", [(out, elem)], lower, tuple(reduced)), NdArrays("x", ndim)
