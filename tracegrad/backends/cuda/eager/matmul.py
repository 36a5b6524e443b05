"""Matrix products on the device: cuBLAS on a GPU, a tiled shared-memory kernel where cuBLAS is missing
(numba's simulator, or no libcublas found), with a one-time warning there.

cuBLAS is reached through ctypes on the runtime library itself (libcublas.so.12 of the nvidia-cublas-cu12
wheel the `gpu` extra installs, libcublas.so.13 of CUDA 13's nvidia-cublas, or the system's): one small
binding of four functions over numba's device pointers, with no other Python package to install or
keep in step with numba. cuBLAS works
column-major, so the row-major C = A @ B is computed as C^T = B^T @ A^T; transposed operands (unit
stride along rows) are passed as transposed, other layouts are copied first.

Shapes as NumPy's matmul of 2-D or batched operands (the primitive's rule): batch dimensions
broadcast (a broadcast operand has batch stride 0).
"""
import ctypes
import ctypes.util
import functools
import math
import os
import sys
import warnings

import numpy as np
from numba import cuda

from .. import memory
from ..gpu import simulated

TILE = 16


def matmul(a, b, shape):
    """a @ b for device arrays of shapes (..., M, K) and (..., K, N): a new row-major (..., M, N)
    (float16: computed in float32)."""
    (m, k), n = tuple(a.shape)[-2:], tuple(b.shape)[-1]
    dtype = a.dtype
    if dtype == np.float16:              # as PyTorch: products and sums in float32, rounded to float16 once
        from .kernels import copy_strided
        wide = matmul(*(copy_strided(x, memory.empty(x.shape, np.float32)) for x in (a, b)), shape)
        return copy_strided(wide, memory.empty(shape, dtype))
    if dtype not in (np.float32, np.float64, np.int32, np.int64):
        raise NotImplementedError(f"no device kernel for this dtype (float32, float64, int32, int64 have one)")
    out = memory.empty(shape, dtype)
    if out.size == 0:
        return out
    if k == 0:
        from .kernels import fill
        return fill(out, 0)
    batch = shape[:-2]
    a = memory.view(a, batch + (m, k), _batch_strides(a, batch))
    b = memory.view(b, batch + (k, n), _batch_strides(b, batch))
    lib = _cublas() if dtype in (np.float32, np.float64) else None
    if lib is None:
        _warn_tiled(dtype)
        _tiled(a, b, out, m, n, k)
    else:
        _gemm(lib, a, b, out, m, n, k)
    return out


def _batch_strides(x, batch):
    """x's strides (elements) with its batch axes broadcast to `batch` (zero where broadcast)."""
    st = memory.strides_of(x)
    nb = x.ndim - 2
    off = len(batch) - nb
    bst = tuple(0 if x.shape[i] == 1 and batch[off + i] != 1 else st[i] for i in range(nb))
    return (0,) * off + bst + st[-2:]


# ------------------------------------------------------------ the tiled kernel
@functools.lru_cache(maxsize=None)
def _tiled_kernel(dtype, tile):
    """C[z] = A[z] @ B[z] over flat spans: each block computes a tile x tile block of C, staging
    tiles of A and B in shared memory; z walks the broadcast batch (offsets from batch strides)."""
    from numba.np.numpy_support import from_dtype
    nbtype, zero = from_dtype(np.dtype(dtype)), np.dtype(dtype).type(0)

    @cuda.jit
    def kernel(c, a, b, bshape, abst, bbst, ars, acs, brs, bcs, m, n, k, z0):
        ta = cuda.shared.array((tile, tile), nbtype)
        tb = cuda.shared.array((tile, tile), nbtype)
        tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
        row = cuda.blockIdx.y * tile + ty
        col = cuda.blockIdx.x * tile + tx
        z = z0 + cuda.blockIdx.z
        rem, ao, bo = z, 0, 0
        for d in range(len(bshape) - 1, -1, -1):
            q = rem % bshape[d]
            rem //= bshape[d]
            ao += q * abst[d]
            bo += q * bbst[d]
        acc = zero
        for t in range((k + tile - 1) // tile):
            kk = t * tile + tx
            ta[ty, tx] = a[ao + row * ars + kk * acs] if row < m and kk < k else zero
            kk = t * tile + ty
            tb[ty, tx] = b[bo + kk * brs + col * bcs] if kk < k and col < n else zero
            cuda.syncthreads()
            for j in range(tile):
                acc += ta[ty, j] * tb[j, tx]
            cuda.syncthreads()
        if row < m and col < n:
            c[(z * m + row) * n + col] = acc

    return kernel


def _tiled(a, b, out, m, n, k, tile=None):
    tile = tile or (4 if simulated() else TILE)    # the simulator runs each thread in Python: small blocks
    batch = tuple(out.shape)[:-2]
    nb = math.prod(batch)
    bshape = batch or (1,)
    ast, bst = memory.strides_of(a), memory.strides_of(b)
    abst, bbst = ast[:-2] or (0,), bst[:-2] or (0,)
    sa, _ = memory.span(a)
    sb, _ = memory.span(b)
    sc, _ = memory.span(out)
    kernel = _tiled_kernel(out.dtype.str, tile)
    grid_x, grid_y = math.ceil(n / tile), math.ceil(m / tile)
    for z0 in range(0, nb, 65535):                  # gridDim.z is at most 65535
        kernel[(grid_x, grid_y, min(65535, nb - z0)), (tile, tile)](
            sc, sa, sb, bshape, abst, bbst, ast[-2], ast[-1], bst[-2], bst[-1], m, n, k, z0)


_WARNED = []


def _warn_tiled(dtype):
    """Say once that products run the tiled kernel. On a GPU where libcublas did not load for float32 or
    float64, that is an install fault costing ~10x: also an ERROR line on stderr, which no warning filter
    hides (tg.cuda.backend_info() says which libraries were tried)."""
    if _WARNED:
        return
    _WARNED.append(True)
    missing = not simulated() and np.dtype(dtype) in (np.float32, np.float64)
    why = ("numba's CUDA simulator has no cuBLAS" if simulated() else
           "libcublas was not found (pip install -e '.[gpu]' installs it)" if missing else
           f"no cuBLAS for {np.dtype(dtype)}")
    if missing:
        print(f"tracegrad ERROR: no cuBLAS loaded (tried: {', '.join(candidates())}); matrix products run a "
              "tiled numba.cuda kernel, about 10x slower", file=sys.stderr, flush=True)
    warnings.warn(f"tracegrad: matrix products on cuda run a tiled numba.cuda kernel: {why}", RuntimeWarning,
                  stacklevel=4)


# ------------------------------------------------------------ cuBLAS through ctypes
_HANDLE = []


def _cublas():
    """(the libcublas CDLL, a handle), or None where cuBLAS is missing (the simulator included)."""
    if simulated():
        return None
    if not _HANDLE:
        _HANDLE.append(_load())
    return _HANDLE[0]


def candidates():
    """Where libcublas may be, in the order tried: the pip wheels' (nvidia-cublas-cu12:
    nvidia/cublas/lib/libcublas.so.12; CUDA 13's nvidia-cublas: nvidia/cu13/lib/libcublas.so.13),
    then the system's (ld.so's search)."""
    names = []
    try:
        import nvidia
        for d in nvidia.__path__:
            names += [os.path.join(d, "cublas", "lib", "libcublas.so.12"),
                      os.path.join(d, "cu13", "lib", "libcublas.so.13")]
    except ImportError:
        pass
    names = [n for n in names if os.path.exists(n)]
    return names + [n for n in (ctypes.util.find_library("cublas"),) if n] + \
        ["libcublas.so.12", "libcublas.so.13", "libcublas.so"]


def _load():
    for name in candidates():
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        handle = ctypes.c_void_p()
        cuda.current_context()                     # cuBLAS joins the context numba made current
        if lib.cublasCreate_v2(ctypes.byref(handle)) != 0:
            continue
        for f in ("cublasSgemmStridedBatched", "cublasDgemmStridedBatched"):
            getattr(lib, f).restype = ctypes.c_int
        return lib, handle
    return None


def _operand(x, rows, cols):
    """How cuBLAS reads the row-major (rows x cols) matrices of x as the transposed operand it needs:
    (x, op, ld) with op 0 (N: unit stride along a row) or 1 (T: unit stride down a column); a layout
    with neither is copied row-major first."""
    rs, cs = memory.strides_of(x)[-2:]
    if cs == 1 or cols == 1:
        ld = rs if rows > 1 else cols
        if ld >= max(1, cols):
            return x, 0, ld
    if rs == 1 or rows == 1:
        ld = cs if cols > 1 else rows
        if ld >= max(1, rows):
            return x, 1, ld
    return memory.contiguous(x), 0, cols


def _merged_batch(shape, *strides):
    """The batch axes as few (size, stride per operand) axes as their strides allow."""
    axes = [(n, [s[i] for s in strides]) for i, n in enumerate(shape) if n != 1]
    out = []
    for n, st in axes:
        if out and all(p == q * n for p, q in zip(out[-1][1], st)):
            out[-1] = (out[-1][0] * n, st)
        else:
            out.append((n, st))
    return out or [(1, [0] * len(strides))]


def _gemm(lib_handle, a, b, out, m, n, k):
    lib, handle = lib_handle
    a, opa, lda = _operand(a, m, k)
    b, opb, ldb = _operand(b, k, n)
    f64 = out.dtype == np.float64
    ctype, size = (ctypes.c_double, 8) if f64 else (ctypes.c_float, 4)
    gemm = lib.cublasDgemmStridedBatched if f64 else lib.cublasSgemmStridedBatched
    one, zero = ctype(1.0), ctype(0.0)
    batch = tuple(out.shape)[:-2]
    cst = memory.strides_of(out)
    axes = _merged_batch(batch, memory.strides_of(a)[:-2], memory.strides_of(b)[:-2], cst[:-2])
    (count, (sa, sb, sc)), outer = axes[-1], axes[:-1]
    pa, pb, pc = memory.data_ptr(a), memory.data_ptr(b), memory.data_ptr(out)
    for pos in np.ndindex(*[n_ for n_, _ in outer]):
        oa = sum(i * st[0] for i, (_, st) in zip(pos, outer))
        ob = sum(i * st[1] for i, (_, st) in zip(pos, outer))
        oc = sum(i * st[2] for i, (_, st) in zip(pos, outer))
        # column-major: C^T (n x m) = B^T (n x k) @ A^T (k x m)
        status = gemm(handle, ctypes.c_int(opb), ctypes.c_int(opa), ctypes.c_int(n), ctypes.c_int(m),
                      ctypes.c_int(k), ctypes.byref(one),
                      ctypes.c_void_p(pb + ob * size), ctypes.c_int(ldb), ctypes.c_longlong(sb),
                      ctypes.c_void_p(pa + oa * size), ctypes.c_int(lda), ctypes.c_longlong(sa),
                      ctypes.byref(zero), ctypes.c_void_p(pc + oc * size), ctypes.c_int(n),
                      ctypes.c_longlong(sc), ctypes.c_int(count))
        if status != 0:
            raise RuntimeError(f"cuBLAS {'D' if f64 else 'S'}gemmStridedBatched failed with status {status} "
                               f"(operands {a.shape} and {b.shape})")
