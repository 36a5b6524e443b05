"""Collectives across the processes of a distributed run: all_reduce, broadcast, all_gather and
reduce_scatter as primitives of kind "collective". Every rank must run the same collectives in the same
order, so the passes never merge, fold or remove them (as random draws; every rank compiles the same
program, so the order holds there too); in
compiled code each runs as a host step. Not differentiable (as PyTorch's torch.distributed calls).

The implementation is the process group's backend (MPI or NCCL), installed in BACKEND by
tracegrad.distributed.init_process_group; `op` is "SUM", "MAX", "MIN" or "PRODUCT" (an average is a sum
divided by the world size, in tracegrad.distributed)."""
from ..core import prim

BACKEND = [None]


def backend():
    """The process group's backend, or the error PyTorch raises before init_process_group."""
    if BACKEND[0] is None:
        raise RuntimeError("Default process group has not been initialized, please make sure to call "
                           "tracegrad.distributed.init_process_group()")
    return BACKEND[0]


def _same(shapes, dtypes, **attrs):
    return shapes[0], dtypes[0]


def _gathered(shapes, dtypes, world):
    return (world,) + tuple(shapes[0]), dtypes[0]


def _scattered(shapes, dtypes, op, world):
    if not shapes[0] or shapes[0][0] != world:
        raise RuntimeError(f"reduce_scatter: the input's first dimension must be the world size {world}, "
                           f"got shape {tuple(shapes[0])}")
    return tuple(shapes[0][1:]), dtypes[0]


def _declare(name, rule, impl):
    prim(name, "collective", rule, impl, vjp=None, jvp=None, save=(), lower=None, dtypes=(), cost=None)


_declare("all_reduce", _same, lambda x, op: backend().all_reduce(x, op))
_declare("broadcast", _same, lambda x, src: backend().broadcast(x, src))
_declare("all_gather", _gathered, lambda x, world: backend().all_gather(x))
_declare("reduce_scatter", _scattered, lambda x, op, world: backend().reduce_scatter(x, op))
