"""numba.cuda kernels that move data: strided copy (with broadcasting sources), fill, gather and
scatter-add (integer-tensor indexing and its gradient), and the counter-based random numbers.

Every kernel indexes its arrays through flat 1-D views (arrays.span) with strides passed as tuples,
so one kernel serves every rank and layout (numba compiles one version per dtype and rank, once).
Each thread walks a grid-stride loop over the output elements. Copies, fills and gathers move raw
elements; float16 moves as int16 bits (no float16 arithmetic happens here).
"""
import math

import numpy as np
from numba import cuda

from .. import arrays

MASK32 = 0xFFFFFFFF


def launch_config(n, threads=256):
    """(blocks, threads per block) for a grid-stride loop over n elements."""
    t = min(threads, 32 * max(1, math.ceil(n / 32)))
    return min(max(1, math.ceil(n / t)), 4096), t


def _bits(dtype):
    """The dtype kernels move `dtype`'s elements as (float16 as int16: numba has no float16 loads on
    every target)."""
    return np.dtype(np.int16) if np.dtype(dtype) == np.float16 else np.dtype(dtype)


@cuda.jit(device=True)
def _unravel(i, shape, strides_a, strides_b):
    """Offsets of element i (row-major over `shape`) in two layouts."""
    a = 0
    b = 0
    for k in range(len(shape) - 1, -1, -1):
        q = i % shape[k]
        i //= shape[k]
        a += q * strides_a[k]
        b += q * strides_b[k]
    return a, b


@cuda.jit
def _copy(dst, src, shape, dstrides, sstrides, n):
    i = cuda.grid(1)
    while i < n:
        d, s = _unravel(i, shape, dstrides, sstrides)
        dst[d] = src[s]
        i += cuda.gridsize(1)


@cuda.jit
def _fill(dst, value, n):
    i = cuda.grid(1)
    while i < n:
        dst[i] = value
        i += cuda.gridsize(1)


def _as_nd(arr):
    """arr, with a 0-d array seen as 1-D (numba kernels take tuples of at least one stride)."""
    return arrays.view(arr, (1,), (1,)) if arr.ndim == 0 else arr


def copy_strided(src, dst):
    """dst[...] = src, elementwise: same shape (a broadcast source is a view with zero strides), any
    layouts; the element types convert as assignment does (int32 -> int64)."""
    if src.shape != dst.shape:
        raise ValueError(f"copy_strided: shapes {src.shape} and {dst.shape} differ")
    n = dst.size
    if n == 0:
        return dst
    if src.dtype == dst.dtype and arrays.row_major(src) and arrays.row_major(dst) \
            and arrays.strides_of(src) == arrays.strides_of(dst):
        arrays.copy_on_device(src, dst)        # one memcpy
        return dst
    src, dst_nd = _as_nd(src), _as_nd(dst)
    bits = _bits(src.dtype) if src.dtype == dst.dtype else None
    s, sst = arrays.span(src, bits)
    d, dst_st = arrays.span(dst_nd, bits)
    blocks, threads = launch_config(n)
    _copy[blocks, threads](d, s, dst_nd.shape, dst_st, sst, n)
    return dst


def fill(dst, value):
    """Every element of the row-major device array dst set to `value`."""
    n = dst.size
    if n:
        blocks, threads = launch_config(n)
        d, _ = arrays.span(dst, _bits(dst.dtype))
        value = np.array(value).astype(dst.dtype).view(d.dtype).reshape(())[()]   # the element's bits, typed
        _fill[blocks, threads](d, value, n)
    return dst


def zeros(shape, dtype):
    return fill(arrays.empty(shape, dtype), 0)


# ------------------------------------------------------------ integer-tensor indexing
@cuda.jit(device=True)
def _indexed(i, oshape, xmap, bmap, idx, bsize, sizes, xstrides, err):
    """The offset in x of output element i: its plain axes through xmap, the indexed axes through
    the index values (negative counts from the end; out of range sets the error flag)."""
    xo, bo = _unravel(i, oshape, xmap, bmap)
    for j in range(len(sizes)):
        v = idx[j * bsize + bo]
        if v < 0:
            v += sizes[j]
        if v < 0 or v >= sizes[j]:
            err[0] = 1
            v = 0
        xo += v * xstrides[j]
    return xo


@cuda.jit
def _gather(out, x, idx, oshape, xmap, bmap, bsize, sizes, xstrides, err, n):
    i = cuda.grid(1)
    while i < n:
        out[i] = x[_indexed(i, oshape, xmap, bmap, idx, bsize, sizes, xstrides, err)]
        i += cuda.gridsize(1)


@cuda.jit
def _scatter_add(out, g, idx, oshape, xmap, bmap, bsize, sizes, xstrides, err, n):
    i = cuda.grid(1)
    while i < n:
        cuda.atomic.add(out, _indexed(i, oshape, xmap, bmap, idx, bsize, sizes, xstrides, err), g[i])
        i += cuda.gridsize(1)


def _index_plan(x_shape, x_strides, indices, axes, out_shape):
    """What the gather/scatter kernels need for x[indices at axes] (PyTorch's order of result axes:
    the broadcast index axes in place of adjacent indexed axes, else first)."""
    bshape = np.broadcast_shapes(*[i.shape for i in indices])
    bsize = math.prod(bshape)
    stacked = arrays.empty((len(indices),) + bshape, np.int64)   # the index values, broadcast, as int64
    for j, ix in enumerate(indices):
        target = arrays.view(stacked, bshape, arrays.strides_of(stacked)[1:], j * bsize)
        copy_strided(arrays.view(ix, bshape, _broadcast_strides(ix, bshape)), target)
    rest = [k for k in range(len(x_shape)) if k not in axes]
    adjacent = list(axes) == list(range(axes[0], axes[0] + len(axes)))
    first = axes[0] if adjacent else 0       # where the broadcast index axes sit in the output
    bstr = arrays.strides_of(stacked)[1:]
    xmap, bmap = [], []
    for k in range(len(out_shape)):
        if first <= k < first + len(bshape):
            xmap.append(0)
            bmap.append(bstr[k - first])
        else:
            r = rest[k if k < first else k - len(bshape)]
            xmap.append(x_strides[r])
            bmap.append(0)
    sizes = tuple(x_shape[a] for a in axes)
    xstr = tuple(x_strides[a] for a in axes)
    if not out_shape:
        out_shape, xmap, bmap = (1,), [0], [0]
    span, _ = arrays.span(stacked)
    return span, tuple(out_shape), tuple(xmap), tuple(bmap), bsize, sizes, xstr


def _broadcast_strides(arr, shape):
    st = arrays.strides_of(arr)
    off = len(shape) - arr.ndim
    return (0,) * off + tuple(0 if n == 1 and shape[off + k] != 1 else s for k, (n, s) in enumerate(zip(arr.shape, st)))


def gather(x, indices, axes, out_shape):
    """x[..., indices at `axes`, ...] into a new row-major array (integer-tensor indexing)."""
    out = arrays.empty(out_shape, x.dtype)
    n = out.size
    if n:
        idx, oshape, xmap, bmap, bsize, sizes, xstr = _index_plan(x.shape, arrays.strides_of(x), indices, axes,
                                                                  out_shape)
        xs, _ = arrays.span(x, _bits(x.dtype))
        blocks, threads = launch_config(n)
        o, _ = arrays.span(out, _bits(x.dtype))
        _gather[blocks, threads](o, xs, idx, oshape, xmap, bmap, bsize, sizes, xstr, arrays.error_flag(), n)
    return out


def scatter_add(g, indices, axes, shape):
    """zeros(shape) with g's elements added at the positions `indices` select (repeats accumulate):
    the transpose of gather, with atomic adds."""
    out = zeros(shape, g.dtype)
    n = g.size
    if n:
        if g.dtype == np.float16:        # atomic adds in float32, each sum rounded to float16 once
            wide = scatter_add(copy_strided(g, arrays.empty(g.shape, np.float32)), indices, axes, shape)
            return copy_strided(wide, out)
        if g.dtype == np.bool_:
            raise NotImplementedError(f"index_add (the gradient of integer-tensor indexing) of {g.dtype} on "
                                      f"cuda:0 has no device kernel; use an integer or float dtype, or .cpu()")
        if not arrays.row_major(g):
            g = contiguous(g)
        idx, oshape, xmap, bmap, bsize, sizes, xstr = _index_plan(shape, arrays.strides_of(out), indices, axes,
                                                                  g.shape)
        blocks, threads = launch_config(n)
        o, _ = arrays.span(out)
        gs, _ = arrays.span(_as_nd(g))
        _scatter_add[blocks, threads](o, gs, idx, oshape, xmap, bmap, bsize, sizes, xstr, arrays.error_flag(), n)
    return out


# ------------------------------------------------------------ random numbers
@cuda.jit(device=True)
def _hash32(x):
    """A 32-bit integer hash (Wellons' lowbias32); the masks keep it exact in 64-bit arithmetic."""
    x ^= x >> 16
    x = (x * 0x7FEB352D) & MASK32
    x ^= x >> 15
    x = (x * 0x846CA68B) & MASK32
    x ^= x >> 16
    return x


@cuda.jit(device=True)
def _word(c, k1, k2):
    """The 32 random bits of counter c under key (k1, k2)."""
    return _hash32((_hash32((c & MASK32) ^ k1) + (c >> 32) + k2) & MASK32)


@cuda.jit(device=True)
def _uniform53(c, k1, k2):
    """A float64 in [0, 1) from 53 random bits (two words of the counters 2c, 2c+1)."""
    a = _word(2 * c, k1, k2) >> 5
    b = _word(2 * c + 1, k1, k2) >> 6
    return (a * 67108864.0 + b) / 9007199254740992.0


@cuda.jit
def _rand(out, k1, k2, bits24, n):
    i = cuda.grid(1)
    while i < n:
        if bits24:        # float32: 24 bits, so rounding never reaches 1.0
            out[i] = (_word(2 * i, k1, k2) >> 8) / 16777216.0
        else:
            out[i] = _uniform53(i, k1, k2)
        i += cuda.gridsize(1)


@cuda.jit
def _randn(out, k1, k2, n):
    i = cuda.grid(1)
    while i < n:
        u1 = 1.0 - _uniform53(2 * i, k1, k2)          # (0, 1]: the log is finite
        u2 = _uniform53(2 * i + 1, k1, k2)
        out[i] = math.sqrt(-2.0 * math.log(u1)) * math.cos(6.283185307179586 * u2)
        i += cuda.gridsize(1)


def random(name, shape, dtype, key):
    """rand (uniform in [0, 1)) or randn (standard normal) of float32/float64, from the 64-bit `key`:
    element i depends only on (key, i), so a seed reproduces the draw on any launch configuration.
    None for another name."""
    if name != "rand" and name != "randn":
        return None
    out = arrays.empty(shape, dtype)
    n = out.size
    if n:
        k1, k2 = int(key) & MASK32, (int(key) >> 32) & MASK32
        blocks, threads = launch_config(n)
        o, _ = arrays.span(out)
        if name == "rand":
            _rand[blocks, threads](o, k1, k2, np.dtype(dtype) == np.float32, n)
        else:
            _randn[blocks, threads](o, k1, k2, n)
    return out


@cuda.jit
def _arange(out, start, step, n):
    i = cuda.grid(1)
    while i < n:
        out[i] = start + i * step
        i += cuda.gridsize(1)


def arange(n, start, step, dtype, exact_int):
    """start, start + step, ... (n values) as `dtype`: in int64 when start and step are integers (exact),
    else in float64 (as the cpu's arange), then stored as dtype."""
    out = arrays.empty((n,), dtype)
    if n:
        blocks, threads = launch_config(n)
        start, step = (int(start), int(step)) if exact_int else (float(start), float(step))
        _arange[blocks, threads](out, start, step, n)
    return out


@cuda.jit
def _put(x, xshape, xstrides, pos, v, pshape, vstrides, n):
    i = cuda.grid(1)
    while i < n:
        xo, _ = _unravel(pos[i], xshape, xstrides, xstrides)
        vo, _ = _unravel(i, pshape, vstrides, vstrides)
        x[xo] = v[vo]
        i += cuda.gridsize(1)


def put(x, pos, v):
    """x's elements at the row-major flat positions `pos` (int64) take v's (v: pos's shape, any strides;
    a position given twice takes one of its values, as PyTorch's index_put_ on CUDA)."""
    n = pos.size
    if n:
        pos, v, x = contiguous(pos) if not arrays.row_major(pos) else pos, _as_nd(v), _as_nd(x)
        ps, _ = arrays.span(_as_nd(pos))
        xs, xst = arrays.span(x, _bits(x.dtype))
        vs, vst = arrays.span(v, _bits(v.dtype))
        blocks, threads = launch_config(n)
        _put[blocks, threads](xs, tuple(x.shape), xst, ps, vs, tuple(v.shape), vst, n)
    return x


def contiguous(arr):
    """A row-major copy of the device array arr, made on the device."""
    out = arrays.empty(arr.shape, arr.dtype)
    copy_strided(arr, out)
    return out
