"""Block-level scans of long rows on the device (cumsum from either end, prod_others): scan.py hands
over rows of at least LONG_ROW elements whose last scanned axis is contiguous in memory, where its
thread-per-chunk scan would read memory with a stride and leave most of the GPU idle.

A row is cut into tiles of TILE = THREADS * ITEMS consecutive elements, a block per (tile, row):
1. totals: each block reads its tile (coalesced: thread t reads elements t, t + THREADS, ...) and
   reduces it in shared memory to the tile's total;
2. carries: a block per row scans the row's tile totals (a tile of them at a time, carrying from
   one to the next) into exclusive running totals from the start and from the end;
3. finish: each block reads its tile again into shared memory and scans it there (each thread its
   ITEMS consecutive elements, then the threads' totals by a Kogge-Stone scan), joins the tile's
   carry and writes the tile (coalesced).
The input is read twice, the output written once (rows of one tile: read once, by finish alone).
Shared-memory positions are padded (one slot per 32) so that threads walking ITEMS consecutive
elements hit different banks. Elements are converted to the accumulator's dtype as they are loaded
(float16 and bool inputs need no converted copy); a float16 result is stored rounded once.
"""
import functools

import numpy as np
from numba import cuda
from numba.np.numpy_support import from_dtype

from .. import memory
from .kernels import _unravel

THREADS = 256        # threads per block
ITEMS = 8            # elements per thread in a tile
LONG_ROW = 1024      # the shortest row scanned by blocks
MAX_GRID = 65535     # blocks along each grid dimension (larger spaces loop)


def use_blocks(n, x_strides_along):
    """Whether a scan of rows of n elements, x's strides along the scanned axes `x_strides_along`
    (in elements, row-major order), takes the block path."""
    return n >= LONG_ROW and x_strides_along[-1] == 1


def scan(out, xs, geometry, rows, n, acc, mode):
    """Scan `mode` (scan.py's CUMSUM, REVERSE, EXCLUSIVE_PRODUCT) of the rows of x (its span `xs`)
    into `out`'s span, geometry as scan.py's: (kept shape, scanned shape, x's and out's strides along
    the kept axes, x's and out's strides along the scanned axes)."""
    acc = np.dtype(acc)
    totals, carries, finish = kernels(acc.name, THREADS, ITEMS)
    tile = THREADS * ITEMS
    ntiles = -(-n // tile)
    ident = acc.type(int(mode == 2))
    tot, pre, suf = (memory.empty((rows * ntiles,), acc) for _ in range(3))
    kshape, rshape, xk, ok, xr, orr = geometry
    grid = (min(ntiles, MAX_GRID), min(rows, MAX_GRID))
    if ntiles > 1:                   # rows of one tile have no carries: finish alone, from the identity
        totals[grid, THREADS](tot, xs, kshape, rshape, xk, xr, n, ntiles, rows, ident, mode == 2)
        carries[min(rows, MAX_GRID), THREADS](tot, pre, suf, ntiles, rows, ident, mode)
    finish[grid, THREADS](out, xs, pre, suf, kshape, rshape, xk, ok, xr, orr, n, ntiles, rows, ident, mode)


@cuda.jit(device=True)
def _pad(i):
    return i + (i >> 5)


@cuda.jit(device=True)
def _along(j, rshape, xr, orr):
    """The offsets in x and out of element j along a row."""
    if len(rshape) == 1:
        return j * xr[0], j * orr[0]
    return _unravel(j, rshape, xr, orr)


@cuda.jit(device=True)
def _join(a, b, product):
    return a * b if product else a + b


@cuda.jit(device=True)
def _block_scan(buf, sums, tid, threads, items, ident, product, backward):
    """Inclusive scan, in place, of the threads * items values in buf (padded positions; from the
    last position when `backward`); returns their total. Every thread of the block calls it, after
    a barrier that follows the writes to buf."""
    last = threads * items - 1
    acc = ident
    for k in range(items):
        q = tid * items + k
        i = _pad(last - q if backward else q)
        acc = _join(acc, buf[i], product)
        buf[i] = acc
    sums[tid] = acc
    cuda.syncthreads()
    d = 1
    while d < threads:                       # Kogge-Stone over the threads' totals
        v = sums[tid - d] if tid >= d else ident
        cuda.syncthreads()
        if tid >= d:
            sums[tid] = _join(v, sums[tid], product)
        cuda.syncthreads()
        d *= 2
    carry = sums[tid - 1] if tid > 0 else ident
    for k in range(items):
        q = tid * items + k
        i = _pad(last - q if backward else q)
        buf[i] = _join(carry, buf[i], product)
    total = sums[threads - 1]
    cuda.syncthreads()
    return total


@functools.lru_cache(maxsize=None)
def kernels(acc_name, threads, items):
    """(totals, carries, finish): the three kernels for accumulator dtype `acc_name`, blocks of
    `threads` threads, tiles of threads * items elements."""
    acc = from_dtype(np.dtype(acc_name))
    tile = threads * items
    padded = tile + tile // 32

    @cuda.jit
    def totals(tot, x, kshape, rshape, xk, xr, n, ntiles, rows, ident, product):
        """tot[r * ntiles + b]: the sum (product) of tile b of row r."""
        sums = cuda.shared.array(threads, acc)
        tid = cuda.threadIdx.x
        r = cuda.blockIdx.y
        while r < rows:
            base, _ = _unravel(r, kshape, xk, xk)
            b = cuda.blockIdx.x
            while b < ntiles:
                part = ident
                for k in range(items):
                    j = b * tile + k * threads + tid
                    if j < n:
                        xo, _ = _along(j, rshape, xr, xr)
                        part = _join(part, acc(x[base + xo]), product)
                sums[tid] = part
                cuda.syncthreads()
                s = threads // 2
                while s > 0:
                    if tid < s:
                        sums[tid] = _join(sums[tid], sums[tid + s], product)
                    cuda.syncthreads()
                    s //= 2
                if tid == 0:
                    tot[r * ntiles + b] = sums[0]
                cuda.syncthreads()
                b += cuda.gridDim.x
            r += cuda.gridDim.y

    @cuda.jit
    def carries(tot, pre, suf, ntiles, rows, ident, mode):
        """pre/suf[r * ntiles + b]: the sum (product) of row r's tiles before/after tile b (pre for
        modes 0 and 2, suf for modes 1 and 2)."""
        buf = cuda.shared.array(padded, acc)
        sums = cuda.shared.array(threads, acc)
        tid = cuda.threadIdx.x
        product = mode == 2
        nchunks = (ntiles + tile - 1) // tile
        r = cuda.blockIdx.x
        while r < rows:
            for direction in range(2):
                backward = direction == 1
                if (backward and mode != 0) or (not backward and mode != 1):
                    carry = ident
                    for step in range(nchunks):
                        c0 = ((nchunks - 1 - step) if backward else step) * tile
                        for k in range(items):
                            p = k * threads + tid
                            buf[_pad(p)] = tot[r * ntiles + c0 + p] if c0 + p < ntiles else ident
                        cuda.syncthreads()
                        total = _block_scan(buf, sums, tid, threads, items, ident, product, backward)
                        for k in range(items):
                            p = k * threads + tid
                            if c0 + p < ntiles:
                                if backward:
                                    after = buf[_pad(p + 1)] if p < tile - 1 else ident
                                    suf[r * ntiles + c0 + p] = _join(carry, after, product)
                                else:
                                    before = buf[_pad(p - 1)] if p > 0 else ident
                                    pre[r * ntiles + c0 + p] = _join(carry, before, product)
                        cuda.syncthreads()
                        carry = _join(carry, total, product)
            r += cuda.gridDim.x

    @cuda.jit
    def finish(out, x, pre, suf, kshape, rshape, xk, ok, xr, orr, n, ntiles, rows, ident, mode):
        """Each tile scanned in shared memory from its carry: inclusive sums forward (mode 0) or
        backward (1); mode 2: the product of the elements before times the product of those after."""
        fwd = cuda.shared.array(padded, acc)
        bwd = cuda.shared.array(padded, acc)
        sums = cuda.shared.array(threads, acc)
        tid = cuda.threadIdx.x
        product = mode == 2
        r = cuda.blockIdx.y
        while r < rows:
            xbase, obase = _unravel(r, kshape, xk, ok)
            b = cuda.blockIdx.x
            while b < ntiles:
                start = b * tile
                for k in range(items):
                    p = k * threads + tid
                    v = ident
                    if start + p < n:
                        xo, _ = _along(start + p, rshape, xr, orr)
                        v = acc(x[xbase + xo])
                    if mode != 1:
                        fwd[_pad(p)] = v
                    if mode != 0:
                        bwd[_pad(p)] = v
                cuda.syncthreads()
                if mode != 1:
                    _block_scan(fwd, sums, tid, threads, items, ident, product, False)
                if mode != 0:
                    _block_scan(bwd, sums, tid, threads, items, ident, product, True)
                t = r * ntiles + b
                head = pre[t] if ntiles > 1 else ident
                tail = suf[t] if ntiles > 1 else ident
                for k in range(items):
                    p = k * threads + tid
                    if start + p < n:
                        _, oo = _along(start + p, rshape, xr, orr)
                        if mode == 0:
                            out[obase + oo] = head + fwd[_pad(p)]
                        elif mode == 1:
                            out[obase + oo] = tail + bwd[_pad(p)]
                        else:
                            before = fwd[_pad(p - 1)] if p > 0 else ident
                            after = bwd[_pad(p + 1)] if p < tile - 1 else ident
                            out[obase + oo] = (head * before) * (after * tail)
                cuda.syncthreads()
                b += cuda.gridDim.x
            r += cuda.gridDim.y
    return totals, carries, finish
