"""The caching device allocator, as PyTorch's: memory a tensor frees is kept in a pool, by size
class, and handed to the next request of its class instead of going back to the driver (an
allocation from the driver synchronizes and costs tens of microseconds; a reuse costs a list pop).

A request is rounded up to its size class (512 bytes at least, then four classes per power of two:
at most a quarter wasted). Each allocation is a block of its class handed out behind a lease of its
own: every array over the block, and every view of one, keeps the lease alive, and the block goes
back to the pool only when the last of them is garbage, so memory a tensor still references is
never handed out again. (On a GPU the lease is a numba memory pointer that views count, as numba
counts its own allocations; under the simulator it is the object a NumPy array's memory comes
from.) Reuse is in the order of the default stream, on which every tracegrad kernel and copy runs.

`empty_cache()` gives the cached blocks back to the driver; `stats()` counts the bytes of blocks
in use ("allocated") and held, in use or cached ("reserved"), as torch.cuda.memory_stats does.
"""
import inspect
import itertools
import math
import weakref

import numpy as np

from ..ir.kernels import contiguous_strides
from ..locks import rlock
from . import simulated

MIN_BLOCK = 512


def size_class(nbytes):
    """The bytes of the block serving a request of `nbytes`."""
    if nbytes <= MIN_BLOCK:
        return MIN_BLOCK
    step = 1 << (int(nbytes).bit_length() - 3)
    return -(-nbytes // step) * step


class Pool:
    """One device's blocks: cached ones by size class, and the counts of stats()."""

    def __init__(self):
        self.lock = rlock()      # a lease's finalizer may run in the middle of an allocation
        self.cached = {}                   # size class -> [blocks]
        self.leases = {}                   # token -> the GPU lease of a block in use (numba counts its views)
        self.tokens = itertools.count()
        self.allocated = self.reserved = self.peak = 0
        self.from_driver = self.reused = 0

    def empty(self, shape, dtype):
        """A new row-major device array of `shape` and `dtype` (at least one element) over a block."""
        nbytes = math.prod(shape) * dtype.itemsize
        cls = size_class(nbytes)
        with self.lock:
            free = self.cached.get(cls)
            block = free.pop() if free else None
            if block is None:
                block = self._new_block(cls)
                self.reserved += cls
                self.from_driver += 1
            else:
                self.reused += 1
            self.allocated += cls
            self.peak = max(self.peak, self.allocated)
        return (self._host_lease if simulated() else self._gpu_lease)(block, cls, shape, dtype)

    def _new_block(self, cls):
        if simulated():
            return np.empty(cls, np.uint8)
        from numba import cuda
        from numba.cuda.cudadrv.driver import CudaAPIError
        try:
            return cuda.current_context().memalloc(cls)
        except CudaAPIError:              # out of memory: give the cached blocks back, try once more
            self.empty_cache()
            return cuda.current_context().memalloc(cls)

    def release(self, block, cls, token=None):
        """Back to the pool: the last reference to the block's lease is gone."""
        with self.lock:
            self.cached.setdefault(cls, []).append(block)
            self.allocated -= cls
            self.leases.pop(token, None)

    def _gpu_lease(self, block, cls, shape, dtype):
        from numba.cuda.cudadrv.devicearray import DeviceNDArray
        from numba.cuda.cudadrv.driver import AutoFreePointer, MemoryPointer, OwnedPointer
        token = next(self.tokens)
        where = (block.device_pointer, cls)
        if "context" in inspect.signature(MemoryPointer.__init__).parameters:     # numba's; numba-cuda may drop it
            where = (block.context,) + where
        lease = AutoFreePointer(*where, finalizer=lambda: self.release(block, cls, token))
        self.leases[token] = lease           # kept until its count of views falls to 0 (then freed)
        strides = tuple(s * dtype.itemsize for s in contiguous_strides(shape))
        return DeviceNDArray(shape, strides, dtype, gpu_data=OwnedPointer(weakref.proxy(lease)))

    def _host_lease(self, block, cls, shape, dtype):
        from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray
        lease = _HostMemory(block, cls)
        weakref.finalize(lease, self.release, block, cls)
        return FakeCUDAArray(np.ndarray(shape, dtype, buffer=np.asarray(lease)))

    def empty_cache(self):
        with self.lock:
            for cls, blocks in self.cached.items():
                self.reserved -= cls * len(blocks)
            self.cached.clear()
        if not simulated():
            from numba import cuda
            cuda.current_context().deallocations.clear()     # numba frees what it deferred, now

    def stats(self):
        with self.lock:
            return {"allocated_bytes": self.allocated, "reserved_bytes": self.reserved,
                    "peak_allocated_bytes": self.peak, "cached_blocks": sum(map(len, self.cached.values())),
                    "allocations_from_driver": self.from_driver, "reuses": self.reused}


class _HostMemory:
    """The simulator's lease: the object a block's NumPy arrays take their memory from (NumPy keeps it
    as their base; a finalizer returns the block when the last of them is gone)."""

    def __init__(self, block, nbytes):
        self.__array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "version": 3,
                                    "data": (block.ctypes.data, False)}
        self.block = block


POOL = Pool()          # cuda:0's (tracegrad uses one device)
