"""Values constant along a kernel's loops, computed once per call instead of once per element.

Constant along every axis (a 0-d tensor's transcendental: Adam's bias corrections 1 - beta ** step
of a float64 step counter, read by every element of each parameter's update): ModuleBuilder.kernel
hoists such subtrees, holding a costly op, out of every kernel whatever its strategy
(hoisted(kernel, len(kernel.shape)), before the strategy is chosen). LLVM did not: pow and the C
library's other functions may set errno, so a call is not loop-invariant to it, and
`q * (1 - 0.9 ** s).float()` over 1M float32 elements ran 7.4 ms (pow per element) against 0.18 ms
for `q * s.float()`; hoisted, 0.18 ms.

Per column of a kernel walked row by row:

A kernel in natural order (rows outer, the trailing axes inner) often reads column statistics:
values constant along its rows that vary along the inner loop (a log-softmax over dim 0's log(s_j),
a column norm's sqrt, a channels-last batch norm's 1 / sqrt(var_c + eps)). LLVM hoists what is
constant along the innermost loop, not what varies along it, so every row recomputed them. Here the
largest subtrees that read only values constant along the rows and hold a costly op (a
transcendental, a division, a square root) are computed once per call of the kernel (per chunk of
rows) into a stack array over the inner axes and read back from it: the same values, computed by the
same code, once per column.

Measured (one thread, CPU time, interleaved A/B, (2048, 1000) float32, fwd+bwd): log_softmax over
dim 0 5.96 -> 3.32 ms (its loss kernel evaluated log(s_j), in float64, for every element); a layer
norm of x.T 9.9 -> 8.8; x / sqrt((x * x).sum(0)) 2.9 -> 2.7; softmax and logsumexp over dim 0 and the
survey's other normalizations within noise (their per-column terms are cheap; their kernels are
bound by memory and exp). Reading b_j's reciprocal instead of dividing by b_j gained nothing there.
"""
import math

from ... import scalar as S
from ...scalar import head
from ...ir.kernels import Checked, Gather, Iota, Load, Op, contiguous_strides, loads, postorder
from ...symint import hint, is_sym
from .loops import _loops
from .scalar import Emitter, linear, lltype, store
from .plan import limits
from .plan.limits import HOIST_ROWS
from .sizes import symbolic

COSTLY = (S.DIV, S.sqrt)


class Column:
    """A per-column stack array: the buffer a hoisted Load reads (dtype; shape: the inner axes')."""
    __slots__ = ("dtype", "shape")

    def __init__(self, dtype, shape):
        self.dtype, self.shape = dtype, tuple(shape)


def _moves(strides):
    """Whether some of `strides` is not 0 (a symbolic stride may be: no guard)."""
    return any(is_sym(s) or s for s in strides)


def _fixed(kernel, k, made):
    """{id(node): whether it reads only values constant along axes [0, k)} over the kernel's trees (a
    Gather, a checked index, a buffer the kernel writes, an Iota along those axes: not)."""
    out = {}
    for ph in kernel.phases:
        for _, tree in ph.outputs:
            for t in postorder(tree):
                if id(t) in out:
                    continue
                if isinstance(t, (Gather, Checked)):
                    out[id(t)] = False
                elif isinstance(t, Load):
                    out[id(t)] = id(t.buf) not in made and not _moves(t.strides[:k])
                elif isinstance(t, Iota):
                    out[id(t)] = not _moves(t.strides[:k])
                elif isinstance(t, Op):
                    out[id(t)] = all(out[id(a)] for a in t.args)
                else:
                    out[id(t)] = True
    return out


def hoisted(kernel, k):
    """(kernel with its per-column subtrees read from Column arrays, plan [(column, tree)]): axes
    [0, k) are the rows, the others the columns; k = len(kernel.shape): the subtrees constant along
    every axis, each read from a one-element Column. (kernel, []) when nothing is worth it, the rows
    are fewer than HOIST_ROWS (than 2 when k covers every axis) or the columns one."""
    shape = kernel.shape
    inner = shape[k:]
    n = math.prod(inner)
    everywhere = k == len(shape)
    if not k or symbolic(inner) or (n < 2 and not everywhere) or \
            math.prod(map(hint, shape[:k])) < (2 if everywhere else HOIST_ROWS):     # (stack arrays: sized)
        return kernel, []
    fixed = _fixed(kernel, k, {id(v) for ph in kernel.phases for v, _ in ph.outputs})
    strides = (0,) * k + contiguous_strides(inner)
    plan, made, new, budget = [], {}, {}, [limits.hoist_bytes()]

    def varies(t):                   # along the columns (a scalar is hoisted with k = len(shape))
        return everywhere or any(_moves(ld.strides[k:]) for ld in loads(t)) or any(
            isinstance(x, Iota) and _moves(x.strides[k:]) for x in postorder(t))

    def costly(t):
        return any(isinstance(x, Op) and (x.cost == "transcendental" or head(x.lower) in COSTLY) for x in postorder(t))

    def column(tree):
        key = id(tree)
        if key not in made:
            if budget[0] < n * tree.dtype.itemsize:
                return None
            budget[0] -= n * tree.dtype.itemsize
            col = Column(tree.dtype, inner)
            plan.append((col, tree))
            made[key] = Load(col, strides)
        return made[key]

    def worth(t):
        return fixed[id(t)] and isinstance(t, Op) and not isinstance(t, Gather) and t.dtype.is_floating_point \
            and varies(t) and costly(t)

    def rewrite(tree):
        for t in postorder(tree):
            if id(t) in new:
                continue
            if not isinstance(t, Op) or isinstance(t, Gather) or fixed[id(t)]:
                new[id(t)] = t                          # a column subtree: its parent reads it (below)
                continue
            args = [(column(a) if worth(a) else None) or new[id(a)] for a in t.args]
            new[id(t)] = t.with_args(args) if any(x is not y for x, y in zip(args, t.args)) else t
        return (column(tree) if worth(tree) else None) or new[id(tree)]

    phases = [type(ph)(ph.kind, [(v, rewrite(t)) for v, t in ph.outputs], ph.op, ph.axes, ph.lower, ph.cost)
              for ph in kernel.phases]
    if not plan:
        return kernel, []
    out = type(kernel)(kernel.kind, shape, kernel.split, phases)
    out.schedule = kernel.schedule
    return out, plan


def prelude(mb, f, kernel, k, ptrs, plan):
    """Emit plan's per-column arrays (hoisted's) on the stack, filled once per call; adds their
    pointers to ptrs. Emitted before the kernel's loops (a one-element array becomes a register)."""
    inner = kernel.shape[k:]
    for col, _ in plan:
        ptrs[id(col)] = f.alloca(f"[{math.prod(inner)} x {lltype(col.dtype)}]")

    def body(f, iidx):
        em = Emitter(mb, f, ptrs, ["0"] * k + list(iidx))
        off = linear(f, iidx, contiguous_strides(inner))
        for col, tree in plan:
            store(f, ptrs, col, off, em.value(tree))
    _loops(f, list(inner), body)

