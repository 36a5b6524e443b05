"""Device arrays without kernels: allocation (the caching allocator, allocator.py: `empty_cache()`,
`memory_stats()`), strided views, layout and pointer queries, the device-to-device memcpy and the
device-side error flag. A cuda tensor's storage is a numba.cuda device array (under
NUMBA_ENABLE_CUDASIM=1, the simulator's stand-in, which wraps a NumPy array: the few places that must
tell them apart are here, in memory.py and in allocator.py). memory.py re-exports these names.
"""
import math

import numpy as np

from ...strides import is_row_major
from . import allocator
from .gpu import simulated

_ERRORS = []          # [the mapped int32 flag device kernels raise] (created on first use)


def _cuda():
    from numba import cuda
    return cuda


# ------------------------------------------------------------ device-side errors
def error_flag():
    """A host-mapped int32 that kernels set to a nonzero code on bad input (an index out of range):
    the host reads it without a copy after synchronizing, as PyTorch reports a device-side assert."""
    if not _ERRORS:
        flag = _cuda().mapped_array(1, np.int32)
        flag[0] = 0
        _ERRORS.append(flag)
    return _ERRORS[0]


def check_device_errors():
    """Raise the error a kernel flagged since the last check (the caller has synchronized)."""
    if _ERRORS and _ERRORS[0][0]:
        _ERRORS[0][0] = 0
        raise IndexError("index out of range in an indexing kernel on cuda:0 (a device-side check, reported at "
                         "the next synchronization as PyTorch reports its device-side assert); check the index "
                         "tensors' values against the indexed sizes")


def copy_on_device(src, dst):
    """dst[...] = src for two row-major device arrays of one shape and dtype: one memcpy of exactly
    their bytes (numba's copy_to_device would copy to the end of dst's allocation)."""
    if simulated():
        dst.copy_to_device(src)
    elif dst.size:
        from numba.cuda.cudadrv import driver
        driver.device_to_device(dst, src, dst.size * dst.dtype.itemsize)


# ------------------------------------------------------------ allocation, views, layout
def is_device_array(obj):
    """Whether `obj` is a numba.cuda device array (or the simulator's)."""
    return bool(getattr(obj, "__cuda_ndarray__", False))


def as_device_array(obj):
    """A numba.cuda device array over `obj`'s memory (zero copy): a device array, or any object with
    `__cuda_array_interface__` (a CuPy array, a PyTorch cuda tensor)."""
    if is_device_array(obj):
        return obj
    if hasattr(obj, "__cuda_array_interface__"):
        return _cuda().as_cuda_array(obj)
    raise TypeError(f"expected a CUDA device array (an object with __cuda_array_interface__), got "
                    f"{type(obj).__name__}")


def empty(shape, dtype):
    """A new row-major device array (uninitialised), from the caching allocator (allocator.py)."""
    shape, dtype = tuple(int(n) for n in shape), np.dtype(dtype)
    if math.prod(shape) == 0:
        return _cuda().device_array(shape, dtype)
    return allocator.POOL.empty(shape, dtype)


def maker(shape, dtype):
    """make() -> (array, flat): empty(shape, dtype) and the same memory as one axis, the allocation's
    size class and layout worked out once (allocator.Pool.maker)."""
    shape, dtype = tuple(int(n) for n in shape), np.dtype(dtype)
    if math.prod(shape) == 0:
        return lambda: (lambda a: (a, a.reshape(0)))(_cuda().device_array(shape, dtype))
    return allocator.POOL.maker(shape, dtype)


def empty_cache():
    """Give the device memory the caching allocator keeps for reuse back to the driver (as
    torch.cuda.empty_cache); memory tensors still use stays theirs."""
    allocator.POOL.empty_cache()


def memory_stats(device=None):
    """The caching allocator's counts: {"allocated_bytes" (blocks in use), "reserved_bytes" (blocks
    held: in use or cached), "peak_allocated_bytes", "cached_blocks", "allocations_from_driver",
    "reuses"}."""
    return allocator.POOL.stats()


def memory_allocated(device=None):
    """Bytes of device memory in use by arrays (their blocks' sizes), as torch.cuda.memory_allocated."""
    return allocator.POOL.stats()["allocated_bytes"]


def memory_reserved(device=None):
    """Bytes of device memory the caching allocator holds, in use or cached."""
    return allocator.POOL.stats()["reserved_bytes"]


def max_memory_allocated(device=None):
    return allocator.POOL.stats()["peak_allocated_bytes"]


def reset_peak_memory_stats(device=None):
    with allocator.POOL.lock:
        allocator.POOL.peak = allocator.POOL.allocated


def strides_of(arr):
    """The strides of a device array in elements."""
    return tuple(s // arr.dtype.itemsize for s in arr.strides)


def row_major(arr):
    """Whether `arr` is laid out row-major without gaps (size-1 axes ignored), as NumPy's c_contiguous."""
    return is_row_major(arr.shape, strides_of(arr))


def view(arr, shape, strides, offset=0, dtype=None):
    """A device array over `arr`'s memory: `shape`, `strides` (in elements of `dtype`, default arr's),
    starting `offset` elements of arr's dtype after arr's first element. Strides are not checked
    against the allocation: callers derive them from arr's own (a primitive's remap)."""
    dtype = np.dtype(dtype or arr.dtype)
    shape, nbytes = tuple(int(n) for n in shape), [int(s) * dtype.itemsize for s in strides]
    start = int(offset) * arr.dtype.itemsize
    if arr.size == 0 or math.prod(shape) == 0:      # reads nothing; its offset may lie past the memory
        return empty(shape, dtype)
    if simulated():                         # the simulator's device array wraps a NumPy array
        root = _root(arr._ary)
        start += arr._ary.ctypes.data - root.ctypes.data
        return type(arr)(np.ndarray(shape, dtype, buffer=root, offset=start, strides=tuple(nbytes)))
    from numba.cuda.cudadrv.devicearray import DeviceNDArray
    return DeviceNDArray(shape, tuple(nbytes), dtype, gpu_data=arr.gpu_data.view(start))


def span(arr, dtype=None):
    """(a 1-D view from arr's first element to its last, arr's strides in elements): kernels index any
    strided array through it with a flat offset."""
    strides = strides_of(arr)
    if arr.size == 0:
        return view(arr, (0,), (1,), dtype=dtype), strides
    n = 1 + sum((d - 1) * s for d, s in zip(arr.shape, strides))
    return view(arr, (n,), (1,), dtype=dtype), strides


def data_ptr(arr):
    """The device address of arr's first element."""
    if simulated():
        return arr._ary.ctypes.data
    return arr.__cuda_array_interface__["data"][0]


def storage_offset(arr):
    """How many elements arr's first element lies after the start of its allocation."""
    if simulated():
        return (arr._ary.ctypes.data - _root(arr._ary).ctypes.data) // arr.dtype.itemsize
    owner = arr.gpu_data.owner          # numba's allocation (memory from another library: its first view)
    base = getattr(owner, "device_pointer_value", None) or arr.gpu_data.device_pointer_value or 0
    return (data_ptr(arr) - base) // arr.dtype.itemsize


def _root(a):
    """The NumPy array that owns the memory a views (the simulator's allocation: its lease)."""
    while isinstance(a.base, np.ndarray) and type(a) is not allocator.HostLease:
        a = a.base
    return a


def may_share_memory(a, b):
    """Whether two device arrays' address ranges overlap."""
    ra, rb = _extent(a), _extent(b)
    return ra is not None and rb is not None and ra[0] < rb[1] and rb[0] < ra[1]


def _extent(arr):
    if arr.size == 0:
        return None
    lo = data_ptr(arr)
    hi = lo + sum((n - 1) * s for n, s in zip(arr.shape, arr.strides)) + arr.dtype.itemsize
    return lo, hi
