"""`tracegrad.distributed`, with torch.distributed's vocabulary: a process group over MPI (cpu tensors,
through mpi4py) or NCCL (cuda tensors), and collectives on tensors that work eagerly and inside
`tg.compile` (where each is a step of the compiled program). Processes are started by
`python -m tracegrad.distributed.run --nproc N script.py` (mpiexec underneath).

    import tracegrad.distributed as dist
    dist.init_process_group("mpi")
    t = tg.ones(3) * dist.get_rank()
    dist.all_reduce(t, op=dist.ReduceOp.SUM)     # in place, as PyTorch's

A rank that raises stops every rank (MPI_Abort) with its traceback printed; a collective that does not
complete within `timeout` raises on the ranks waiting for it."""
import datetime
import os
import sys
import traceback

from ..autograd import no_grad
from ..core import bind
from ..ops import collective
from .mpi import DistributedTimeout

DEFAULT_TIMEOUT = datetime.timedelta(minutes=30)


class ReduceOp:
    """The reductions of all_reduce and reduce_scatter (PyTorch's names)."""
    SUM, AVG, MAX, MIN, PRODUCT = "SUM", "AVG", "MAX", "MIN", "PRODUCT"


def is_available():
    """True: the package is importable (the backends' libraries are checked by init_process_group)."""
    return True


def is_initialized():
    return collective.BACKEND[0] is not None


def init_process_group(backend="auto", init_method=None, timeout=DEFAULT_TIMEOUT, world_size=-1, rank=-1):
    """Join the processes started by the launcher (or mpiexec) into the default group. `backend`: "mpi"
    (cpu tensors), "nccl" (cuda tensors; cpu tensors through MPI), "auto" (nccl on a machine with a GPU
    and CuPy's NCCL, else mpi). `timeout` (a timedelta or seconds) bounds every collective. `world_size`
    and `rank`, when given, must agree with MPI's."""
    if is_initialized():
        raise RuntimeError("trying to initialize the default process group twice!")
    if init_method not in (None, "env://"):
        raise ValueError(f"init_method {init_method!r}: tracegrad's groups are formed by MPI; start the "
                         "processes with python -m tracegrad.distributed.run (or mpiexec) and pass no init_method")
    seconds = timeout.total_seconds() if isinstance(timeout, datetime.timedelta) else float(timeout)
    impl = _backend_class(backend)(seconds)
    for name, given, actual in (("world_size", world_size, impl.world), ("rank", rank, impl.rank)):
        if given not in (-1, None) and int(given) != actual:
            impl.close()
            raise ValueError(f"init_process_group({name}={given}): MPI started this process as {name} {actual}")
    collective.BACKEND[0] = impl
    _stop_every_rank_on_error(impl)


def _backend_class(name):
    from .mpi import MPIBackend
    name = (name or "auto").lower()
    if name == "auto":
        name = "nccl" if _gpu_with_nccl() else "mpi"
    if name == "mpi":
        return MPIBackend
    if name == "nccl":
        from .nccl import NCCLBackend
        return NCCLBackend
    raise ValueError(f"backend {name!r}: tracegrad has 'mpi' (cpu), 'nccl' (cuda) and 'auto'")


def _gpu_with_nccl():
    from ..backends.cuda import gpu as cuda
    if not cuda.is_available() or cuda.simulated():
        return False
    try:
        from cupy.cuda import nccl  # noqa: F401
    except ImportError:
        return False
    return True


ERRORS_ENV = "TRACEGRAD_RANK_ERRORS"     # the launcher's folder for the ranks' last words (run.py)


def _stop_every_rank_on_error(impl):
    """An uncaught exception on any rank prints its traceback, naming the rank, and aborts every rank (the
    others would wait for it in their next collective). Under the launcher the error also goes to a file
    it reads back: mpiexec may drop a rank's output when it stops the run."""
    previous = sys.excepthook

    def hook(kind, value, tb):
        if collective.BACKEND[0] is not impl:
            return previous(kind, value, tb)
        text = "".join(traceback.format_exception(kind, value, tb))
        sys.stderr.write(f"[rank {impl.rank}] {text}[rank {impl.rank}] stopping every rank of the run\n")
        sys.stderr.flush()
        if os.environ.get(ERRORS_ENV):
            with open(os.path.join(os.environ[ERRORS_ENV], f"rank-{impl.rank}.txt"), "w") as fh:
                fh.write(text)
        impl.abort(1)
    sys.excepthook = hook


def _group():
    return collective.backend()


def get_rank(group=None):
    return _group().rank if is_initialized() else int(os.environ.get("RANK", -1))


def get_world_size(group=None):
    return _group().world if is_initialized() else int(os.environ.get("WORLD_SIZE", -1))


def get_backend(group=None):
    return _group().name


def barrier(group=None, async_op=False, device_ids=None):
    _group().barrier()
    return Work() if async_op else None


class Work:
    """What a collective called with async_op=True returns: wait() completes it (as PyTorch's Work)."""

    def __init__(self, finish=None):
        self._finish = finish

    def wait(self, timeout=None):
        if self._finish is not None:
            finish, self._finish = self._finish, None
            finish()
        return True

    def is_completed(self):
        return self._finish is None


def _reduced(tensor, op, name, **attrs):
    """bind `name` with op (and attrs); ReduceOp.AVG is the sum over the world size (floating-point tensors)."""
    if op not in (ReduceOp.SUM, ReduceOp.AVG, ReduceOp.MAX, ReduceOp.MIN, ReduceOp.PRODUCT):
        raise ValueError(f"{name}: op {op!r} is not a ReduceOp (SUM, AVG, MAX, MIN, PRODUCT)")
    if op == ReduceOp.AVG and not tensor.dtype.is_floating_point:
        raise RuntimeError(f"{name}: ReduceOp.AVG needs a floating-point tensor, got {tensor.dtype}")
    out = bind(name, tensor, op=ReduceOp.SUM if op == ReduceOp.AVG else op, **attrs)
    return out / get_world_size() if op == ReduceOp.AVG else out


def all_reduce(tensor, op=ReduceOp.SUM, group=None, async_op=False):
    """Reduce `tensor` across the ranks, in place (every rank gets the result)."""
    with no_grad():
        tensor.copy_(_reduced(tensor.detach(), op, "all_reduce"))
    return Work() if async_op else None


def broadcast(tensor, src, group=None, async_op=False):
    """Rank `src`'s tensor, copied into `tensor` on every rank."""
    with no_grad():
        tensor.copy_(bind("broadcast", tensor.detach(), src=int(src)))
    return Work() if async_op else None


def all_gather(tensor_list, tensor, group=None, async_op=False):
    """tensor_list[r] = rank r's `tensor`, on every rank."""
    world = get_world_size()
    if len(tensor_list) != world:
        raise ValueError(f"all_gather: tensor_list has {len(tensor_list)} tensors, the world size is {world}")
    with no_grad():
        gathered = bind("all_gather", tensor.detach(), world=world)
        for r, out in enumerate(tensor_list):
            out.copy_(gathered[r])
    return Work() if async_op else None


def reduce_scatter(output, input_list, op=ReduceOp.SUM, group=None, async_op=False):
    """output = the reduction over the ranks of their input_list[this rank]."""
    from ..tensor import stack
    world = get_world_size()
    if len(input_list) != world:
        raise ValueError(f"reduce_scatter: input_list has {len(input_list)} tensors, the world size is {world}")
    with no_grad():
        output.copy_(_reduced(stack([t.detach() for t in input_list]), op, "reduce_scatter", world=world))
    return Work() if async_op else None


def destroy_process_group(group=None):
    impl = collective.BACKEND[0]
    if impl is not None:
        collective.BACKEND[0] = None
        impl.close()
