"""Device memory: allocation, strided views, layout queries, and the one counted path between host and
device (`copy`): every host<->device copy of tensor data goes through it, so tests can count them
(`transfer_stats()`, `count_transfers()`).

Device arrays come from the caching allocator (allocator.py: blocks kept by size class and reused;
`empty_cache()`, `memory_stats()`). A cuda tensor's storage is a numba.cuda device array (under
NUMBA_ENABLE_CUDASIM=1, the simulator's stand-in, which wraps a NumPy array: the few places that
must tell them apart are here and in allocator.py).
"""
import collections
import contextlib
import math

import numpy as np

from ...strides import is_row_major
from . import allocator, simulated

_STATS = {"to_device": 0, "to_host": 0, "bytes": 0}
_ERRORS = []          # [the mapped int32 flag device kernels raise] (created on first use)


def _cuda():
    from numba import cuda
    return cuda


# ------------------------------------------------------------ the counted copies
def copy(arr, to):
    """`arr` copied to="device" (from a NumPy array) or to="host" (from a device array); counted."""
    if to == "device":
        host = arr if arr.flags.c_contiguous else np.array(arr, order="C")     # (ascontiguousarray makes 0-d 1-d)
        out = empty(host.shape, host.dtype)
        _to_device(host, out)
        _STATS["to_device"] += 1
    elif to == "host":
        out = _to_host(arr if row_major(arr) else contiguous(arr))
        check_device_errors()
        _STATS["to_host"] += 1
    else:
        raise ValueError(f"copy: to must be 'device' or 'host', got {to!r}")
    _STATS["bytes"] += out.nbytes
    return out


def transfer_stats():
    """Host<->device copies of tensor data so far in this process: {"count", "bytes", "to_device",
    "to_host"}."""
    return {"count": _STATS["to_device"] + _STATS["to_host"], **_STATS}


class TransferCount:
    """The copies made inside a `count_transfers()` block (read during or after it)."""

    def __init__(self):
        self._start, self._end = transfer_stats(), None

    def _now(self, key):
        return (self._end or transfer_stats())[key] - self._start[key]

    count = property(lambda self: self._now("count"))
    bytes = property(lambda self: self._now("bytes"))
    to_device = property(lambda self: self._now("to_device"))
    to_host = property(lambda self: self._now("to_host"))

    def __repr__(self):
        return (f"TransferCount(count={self.count}, bytes={self.bytes}, to_device={self.to_device}, "
                f"to_host={self.to_host})")


@contextlib.contextmanager
def count_transfers():
    """`with tg.cuda.memory.count_transfers() as c: ...` then `c.count`, `c.bytes`, `c.to_device`,
    `c.to_host`: the host<->device copies of tensor data made inside the block."""
    c = TransferCount()
    try:
        yield c
    finally:
        c._end = transfer_stats()


_CONSTANTS = collections.OrderedDict()     # (dtype, bytes) -> a 0-d device array, most recently used last
MAX_CONSTANTS = 1024


def constant(value):
    """A read-only 0-d device array holding the 0-d NumPy array `value` (a scalar operand): uploaded once
    per distinct value and dtype, then reused (kernels never write their inputs)."""
    value = np.asarray(value)
    key = (value.dtype.str, value.tobytes())
    arr = _CONSTANTS.get(key)
    if arr is None:
        arr = _CONSTANTS[key] = copy(value.reshape(()), "device")
        if len(_CONSTANTS) > MAX_CONSTANTS:
            _CONSTANTS.popitem(last=False)
    else:
        _CONSTANTS.move_to_end(key)
    return arr


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


def _to_host(src):
    """A NumPy copy of the row-major device array src: exactly its bytes (numba's copy_to_host copies
    from src's first byte to the end of its allocation, all of a large buffer for a view into it)."""
    if simulated():
        return src.copy_to_host()
    from numba.cuda.cudadrv import driver
    out = np.empty(tuple(src.shape), src.dtype)
    if out.nbytes:
        driver.device_to_host(out, src, out.nbytes)
    return out


def _to_device(host, dst):
    """dst[...] = host (a row-major NumPy array of dst's shape and dtype): exactly its bytes."""
    if simulated():
        dst.copy_to_device(host)
    elif host.nbytes:
        from numba.cuda.cudadrv import driver
        driver.host_to_device(dst, host, host.nbytes)


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


def memory_stats():
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


def contiguous(arr):
    """A row-major copy of the device array arr, made on the device."""
    from .eager.kernels import copy_strided
    out = empty(arr.shape, arr.dtype)
    copy_strided(arr, out)
    return out
