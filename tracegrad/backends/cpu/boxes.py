"""Maps and natural column walks over the pieces of a cat, an unslice or a pad, box by box (the
planner's Strategy.boxes).

ir/boxes.py cuts the kernel's space where the pieces meet. The loop nest keeps natural (memory) order,
a cut axis running interval by interval, each interval's loop holding the rest of the nest; the
innermost loop of each box runs its trees resolved there (each element reads its one piece at an
affine index, a pad's border is a constant fill), storing into the one output buffer at the element's
place, or adding into the accumulators. The threads' rows [lo, hi) clip the boxes' bounds along axis 0. Bounds with symbolic
sizes are checked at the call (ir/boxes.py's `ordered`); where they do not hold the kernel runs its
natural loop (the selects).

Measured (python -m tracegrad.bench.ab --rev main --cpu, TRACEGRAD_THREADS=1, CPU time per call, medians
of 21 interleaved rounds, a 2-core AMD EPYC with AVX-512 at load 7-10; native / TRACEGRAD_CPU=x86-64-v3):
ROTARY (the survey's rotary embedding fwd+bwd) 2.46 -> 1.02 ms / 4.40 -> 1.12; CAT_TANH
(cat((a, b), -1).tanh(), two (1024, 512) float32) 1.64 -> 0.34 / 1.30 -> 0.72; PAD (F.pad(relu(x),
(1, 1, 1, 1)), (16, 32, 56, 56)) 2.58 -> 0.39 / 1.77 -> 0.36. Before, each element computed which
piece it lies in and read it with a clamped gather. The survey's slice_assign fwd+bwd is 1.04-1.09x
(its forward 0.85x): LLVM turns the zero interval of its gradient into a memset, which does not stream.
"""
from ...ir import boxes as B
from ...ir.kernels import contiguous_strides, loads
from ...symint import is_sym
from .loops import ROLL_MIN, ROLLED, SCALAR, _counted
from .reductions import _blocked_loops
from .scalar import Emitter, linear, lltype, store
from .stream import ALIGN
from .stream import NAME as STREAM


def boxed(mb, f, kernel, ptrs):
    """Emit `kernel` (map phases only) box by box. Returns True when that covers every call; False when
    it emitted a check of the symbolic bounds' order and leaves the general loop to follow it (the
    current block runs it when the check fails)."""
    cuts = B.bounds(kernel)
    general = _check(f, cuts)
    made = {id(v) for ph in kernel.phases for v, _ in ph.outputs}
    apart = any(id(ld.buf) in made for ph in kernel.phases for _, t in ph.outputs for ld in loads(t))
    full = contiguous_strides(kernel.shape)
    for group in [[ph] for ph in kernel.phases] if apart else [kernel.phases]:   # a phase reading another's: in turn
        outs = [(v, t) for ph in group for v, t in ph.outputs]
        trees = _Trees(cuts, [t for _, t in outs])

        def inner(f, lo, hi, known, idx, box, outs=outs, trees=trees):
            resolved, meta = trees.at(box), ROLLED if known is not None and known >= ROLL_MIN else None

            def element(f, j, rebased=None):
                at = idx + [j]
                em = Emitter(mb, f, ptrs, at)
                vals = [(v, em.value(resolved[id(t)])) for v, t in outs]
                off = linear(f, at, full)
                for v, x in vals:
                    if rebased and id(v) in rebased:
                        p, first = rebased[id(v)]
                        store(f, {id(v): p}, v, f.assign(f"sub nsw i64 {off}, {first}"), x)
                    else:
                        store(f, ptrs, v, off, x)
            streamed = [v for v, _ in outs if ptrs[id(v)].startswith(f"%{STREAM}")]
            if len({v.dtype.itemsize for v in streamed}) != 1:
                _counted(f, lo, hi, element, meta)
                return
            # streamed outputs (stream.py): the interval's elements up to an aligned vector alone, the rest
            # stored through pointers LLVM knows are aligned (llvm.py's _aligned_rows)
            vec = ALIGN // streamed[0].dtype.itemsize
            off = linear(f, idx + [lo], full)
            neg = f.assign(f"sub nsw i64 0, {off}")
            head = f.assign(f"add nsw i64 {lo}, {f.assign(f'and i64 {neg}, {vec - 1}')}")
            start = _pick(f, "slt", head, hi)
            _counted(f, lo, start, element, SCALAR)
            first = f.assign(f"add nsw i64 {off}, {f.assign(f'sub nsw i64 {start}, {lo}')}")
            rebased = {}
            for v in streamed:
                ty = lltype(v.dtype)
                q = f.assign(f"getelementptr inbounds {ty}, ptr {ptrs[id(v)]}, i64 {first}")
                rebased[id(v)] = (f.assign(f"call ptr @llvm.ptrmask.p0.i64(ptr {q}, i64 {-ALIGN})"), first)
            _counted(f, start, hi, lambda f, j: element(f, j, rebased), meta)
        _nest(f, kernel, cuts, ("%lo", "%hi"), inner)
    if general is None:
        return True
    f.emit("ret void")
    f.block(general)
    return False


def blocked_walk(f, kernel, boxes, current, body, accs, rows, meta=None):
    """A reduce_acc kernel's natural walk (llvm.py's _reduce_acc: Walk.BLOCKED, or a block of rows of
    Walk.OUTER_BLOCKS) over axis 0's `rows`, blocked for the accumulators `accs` (`meta` on axis 0's
    loop); with `boxes` (Strategy.boxes) box by box: `current` (a dict that body(f, idx) reads its trees
    from: id(tree) -> tree) holds the resolved trees of the box whose innermost loop is being emitted.
    Symbolic bounds out of order at the call run the natural walk instead."""
    def natural(f):
        _blocked_loops(f, kernel.shape, body, accs, lo_hi=rows, meta=meta)
    if not boxes:
        natural(f)
        return
    cuts = B.bounds(kernel)
    general = _check(f, cuts)
    done = f.label() if general else None
    trees = _Trees(cuts, [t for ph in kernel.phases for _, t in ph.outputs])

    def inner(f, lo, hi, known, idx, box):
        current.update(trees.at(box))
        _blocked_loops(f, [None], lambda f, j: body(f, idx + j), accs, lo_hi=(lo, hi))
    _nest(f, kernel, cuts, rows, inner, meta)
    current.clear()
    if general:
        f.emit(f"br label %{done}")
        f.block(general)
        natural(f)
        f.emit(f"br label %{done}")
        f.block(done)


class _Trees:
    """The trees of a kernel resolved over each box of `cuts` (ir/boxes.py), each box's once."""

    def __init__(self, cuts, trees):
        self.cuts, self.trees, self.boxes = cuts, trees, {}

    def at(self, box):
        """{id(tree): the tree over box `box`}."""
        key = tuple(sorted(box.items()))
        if key not in self.boxes:
            memo = {}
            self.boxes[key] = {id(t): B.resolved(t, self.cuts, box, memo) for t in self.trees}
        return self.boxes[key]


def _nest(f, kernel, cuts, rows, inner, meta=None):
    """The loop nest over the kernel's space in natural order (memory order: each row's pieces in turn),
    an axis that `cuts` cut run interval by interval, each interval's loop holding the rest of the nest;
    inner(f, lo, hi, known, idx, box) emits the innermost axis's loop over [lo, hi) (`known`: its trip
    count where known) at outer indices `idx`, in box `box`. Axis 0 is clipped to `rows` (the threads'
    [%lo, %hi)) when they split it; `meta` is its loop's metadata."""
    shape, last = kernel.shape, len(kernel.shape) - 1

    def level(d, idx, box):
        line = cuts.get(d, (0, shape[d]))
        for i, (a, b) in enumerate(zip(line, line[1:])):
            known = None if is_sym(a) or is_sym(b) else b - a
            lo, hi = f.size(a), f.size(b)
            if d == 0 and (kernel.split or kernel.kind == "reduce_acc"):
                lo, hi = _pick(f, "sgt", lo, rows[0]), _pick(f, "slt", hi, rows[1])
            here = {**box, d: i} if d in cuts else box
            if d == last:
                inner(f, lo, hi, known, idx, here)
            else:
                _counted(f, lo, hi, lambda f, j, here=here: level(d + 1, idx + [j], here), meta if d == 0 else None)
    level(0, [], {})


def _check(f, cuts):
    """Where symbolic bounds must keep their order (ir/boxes.py's `ordered`): a branch on it, into a new
    block when they do; returns the label of the block where they do not (None: nothing to check)."""
    checks = [f.assign(f"icmp sle i64 {f.size(a)}, {f.size(b)}") for a, b in B.ordered(cuts)]
    if not checks:
        return None
    ok = checks[0]
    for c in checks[1:]:
        ok = f.assign(f"and i1 {ok}, {c}")
    go, general = f.label(), f.label()
    f.emit(f"br i1 {ok}, label %{go}, label %{general}")
    f.block(go)
    return general


def _pick(f, cmp, a, b):
    """a when `icmp cmp a, b` holds, else b (the larger or smaller of two i64 operands)."""
    return f.assign(f"select i1 {f.assign(f'icmp {cmp} i64 {a}, {b}')}, i64 {a}, i64 {b}")
