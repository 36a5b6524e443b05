"""Facts about memory order (no decisions): which axis an operand walks fastest, its axes by stride, the
bytes and strides of a kernel's operands, which of them are heavy, and the permutation that makes a
reduction of a view one over memory's rows (`rows_first`) or columns (`columns_first`), which fusion
asks. The planners (the CPU's backends/cpu/plan/, the cuda target's backends/cuda/plan.py) decide
from these, each with its own thresholds."""
import math

from ..strides import contiguous_strides
from ..symint import hint, is_sym
from . import boxes
from .kernels import hinted, hinted_tree, nbytes

HEAVY = 0.5          # operands at least this fraction of the largest one's bytes decide the order


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
    output comes first among equals: contiguous stores matter more than loads; the pieces of a cat as
    its boxes read them, boxes.reads). Sizes at their hints."""
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
    return out + [(read_bytes(k.shape, ld), ld.strides) for ld in boxes.reads(k)]


def read_bytes(shape, ld):
    """The bytes load ld reads over a space of `shape`: its buffer's, or fewer for a view of part of
    it (a slice x[:, :n] walks n columns of each row; broadcast axes read nothing new)."""
    walked = math.prod(hint(n) for n, s in zip(shape, ld.strides) if is_sym(s) or s) * ld.dtype.itemsize
    return min(nbytes(ld.buf), walked)


def heavy(ops):
    """The heavy ones of operands [(bytes, strides)] (HEAVY of the largest's bytes), largest first."""
    big = max(b for b, _ in ops)
    return sorted((o for o in ops if o[0] >= HEAVY * big), key=lambda o: -o[0])


def mixed(k, reads, reduced):
    """The kept axis a row kernel of reductions reduces across when its heavy reads ([(bytes, strides)])
    disagree: some walk a reduced axis with unit stride, others this kept one ((x.T * z).sum(1)); None
    when they agree, or when the kernel has map phases or reductions reading each other."""
    if not reads or any(ph.kind != "reduce" for ph in k.phases):
        return None
    made = {id(v) for ph in k.phases for v, _ in ph.outputs}
    if any(id(ld.buf) in made for ld in k.reads):
        return None
    units = [unit_axis(k.shape, st) for _, st in heavy(reads)]
    kept = [d for d in units if d not in reduced]
    return kept[0] if kept and any(d in reduced for d in units) else None


def in_order(k):
    """Whether natural order walks the memory of loop kernel k in order: its heavy operands agree on
    one unit-stride axis (a reduced one, for a kernel with reductions) and their memory order is the
    kernel's axes in order. Fusion asks it of a kernel it may merge."""
    k = hinted(k)
    ops = [(b, st) for b, st in operands(k) if unit_axis(k.shape, st) is not None]
    if not ops:
        return True
    big = heavy(ops)
    if any(ph.kind == "reduce" for ph in k.phases):
        reduced = set(range(k.split, len(k.shape)))
        reads = [(nbytes(ld.buf), ld.strides) for ld in boxes.reads(k) if unit_axis(k.shape, ld.strides) is not None]
        src = max(reads, key=lambda o: o[0])[1] if reads else big[0][1]
        return mixed(k, reads, reduced) is None and unit_axis(k.shape, src) in reduced
    return len({unit_axis(k.shape, st) for _, st in big}) == 1 and \
        tuple(memory_order(k.shape, big[0][1])) == tuple(range(len(k.shape)))


def columns_first(shape, axes, tree):
    """The permutation of a row reduction's space (its reduced trailing `axes` by the largest read's
    strides, largest first, then its kept axes in order) that makes it a reduction over memory's
    leading axes, when every heavy read (HEAVY of the largest) lays the reduced axes outermost, before
    all the kept axes, and the last kept axis innermost: softmax(x.T, 1) is then softmax(x, 0), one
    online column walk (ir/walks.py's online_columns). A total over all axes is permuted into the
    memory order its heavy reads agree on (the loss of such a softmax then joins the kernel over x's
    space that writes dx). Else None."""
    shape, tree = hinted_tree(shape, tree)     # heuristics on the hints: speed only
    nd = len(shape)
    kept = [d for d in range(nd) if d not in axes]
    reads = [(read_bytes(shape, ld), ld.strides) for ld in boxes.tree_reads(shape, [tree])
             if unit_axis(shape, ld.strides) is not None]
    if not axes or not reads:
        return None
    big = heavy(reads)
    if not kept:                    # a total: in memory order where every heavy read agrees on it
        orders = {tuple(d for d in memory_order(shape, st) if shape[d] > 1) for _, st in big}
        order = memory_order(shape, big[0][1])
        return order if len(orders) == 1 and order != list(range(nd)) else None
    if list(axes) != list(range(nd - len(axes), nd)):
        return None
    for _, st in big:
        walk = [d for d in memory_order(shape, st) if shape[d] > 1]          # outermost first
        last = next((i for i, d in enumerate(walk) if d not in axes), len(walk))
        if last == len(walk) or any(d in axes for d in walk[last:]) or walk[-1] != max(d for d in kept if shape[d] > 1):
            return None
    order = memory_order(shape, big[0][1])
    return [d for d in order if d in axes] + kept


def rows_first(shape, axes, tree):
    """The permutation of a reduction's space (its kept axes in order, then the reduced `axes` by the
    strides of the largest read that lays them innermost, largest first) that makes it a row
    reduction over memory's rows, when the reduced axes are not trailing but a heavy read (HEAVY of
    the largest) lays them out innermost, after all the kept axes, and every other heavy read walks
    a kept axis with unit stride: x.T.sum(0), x.permute(2, 0, 1).mean((1, 2)) are row sums of x;
    (x.T * z).sum(0) is (x * z.T).sum(1), a row reduction whose reads disagree (`mixed`: z's
    tiles transposed in registers). Else None (an accumulation over the rows, or across a kept
    unit-stride axis: the CPU planner's `choose`). Measured (one thread, (2048, 2048) float32): x.T.sum(0) 6.3 ms as
    an accumulation in x's memory order, 0.8 ms as rows, x.sum(1)'s time; (x.T * z).sum(0) 5.5 ms
    as an accumulation over tiles (CPU time, a loaded machine), 2.5 ms as mixed rows, (x * z).sum(1)
    1.6 ms. A kept axis between reduced ones in memory (a batch norm's sum over (0, 2, 3)) stays an
    accumulation: as rows, (256, 16, 8, 8) took 3x."""
    shape, tree = hinted_tree(shape, tree)     # heuristics on the hints: speed only
    nd = len(shape)
    kept = [d for d in range(nd) if d not in axes]
    if not kept or not axes or list(axes) == list(range(nd - len(axes), nd)):
        return None
    reads = [(read_bytes(shape, ld), ld.strides) for ld in boxes.tree_reads(shape, [tree])
             if unit_axis(shape, ld.strides) is not None]
    if not reads:
        return None
    big = heavy(reads)
    rows = []
    for _, st in big:
        walk = [d for d in memory_order(shape, st) if shape[d] > 1]          # outermost first
        first = next((i for i, d in enumerate(walk) if d in axes), len(walk))
        if first < len(walk) and all(d in axes for d in walk[first:]):
            rows.append(st)
        elif unit_axis(shape, st) in axes:
            return None
    if not rows:
        return None
    order = memory_order(shape, rows[0])
    return kept + [d for d in order if d in axes]
