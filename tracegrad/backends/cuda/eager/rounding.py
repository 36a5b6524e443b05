"""floor, round (half to even), floordiv and remainder on the device, with NumPy's (= Python's and
PyTorch's) rules: floordiv rounds the quotient down, remainder takes the divisor's sign, an integer
zero divisor raises ZeroDivisionError (as on the cpu), a float zero divisor gives inf/nan as NumPy's
divmod. Operands broadcast through stride-0 views; float16 is computed in float32 (exact).
"""
import math

import numpy as np
from numba import cuda

from .. import memory
from .kernels import copy_strided, launch_config

BIG = 4503599627370496.0      # 2**52: every float this large is an integer


@cuda.jit(device=True)
def _floor(a):
    if a != a or a == 0 or a >= BIG or a <= -BIG:      # NaN, inf, +-0 and large values are their floor
        return a
    t = float(int(a))
    if t > a:
        t -= 1.0
    return t


@cuda.jit(device=True)
def _round(a):
    if a != a or a == 0 or a >= BIG or a <= -BIG:
        return a
    r = _floor(a)
    d = a - r
    if d > 0.5 or (d == 0.5 and r - 2.0 * _floor(r * 0.5) != 0):
        r += 1.0
    return math.copysign(r, a) if r == 0 else r


@cuda.jit(device=True)
def _fmod(a, b):
    """C's fmod (NaN for an infinite or NaN a, a NaN or zero b; Python's math.fmod raises there)."""
    if a != a or b != b or b == 0 or a == math.inf or a == -math.inf:
        return math.nan
    return math.fmod(a, b)


@cuda.jit(device=True)
def _divmod(a, b):
    """NumPy's npy_divmod for floats: (floor quotient, remainder with b's sign)."""
    mod = _fmod(a, b)
    if b == 0:
        return a / b, mod
    div = (a - mod) / b
    if mod != 0:
        if (b < 0) != (mod < 0):
            mod += b
            div -= 1.0
    else:
        mod = math.copysign(0.0, b)
    if div != 0:
        q = _floor(div)
        if div - q > 0.5:
            q += 1.0
    else:
        q = math.copysign(0.0, a / b)
    return q, mod


def _elementwise(scalar, arity):
    """A grid-stride kernel applying device function `scalar` to 1 or 2 strided operands."""
    if arity == 1:
        @cuda.jit
        def kernel(out, a, shape, sa, n, err):
            i = cuda.grid(1)
            while i < n:
                j, oa = i, 0
                for k in range(len(shape) - 1, -1, -1):
                    q = j % shape[k]
                    j //= shape[k]
                    oa += q * sa[k]
                out[i] = scalar(a[oa], 1, err)
                i += cuda.gridsize(1)
        return kernel

    @cuda.jit
    def kernel(out, a, b, shape, sa, sb, n, err):
        i = cuda.grid(1)
        while i < n:
            j, oa, ob = i, 0, 0
            for k in range(len(shape) - 1, -1, -1):
                q = j % shape[k]
                j //= shape[k]
                oa += q * sa[k]
                ob += q * sb[k]
            out[i] = scalar(a[oa], b[ob], err)
            i += cuda.gridsize(1)
    return kernel


@cuda.jit(device=True)
def _floor_s(a, b, err):
    return _floor(a)


@cuda.jit(device=True)
def _round_s(a, b, err):
    return _round(a)


@cuda.jit(device=True)
def _floordiv_f(a, b, err):
    return _divmod(a, b)[0]


@cuda.jit(device=True)
def _remainder_f(a, b, err):
    return _divmod(a, b)[1]


@cuda.jit(device=True)
def _floordiv_i(a, b, err):
    if b == 0:
        err[0] = 1
        return 0
    return int(a) // int(b)


@cuda.jit(device=True)
def _remainder_i(a, b, err):
    if b == 0:
        err[0] = 1
        return 0
    return int(a) % int(b)


_KERNELS = {("floor", "f"): _elementwise(_floor_s, 1), ("round", "f"): _elementwise(_round_s, 1),
            ("floordiv", "f"): _elementwise(_floordiv_f, 2), ("remainder", "f"): _elementwise(_remainder_f, 2),
            ("floordiv", "i"): _elementwise(_floordiv_i, 2), ("remainder", "i"): _elementwise(_remainder_i, 2)}


def run_floor(arrays, attrs, shape, dtype):
    return run("floor", arrays, shape, dtype)


def run_round(arrays, attrs, shape, dtype):
    return run("round", arrays, shape, dtype)


def run_floordiv(arrays, attrs, shape, dtype):
    return run("floordiv", arrays, shape, dtype)


def run_remainder(arrays, attrs, shape, dtype):
    return run("remainder", arrays, shape, dtype)


def run(name, arrays, shape, dtype):
    """Primitive `name` of device `arrays` broadcast to `shape`; a new row-major device array of numpy
    `dtype` (the type rule's)."""
    dtype = np.dtype(dtype)
    if len(arrays) == 1 and dtype.kind != "f":        # integers and bools are their own floor and round
        return copy_strided(_broadcast(arrays[0], shape), memory.empty(shape, dtype))
    work = np.dtype(np.float32) if dtype == np.float16 else dtype
    arrays = [a if a.dtype == work else copy_strided(a, memory.empty(a.shape, work)) for a in arrays]
    out = memory.empty(shape, work)
    n = math.prod(shape)
    if n:
        kernel = _KERNELS[(name, "f" if work.kind == "f" else "i")]
        views = [memory.span(_broadcast(a, shape or (1,))) for a in arrays]
        err = memory.copy(np.zeros(1, np.int32), "device")
        blocks, threads = launch_config(n)
        kernel[blocks, threads](memory.view(out, (n,), (1,)), *[v for v, _ in views], shape or (1,),
                                *[s for _, s in views], n, err)
        if work.kind != "f" and memory.copy(err, "host")[0]:     # (one read back, integer division only)
            raise RuntimeError("ZeroDivisionError")
    return out if work == dtype else copy_strided(out, memory.empty(shape, dtype))


def _broadcast(a, shape):
    shape = tuple(shape) or (1,)
    a = memory.view(a, (1,), (1,)) if a.ndim == 0 else a
    lead = len(shape) - a.ndim
    strides = [0] * lead + [0 if n == 1 and m != 1 else s for n, m, s in
                            zip(a.shape, shape[lead:], memory.strides_of(a))]
    return a if tuple(a.shape) == shape else memory.view(a, shape, strides)
