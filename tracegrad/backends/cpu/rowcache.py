"""Values a row kernel computes once per element and reads again in later phases (softmax's exp, a
layer norm backward's normalized gradient), kept in row-sized stack buffers: the row stays in cache
and nothing goes to memory for them."""
import math

from ...ir.kernels import Op, postorder, size
from .plan.limits import MAX_KEPT, MIN_OPS, scratch_limit
from .scalar import linear, regtype
from .sizes import symbolic


class RowCache:
    """For each walk w over the row (`groups`: lists of phase indices, Schedule.walks), `picked[w]`:
    the outermost nodes of its phases' trees that a later walk also reads (only the trees themselves
    for `roots_only` walks, which lower their own loops: online.py)."""

    def __init__(self, f, kernel, groups, roots_only=(), capacity=None):
        """capacity: symbolic rows' buffers' elements (rows no longer: `capacity`), else None: no cache."""
        self.bufs, self.nodes, self.picked, self.done = {}, {}, {}, {}   # done: ids in the order kept
        inner = kernel.shape[kernel.split:]
        self.strides = [math.prod(inner[d + 1:]) for d in range(len(inner))]
        if symbolic(inner):
            if not kernel.split or capacity is None:
                return
            elements = capacity
        elif not kernel.split or not 0 < math.prod(inner) <= scratch_limit():
            return
        else:
            elements = math.prod(inner)
        later = set()
        for w in range(len(groups) - 1, -1, -1):
            trees = [t for j in groups[w] for _, t in kernel.phases[j].outputs]
            picked = [t for t in trees if isinstance(t, Op) and id(t) in later] if w in roots_only else \
                [t for t in _outermost(trees, later) if size(t) >= MIN_OPS or t in trees]
            picked = [t for t in picked if id(t) in self.bufs or len(self.bufs) < MAX_KEPT]
            for t in picked:
                self.nodes[id(t)] = t
                if id(t) not in self.bufs:
                    self.bufs[id(t)] = f.alloca(f"[{elements} x {regtype(t.dtype)}]")
            self.picked[w] = picked
            for t in trees:
                later.update(id(x) for x in postorder(t))

    def _slot(self, f, tid, iidx):
        ty = regtype(self.nodes[tid].dtype)
        return ty, f.assign(f"getelementptr inbounds {ty}, ptr {self.bufs[tid]}, i64 {linear(f, iidx, self.strides)}")

    def seed(self, em, iidx):
        """Values cached by earlier phases: loaded, not recomputed."""
        for tid in self.done:
            ty, p = self._slot(em.f, tid, iidx)
            em.memo[tid] = em.f.assign(f"load {ty}, ptr {p}")

    def keep(self, em, w, iidx):
        """After walk w's element: store each value it picked that no earlier walk kept, computed
        here if its own trees skipped it (reached only through a value an earlier walk kept): every
        buffer a later walk loads is written first."""
        for t in self.picked.get(w, ()):
            if id(t) not in self.done:
                ty, p = self._slot(em.f, id(t), iidx)
                em.f.emit(f"store {ty} {em.value(t)}, ptr {p}")

    def finish(self, w):
        self.done.update((id(t), None) for t in self.picked.get(w, ()))


def _outermost(trees, wanted):
    """The nodes of `trees` with ids in `wanted`, outermost first (their subtrees not searched)."""
    out, seen, stack = [], set(), list(trees)
    while stack:
        t = stack.pop()
        if id(t) in seen or not isinstance(t, Op):
            continue
        seen.add(id(t))
        if id(t) in wanted:
            out.append(t)
        else:
            stack.extend(t.args)
    return out
