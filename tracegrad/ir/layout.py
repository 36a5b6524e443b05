"""Facts about memory order (no decisions): which axis an operand walks fastest, its axes by stride, and
the bytes and strides of a kernel's operands. The planners (the CPU's ir/passes/schedule.py, the cuda
target's backends/cuda/plan.py) decide from these, each with its own thresholds."""
import math

from ..strides import contiguous_strides
from ..symint import hint, is_sym
from .kernels import nbytes


def unit_axis(shape, strides):
    """The axis an operand walks fastest: the smallest nonzero |stride| among axes longer than 1."""
    best = None
    for d, (n, s) in enumerate(zip(shape, strides)):
        if n > 1 and s and (best is None or abs(s) <= abs(strides[best])):
            best = d
    return best


def memory_order(shape, strides):
    """Axes by |stride| of one operand, largest first (ties and broadcast axes keep logical order)."""
    return sorted(range(len(shape)), key=lambda d: (-abs(strides[d]) if shape[d] > 1 else 0, d))


def operands(k):
    """[(bytes, strides over k's space)] of the buffers kernel k writes, then of those it reads (an
    output comes first among equals: contiguous stores matter more than loads). Sizes at their hints."""
    out = []
    full = contiguous_strides(k.shape)
    for ph in k.phases:
        for v, _ in ph.outputs:
            if ph.kind == "map":
                out.append((nbytes(v), full))
            else:
                kept = [d for d in range(len(k.shape)) if d not in set(ph.axes)]
                strides = [0] * len(k.shape)
                for d, s in zip(kept, contiguous_strides([k.shape[d] for d in kept])):
                    strides[d] = s
                out.append((nbytes(v), tuple(strides)))
    return out + [(read_bytes(k.shape, ld), ld.strides) for ld in k.reads]


def read_bytes(shape, ld):
    """The bytes load ld reads over a space of `shape`: its buffer's, or fewer for a view of part of
    it (a slice x[:, :n] walks n columns of each row; broadcast axes read nothing new)."""
    walked = math.prod(hint(n) for n, s in zip(shape, ld.strides) if is_sym(s) or s) * ld.dtype.itemsize
    return min(nbytes(ld.buf), walked)
