"""The GPU backend of a process group: NCCL through CuPy's binding (`cupy.cuda.nccl`), on the device arrays
of cuda tensors (numba device arrays expose the CUDA array interface). The ranks are started by MPI (the
launcher), which also hands rank 0's NCCL id to the others and keeps the CPU-side checks and the
timeout: each collective is queued on the default stream, then an event recorded after it is polled
until the group's timeout. cpu tensors in an nccl group go through MPI.

Prepared for a machine with GPUs and `pip install cupy-cuda12x` (or cupy-cuda13x); it cannot run
without a GPU (numba's simulator has no NCCL), so it has not run yet: see docs/distributed.md."""
import numpy as np

from .mpi import MPIBackend

NCCL_ID_BYTES = 128


class NCCLBackend(MPIBackend):
    name = "nccl"

    def __init__(self, timeout):
        super().__init__(timeout)
        try:
            from cupy.cuda import nccl
        except ImportError:
            raise RuntimeError("the nccl backend needs CuPy's NCCL binding: pip install cupy-cuda12x (or "
                               "cupy-cuda13x), on a machine with NVIDIA GPUs") from None
        from numba import cuda
        from ..backends.cuda import memory
        self.cuda, self.memory = cuda, memory
        uid = np.array(nccl.get_unique_id(), np.int8) if self.rank == 0 else np.empty(NCCL_ID_BYTES, np.int8)
        self.wait(self.comm.Ibcast(uid, root=0), "sharing the NCCL id")
        self.nc = nccl.NcclCommunicator(self.world, tuple(int(b) for b in uid), self.rank)
        self._nops = {"SUM": nccl.NCCL_SUM, "MAX": nccl.NCCL_MAX, "MIN": nccl.NCCL_MIN, "PRODUCT": nccl.NCCL_PROD}
        self._types = {np.dtype(np.float32): nccl.NCCL_FLOAT32, np.dtype(np.float64): nccl.NCCL_FLOAT64,
                       np.dtype(np.float16): nccl.NCCL_FLOAT16, np.dtype(np.int64): nccl.NCCL_INT64,
                       np.dtype(np.int32): nccl.NCCL_INT32, np.dtype(np.uint8): nccl.NCCL_UINT8}

    def _on_device(self, x, collective):
        """(contiguous device array, its NCCL datatype), after the ranks' shapes are compared."""
        if np.dtype(x.dtype) not in self._types:
            raise RuntimeError(f"{collective}: NCCL has no datatype for {x.dtype}")
        self.check(collective, np.empty(tuple(x.shape), x.dtype))
        return self.memory.contiguous(x), self._types[np.dtype(x.dtype)]

    def _done(self, what):
        event = self.cuda.event()
        event.record()
        self.wait(_EventRequest(event), what)

    def all_reduce(self, x, op, check=True):
        if not self.memory.is_device_array(x):
            return super().all_reduce(x, op, check)
        src, dtype = self._on_device(x, "all_reduce")
        out = self.memory.empty(tuple(src.shape), src.dtype)
        self.nc.allReduce(_ptr(src), _ptr(out), src.size, dtype, self._nops[op], 0)
        self._done(f"all_reduce({op})")
        return out

    def broadcast(self, x, src):
        if not self.memory.is_device_array(x):
            return super().broadcast(x, src)
        buf, dtype = self._on_device(x, "broadcast")
        out = self.memory.empty(tuple(buf.shape), buf.dtype)
        self.nc.broadcast(_ptr(buf), _ptr(out), buf.size, dtype, src, 0)
        self._done(f"broadcast from rank {src}")
        return out

    def all_gather(self, x):
        if not self.memory.is_device_array(x):
            return super().all_gather(x)
        buf, dtype = self._on_device(x, "all_gather")
        out = self.memory.empty((self.world,) + tuple(buf.shape), buf.dtype)
        self.nc.allGather(_ptr(buf), _ptr(out), buf.size, dtype, 0)
        self._done("all_gather")
        return out

    def reduce_scatter(self, x, op):
        if not self.memory.is_device_array(x):
            return super().reduce_scatter(x, op)
        buf, dtype = self._on_device(x, "reduce_scatter")
        out = self.memory.empty(tuple(buf.shape)[1:], buf.dtype)
        self.nc.reduceScatter(_ptr(buf), _ptr(out), out.size, dtype, self._nops[op], 0)
        self._done(f"reduce_scatter({op})")
        return out


class _EventRequest:
    """An MPI-request-like Test() over a CUDA event, so the group's timed wait applies to NCCL calls."""

    def __init__(self, event):
        self.event = event

    def Test(self):
        return self.event.query()


def _ptr(arr):
    return arr.__cuda_array_interface__["data"][0]
