"""argmax / argmin on the device: int64 indices with NumPy's rules (the first occurrence of the
extreme wins a tie; a NaN counts as the extreme, so the first NaN wins), over one axis of any
strided input (keepdims or not) or over the whole tensor (its row-major flat index).

Over an axis each thread scans one row of the reduced axis. Over the whole tensor the flat elements
are cut into consecutive chunks, one thread per chunk, and one thread joins the chunks' winners in
order (so the first occurrence still wins). float16 is compared as float32 (exact).
"""
import functools
import math

import numpy as np
from numba import cuda

from ....strides import contiguous_strides
from .. import memory
from .kernels import _unravel, copy_strided, launch_config


@functools.lru_cache(maxsize=None)
def _kernels(is_max):
    """(scan kernel, join kernel) for argmax (is_max) or argmin."""
    @cuda.jit(device=True)
    def better(v, best):
        if best != best:             # a NaN already won
            return False
        if v != v:
            return True
        return v > best if is_max else v < best

    @cuda.jit
    def scan(idx, val, x, kshape, xstrides, ostrides, length, step, chunk, total, nout):
        """Output i: the winner among x's `length` elements `step` apart from row i's start (their
        reported index: i * chunk + k, below `total`)."""
        i = cuda.grid(1)
        while i < nout:
            xo, oo = _unravel(i, kshape, xstrides, ostrides)
            first = i * chunk
            best = x[xo]
            at = 0
            k = 1
            while k < length and first + k < total:
                v = x[xo + k * step]
                if better(v, best):
                    best = v
                    at = k
                k += 1
            idx[oo] = first + at
            val[oo] = best
            i += cuda.gridsize(1)

    @cuda.jit
    def join(out, idx, val, n):
        """out[0]: the index of the first winner among n chunk winners (in flat order)."""
        if cuda.grid(1) == 0:
            best = val[0]
            at = idx[0]
            for j in range(1, n):
                if better(val[j], best):
                    best = val[j]
                    at = idx[j]
            out[0] = at

    return scan, join


PARTS = 4096          # most chunks (threads) of a whole-tensor scan


def run_argmax(arrays, attrs, shape, dtype):
    return run(_kernels(True), arrays[0], attrs["axis"], shape)


def run_argmin(arrays, attrs, shape, dtype):
    return run(_kernels(False), arrays[0], attrs["axis"], shape)


def run(kernels, x, axis, shape):
    """argmax or argmin (`kernels`) of device array x over `axis` (None: all elements), as a new int64
    device array of `shape` (the type rule's)."""
    scan, join = kernels
    if x.dtype == np.float16:
        x = copy_strided(x, memory.empty(x.shape, np.float32))
    if x.ndim == 0:
        x = memory.view(x, (1,), (1,))
    if axis is None:
        return _flat(scan, join, x, shape)
    axis %= x.ndim
    kshape = tuple(1 if d == axis else n for d, n in enumerate(x.shape))
    nout = math.prod(kshape)
    idx = memory.empty(kshape, np.int64)
    if nout:
        val = memory.empty(kshape, x.dtype)
        xs, xst = memory.span(x)
        ost = memory.strides_of(idx)
        blocks, threads = launch_config(nout)
        scan[blocks, threads](memory.span(idx)[0], memory.span(val)[0], xs, kshape, xst, ost,
                              x.shape[axis], xst[axis], 0, x.shape[axis], nout)
    return memory.view(idx, shape, contiguous_strides(shape))


def _flat(scan, join, x, shape):
    n = x.size
    if not memory.row_major(x):
        x = copy_strided(x, memory.empty(x.shape, x.dtype))
    flat = memory.view(x, (n,), (1,))
    parts = min(n, PARTS)
    chunk = math.ceil(n / parts)
    parts = math.ceil(n / chunk)
    idx, val = memory.empty((parts,), np.int64), memory.empty((parts,), x.dtype)
    blocks, threads = launch_config(parts)
    scan[blocks, threads](idx, val, flat, (parts,), (chunk,), (1,), chunk, 1, chunk, n, parts)
    out = memory.empty((1,), np.int64)
    join[1, 1](out, idx, val, parts)
    return memory.view(out, shape, contiguous_strides(shape))
