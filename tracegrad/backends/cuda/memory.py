"""Device memory: the one counted path between host and device (`copy`): every host<->device copy of
tensor data goes through it, so tests can count them (`transfer_stats()`, `count_transfers()`);
device constants, synchronization, and row-major copies on the device. The device arrays themselves
(allocation, views, layout: arrays.py) are re-exported here, so `memory.view`, `memory.empty`, ...
are the one place callers use.
"""
import collections
import contextlib

import numpy as np

from .arrays import (error_flag, check_device_errors, copy_on_device, is_device_array, as_device_array,  # noqa: F401
                     empty, maker, empty_cache, memory_stats, memory_allocated, memory_reserved,
                     max_memory_allocated, reset_peak_memory_stats, strides_of, row_major, view, span,
                     data_ptr, storage_offset, may_share_memory)
from .arrays import _cuda
from .gpu import require, simulated

_STATS = {"to_device": 0, "to_host": 0, "bytes": 0}


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


def synchronize(device=None):
    """Wait until every kernel and copy queued on the device has finished; raises a device-side error
    (an index out of range in an indexing kernel) that happened since the last synchronization."""
    from ...device import device as device_of
    require(device_of("cuda"))
    _cuda().synchronize()
    check_device_errors()


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


def contiguous(arr):
    """A row-major copy of the device array arr, made on the device (eager/kernels.py's copy kernel:
    numba.cuda is imported on first use, not with tracegrad)."""
    from .eager.kernels import contiguous as copy
    return copy(arr)
