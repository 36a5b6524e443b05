"""prod, and the scans along axes on the device: cumsum (running sums, from either end) and
prod_others (each element's product of the other elements along the axes: prod's gradient, computed
without dividing, so zeros are exact). The table gives these primitives no scalar lowering (the CPU
runs NumPy's); prod is the block reduction of pointwise.py joining by a product.

A scan cuts each row (the scanned axes, row-major) into chunks: a thread per (row, chunk) totals
its chunk, a thread per row turns the chunk totals into exclusive running totals from the start
and from the end, and a thread per (row, chunk) walks its chunk again from its running total.
Consecutive threads take consecutive rows (coalesced when the scanned axes are outer ones). Long
rows whose scanned axis is contiguous in memory are scanned by blocks instead (blockscan.py).
cumsum accumulates float32 in float64 (as sum does) and small integers and bools in int64 (the type
rule's result); float16 is computed in float32 and stored as float16; bool is computed as int64.
"""
import math

import numpy as np
from numba import cuda

from ....ops import PRIMS
from ....scalar import a, b
from .. import memory
from . import blockscan, pointwise
from .kernels import _unravel, copy_strided, launch_config

MIN_CHUNK = 16        # the shortest chunk a thread walks (chunks are about sqrt(row length) long)
CUMSUM, REVERSE, EXCLUSIVE_PRODUCT = 0, 1, 2      # what _finish writes (its `mode`)


class _Product:
    """prod, as pointwise.run takes a primitive: a reduction whose element b joins accumulator a by
    a product (its name, kind and dtypes are the table's prod's)."""
    name, kind, lower, dtypes = "prod", "reduction", a * b, PRIMS["sum"].dtypes


def run_prod(arrays, attrs, shape, dtype):
    x, out_dtype = arrays[0], np.dtype(dtype)
    if x.dtype == np.bool_:            # a product of bools is their `and`: computed as int64 0/1
        r = pointwise.run(_Product, [_converted(x, np.int64)], attrs, shape, np.dtype(np.int64))
        return copy_strided(r, memory.empty(r.shape, out_dtype))
    return pointwise.run(_Product, [x], attrs, shape, out_dtype)


def run_cumsum(arrays, attrs, shape, dtype):
    x = arrays[0]
    acc = np.float64 if x.dtype == np.float32 else np.float32 if x.dtype == np.float16 else np.dtype(dtype)
    return _scan(x, (attrs["axis"],) if x.ndim else (), np.dtype(dtype), acc,
                 REVERSE if attrs["reverse"] else CUMSUM)


def run_prod_others(arrays, attrs, shape, dtype):
    x = arrays[0]
    acc = np.float32 if x.dtype == np.float16 else np.int64 if x.dtype == np.bool_ else np.dtype(dtype)
    return _scan(x, tuple(attrs["axis"]), np.dtype(dtype), acc, EXCLUSIVE_PRODUCT)


def _converted(x, dtype):
    return x if x.dtype == dtype else copy_strided(x, memory.empty(x.shape, dtype))


def _scan(x, axes, out_dtype, acc, mode):
    """The scan `mode` of device array x along `axes` (row-major over them) into a new row-major
    array of out_dtype, accumulating in `acc`."""
    acc = np.dtype(acc)
    if x.size == 0:
        return memory.empty(x.shape, out_dtype)
    axes = tuple(a % x.ndim for a in axes)
    xst = memory.strides_of(x)
    by_blocks = blockscan.use_blocks(math.prod(x.shape[d] for d in axes), [xst[d] for d in axes] or [0])
    if x.dtype in (np.float16, np.bool_) and not by_blocks:     # the block kernels convert as they load
        x = _converted(x, acc)
    stored = (np.float32, np.float64, np.int32, np.int64) + ((np.float16,) if by_blocks else ())
    direct = out_dtype in stored                                     # stored by the kernels themselves
    out = memory.empty(x.shape, out_dtype if direct else acc)
    kept = [d for d in range(x.ndim) if d not in axes]
    xs, xst = memory.span(x)
    os, ost = memory.span(out)
    geometry = tuple(tuple(v) or (w,) for v, w in (
        ([x.shape[d] for d in kept], 1), ([x.shape[d] for d in axes], 1), ([xst[d] for d in kept], 0),
        ([ost[d] for d in kept], 0), ([xst[d] for d in axes], 0), ([ost[d] for d in axes], 0)))
    rows, n = math.prod(geometry[0]), math.prod(geometry[1])
    (blockscan.scan if by_blocks else _chunked)(os, xs, geometry, rows, n, acc, mode)
    return out if direct else copy_strided(out, memory.empty(x.shape, out_dtype))


def _chunked(os, xs, geometry, rows, n, acc, mode):
    """The scan of the rows of x (span xs) into out (span os) by chunks of about sqrt(n) elements."""
    chunk = max(MIN_CHUNK, math.isqrt(n))
    nchunks = -(-n // chunk)
    ident = acc.type(int(mode == EXCLUSIVE_PRODUCT))
    product = mode == EXCLUSIVE_PRODUCT
    tot, pre, suf = (memory.empty((rows * nchunks,), acc) for _ in range(3))
    blocks, threads = launch_config(rows * nchunks)
    _totals[blocks, threads](tot, xs, *geometry, n, chunk, nchunks, rows, ident, product)
    rblocks, rthreads = launch_config(rows)
    _running[rblocks, rthreads](tot, pre, suf, rows, nchunks, ident, product)
    _finish[blocks, threads](os, xs, pre, suf, *geometry, n, chunk, nchunks, rows, mode)


@cuda.jit(device=True)
def _offsets(r, j, kshape, rshape, xk, ok, xr, orr):
    """The offsets in x and out of element j of row r."""
    xa, oa = _unravel(r, kshape, xk, ok)
    xb, ob = _unravel(j, rshape, xr, orr)
    return xa + xb, oa + ob


@cuda.jit
def _totals(tot, x, kshape, rshape, xk, ok, xr, orr, n, chunk, nchunks, rows, ident, product):
    """tot[c * rows + r]: the sum (product) of chunk c of row r."""
    t = cuda.grid(1)
    while t < rows * nchunks:
        r = t % rows
        c = t // rows
        acc = ident
        j = c * chunk
        hi = j + chunk if j + chunk < n else n        # (numba.cuda cannot type min() of two ints)
        while j < hi:
            xo, _ = _offsets(r, j, kshape, rshape, xk, ok, xr, orr)
            acc = acc * x[xo] if product else acc + x[xo]
            j += 1
        tot[t] = acc
        t += cuda.gridsize(1)


@cuda.jit
def _running(tot, pre, suf, rows, nchunks, ident, product):
    """pre/suf[c * rows + r]: the sum (product) of row r's chunks before/after chunk c."""
    r = cuda.grid(1)
    while r < rows:
        acc = ident
        for c in range(nchunks):
            pre[c * rows + r] = acc
            acc = acc * tot[c * rows + r] if product else acc + tot[c * rows + r]
        acc = ident
        for c in range(nchunks - 1, -1, -1):
            suf[c * rows + r] = acc
            acc = acc * tot[c * rows + r] if product else acc + tot[c * rows + r]
        r += cuda.gridsize(1)


@cuda.jit
def _finish(out, x, pre, suf, kshape, rshape, xk, ok, xr, orr, n, chunk, nchunks, rows, mode):
    """Each (row, chunk) walks its elements again from its running total: inclusive sums forward
    (CUMSUM) or backward (REVERSE); EXCLUSIVE_PRODUCT: the products before each element forward
    into out, then times the products after it backward (out is of the accumulator's dtype)."""
    t = cuda.grid(1)
    while t < rows * nchunks:
        r = t % rows
        c = t // rows
        lo = c * chunk
        hi = lo + chunk if lo + chunk < n else n
        if mode != 1:
            acc = pre[t]
            j = lo
            while j < hi:
                xo, oo = _offsets(r, j, kshape, rshape, xk, ok, xr, orr)
                if mode == 0:
                    acc = acc + x[xo]
                    out[oo] = acc
                else:
                    out[oo] = acc
                    acc = acc * x[xo]
                j += 1
        if mode != 0:
            acc = suf[t]
            j = hi - 1
            while j >= lo:
                xo, oo = _offsets(r, j, kshape, rshape, xk, ok, xr, orr)
                if mode == 1:
                    acc = acc + x[xo]
                    out[oo] = acc
                else:
                    out[oo] = out[oo] * acc
                    acc = acc * x[xo]
                j -= 1
        t += cuda.gridsize(1)
