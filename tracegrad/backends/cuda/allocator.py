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
import functools
import inspect
import itertools
import math
import weakref

import numpy as np

from ...strides import contiguous_strides
from ...locks import rlock
from .gpu import simulated

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
        cls, shape = size_class(math.prod(shape) * dtype.itemsize), tuple(shape)
        strides = tuple(s * dtype.itemsize for s in contiguous_strides(shape))
        return self._lease()(self._take(cls, self.cached.setdefault(cls, [])), cls, shape, strides, dtype)[0]

    def maker(self, shape, dtype):
        """make() -> (array, flat): a new row-major device array of `shape` and `dtype` (at least one
        element), and the same memory as one axis, over a block of its own; the size class and layout
        worked out once, for a caller that allocates alike on every call (a compiled program's outputs)."""
        cls, shape = size_class(math.prod(shape) * dtype.itemsize), tuple(shape)
        strides, flat = tuple(s * dtype.itemsize for s in contiguous_strides(shape)), (math.prod(shape),)
        lease, take = self._lease(), self._take
        with self.lock:
            cached = self.cached.setdefault(cls, [])     # (empty_cache empties the lists, keeps them)
        return lambda: lease(take(cls, cached), cls, shape, strides, dtype, flat)

    def _take(self, cls, cached):
        """A block of size class `cls`: from `cached` (the pool's list of that class), else the driver."""
        with self.lock:
            if cached:
                block = cached.pop()
                self.reused += 1
            else:
                block = self._new_block(cls)
                self.reserved += cls
                self.from_driver += 1
            self.allocated += cls
            if self.allocated > self.peak:
                self.peak = self.allocated
        return block

    def _lease(self):
        return self._host_lease if simulated() else self._gpu_lease

    def _new_block(self, cls):
        if simulated():
            return bytearray(cls)        # not an ndarray: NumPy stops its views' bases at the lease over it
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
            self.cached[cls].append(block)
            self.allocated -= cls
            self.leases.pop(token, None)

    def _gpu_lease(self, block, cls, shape, strides, dtype, flat=None):
        """(array over a new lease of `block`, the same memory as one axis of `flat` elements or None)."""
        DeviceNDArray, AutoFreePointer, OwnedPointer, with_context = _numba_gpu()
        token = next(self.tokens)
        where = (block.context, block.device_pointer, cls) if with_context else (block.device_pointer, cls)
        lease = AutoFreePointer(*where, finalizer=lambda: self.release(block, cls, token))
        self.leases[token] = lease           # kept until its count of views falls to 0 (then freed)
        arr = DeviceNDArray(shape, strides, dtype, gpu_data=OwnedPointer(weakref.proxy(lease)))
        if flat is None or len(shape) == 1:
            return arr, arr
        return arr, DeviceNDArray(flat, (dtype.itemsize,), dtype, gpu_data=OwnedPointer(weakref.proxy(lease)))

    def _host_lease(self, block, cls, shape, strides, dtype, flat=None):
        from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray
        mem = HostLease(cls, np.uint8, buffer=block)
        mem.release = self, block, cls
        arr = FakeCUDAArray(np.ndarray(shape, dtype, buffer=mem))
        return arr, arr if flat is None or len(shape) == 1 else FakeCUDAArray(np.ndarray(flat, dtype, buffer=mem))

    def empty_cache(self):
        with self.lock:
            for cls, blocks in self.cached.items():
                self.reserved -= cls * len(blocks)
                blocks.clear()
        if not simulated():
            from numba import cuda
            cuda.current_context().deallocations.clear()     # numba frees what it deferred, now

    def stats(self):
        with self.lock:
            return {"allocated_bytes": self.allocated, "reserved_bytes": self.reserved,
                    "peak_allocated_bytes": self.peak, "cached_blocks": sum(map(len, self.cached.values())),
                    "allocations_from_driver": self.from_driver, "reuses": self.reused}


@functools.cache
def _numba_gpu():
    """numba.cuda's classes a GPU lease is made of, and whether MemoryPointer takes a context first
    (numba's does; numba-cuda may drop it): looked up once, not per allocation."""
    from numba.cuda.cudadrv.devicearray import DeviceNDArray
    from numba.cuda.cudadrv.driver import AutoFreePointer, MemoryPointer, OwnedPointer
    return DeviceNDArray, AutoFreePointer, OwnedPointer, "context" in inspect.signature(MemoryPointer.__init__).parameters


class HostLease(np.ndarray):
    """The simulator's lease: the array over a block (a bytearray) that the block's arrays take their
    memory from (NumPy keeps it as their base); the block goes back to the pool when the last of them
    is gone. Only the lease itself holds `release` (NumPy gives views of it none)."""

    def __del__(self):
        pool, block, cls = self.__dict__.pop("release", (None, None, None))
        if pool is not None:
            pool.release(block, cls)


POOL = Pool()          # cuda:0's (tracegrad uses one device)
