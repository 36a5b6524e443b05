"""The CPU backend of a process group: MPI through mpi4py (an MPI from its wheels: `pip install mpi4py mpich`).

Every collective is started non-blocking and waited for with the group's timeout, so a rank whose peer
died, hung or called something else stops with an error naming the collective, instead of hanging.
Before each collective the ranks compare what they pass (the collective, dtype and shape) in one small
all-gather: a mismatch raises on every rank, naming each rank's tensor."""
import time

import numpy as np

_DTYPE_CODES = {np.dtype(t): k for k, t in enumerate(
    (np.float32, np.float64, np.float16, np.int64, np.int32, np.int16, np.int8, np.uint8, np.bool_))}
_MAX_DIMS = 8
SPIN = 1.0          # seconds a wait polls without pause before it polls every millisecond


def _collectives():
    """The collectives' names, as the table has them (and the barrier, which carries no tensor)."""
    from ..core import PRIMS
    return sorted(n for n, p in PRIMS.items() if p.kind == "collective") + ["barrier"]


class DistributedTimeout(RuntimeError):
    """A collective did not complete within the process group's timeout."""


class MPIBackend:
    name = "mpi"

    def __init__(self, timeout):
        try:
            from mpi4py import MPI
        except ImportError:
            raise RuntimeError("the mpi backend needs mpi4py and an MPI library: pip install mpi4py mpich "
                               "(or pip install -e '.[distributed]')") from None
        self.MPI, self.comm, self.timeout = MPI, MPI.COMM_WORLD.Dup(), float(timeout)
        self.rank, self.world = self.comm.Get_rank(), self.comm.Get_size()
        self._ops = {"SUM": MPI.SUM, "MAX": MPI.MAX, "MIN": MPI.MIN, "PRODUCT": MPI.PROD}   # AVG: SUM, then / world

    # ------------------------------------------------------------ waiting, checking
    def wait(self, request, what):
        """Wait for `request`, polling, at most the group's timeout. MPI moves a collective along only inside
        MPI calls on every rank, so a rank that slept between polls would stall each round of its peers'
        exchange (a 1 MB all-reduce took 28 ms so): it polls without pause for SPIN seconds, as MPI's own
        wait does, and only then every millisecond."""
        if request.Test():
            return
        start = time.monotonic()
        while not request.Test():
            waited = time.monotonic() - start
            if waited > SPIN:
                time.sleep(1e-3)
            if waited > self.timeout:
                raise DistributedTimeout(
                    f"rank {self.rank}: {what} did not complete within {self.timeout:g} s (the timeout of "
                    f"init_process_group): another rank died, hung, or did not call the same collective")

    def check(self, collective, arr):
        """Every rank passes the same collective, dtype and shape, or every rank raises naming them."""
        if arr.ndim > _MAX_DIMS:
            raise RuntimeError(f"{collective}: tensors of more than {_MAX_DIMS} dimensions are not supported")
        mine = np.full(3 + _MAX_DIMS, -1, np.int64)
        mine[0], mine[1], mine[2] = _collectives().index(collective), _DTYPE_CODES.get(arr.dtype, 99), arr.ndim
        mine[3:3 + arr.ndim] = arr.shape
        every = np.empty((self.world, mine.size), np.int64)
        self.wait(self.comm.Iallgather(mine, every), f"{collective} (comparing the ranks' tensors)")
        if (every == mine).all():
            return
        raise RuntimeError(f"{collective}: the ranks passed different tensors (every rank must pass the same "
                           "shape and dtype to the same collective): " + "; ".join(
                               f"rank {r}: {self._describe(row)}" for r, row in enumerate(every)))

    @staticmethod
    def _describe(row):
        dtypes = {k: str(t) for t, k in _DTYPE_CODES.items()}
        return f"{_collectives()[row[0]]} of {dtypes.get(int(row[1]), '?')} {tuple(int(n) for n in row[3:3 + row[2]])}"

    def _host(self, x, collective):
        if not isinstance(x, np.ndarray):
            raise RuntimeError(f"{collective}: the mpi backend works on cpu tensors; for cuda tensors "
                               "init_process_group(backend='nccl')")
        if x.dtype not in _DTYPE_CODES:
            raise RuntimeError(f"{collective}: no MPI datatype for {x.dtype}")
        return np.ascontiguousarray(x)

    # ------------------------------------------------------------ the collectives (new arrays out)
    def all_reduce(self, x, op, check=True):
        out = self._host(x, "all_reduce").copy()
        self.wait(self.start_all_reduce(out, op, check), f"all_reduce({op})")
        return out

    def start_all_reduce(self, buf, op, check=True):
        """Start reducing the contiguous array `buf` in place across the ranks: an MPI request to wait for."""
        if check:
            self.check("all_reduce", buf)
        if buf.dtype == np.bool_:
            buf = buf.view(np.uint8)
        return self.comm.Iallreduce(self.MPI.IN_PLACE, buf, op=self._ops[op])

    def broadcast(self, x, src):
        out = self._host(x, "broadcast").copy()
        self.check("broadcast", out)
        self.wait(self.comm.Ibcast(out, root=src), f"broadcast from rank {src}")
        return out

    def all_gather(self, x):
        x = self._host(x, "all_gather")
        self.check("all_gather", x)
        out = np.empty((self.world,) + x.shape, x.dtype)
        self.wait(self.comm.Iallgather(x, out), "all_gather")
        return out

    def reduce_scatter(self, x, op):
        x = self._host(x, "reduce_scatter")
        self.check("reduce_scatter", x)
        out = np.empty(x.shape[1:], x.dtype)
        self.wait(self.comm.Ireduce_scatter_block(x, out, op=self._ops[op]), f"reduce_scatter({op})")
        return out

    def barrier(self):
        self.wait(self.comm.Ibarrier(), "barrier")

    def abort(self, code=1):
        self.MPI.COMM_WORLD.Abort(code)

    def close(self):
        self.comm.Free()
