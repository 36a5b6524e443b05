"""A map kernel over a cat, an unslice or a pad written box by box (the planner's Strategy.boxes).

ir/boxes.py cuts the kernel's space where the pieces meet; each box gets a loop nest of its own over
its bounds, its trees resolved there (each element reads its one piece at an affine index, a pad's
border is a constant fill), storing into the one output buffer at the element's place. The threads'
rows [lo, hi) clip the boxes' bounds along axis 0. Bounds with symbolic sizes are checked at the call
(ir/boxes.py's `ordered`); where they do not hold the kernel runs its general loop (the selects).

Measured (interleaved A/B in one process, median ms; see the branch's report for the load):
rotary embedding's cat of rotated halves, a cat along the last axis followed by tanh, a convolution's
zero pad: the figures are in tracegrad/bench/boxes.py's docstring.
"""
from ...ir import boxes as B
from ...ir.kernels import contiguous_strides, loads
from ...symint import is_sym
from .loops import ROLL_MIN, ROLLED, _counted
from .scalar import Emitter, linear, store


def boxed(mb, f, kernel, ptrs):
    """Emit `kernel` (map phases only) box by box. Returns True when that covers every call; False when
    it emitted a check of the symbolic bounds' order and leaves the general loop to follow it (the
    current block runs it when the check fails)."""
    cuts = B.bounds(kernel)
    checks = [f.assign(f"icmp sle i64 {f.size(a)}, {f.size(b)}") for a, b in B.ordered(cuts)]
    general = None
    if checks:
        ok = checks[0]
        for c in checks[1:]:
            ok = f.assign(f"and i1 {ok}, {c}")
        go, general = f.label(), f.label()
        f.emit(f"br i1 {ok}, label %{go}, label %{general}")
        f.block(go)
    made = {id(v) for ph in kernel.phases for v, _ in ph.outputs}
    apart = any(id(ld.buf) in made for ph in kernel.phases for _, t in ph.outputs for ld in loads(t))
    groups = [[ph] for ph in kernel.phases] if apart else [kernel.phases]   # a phase reading another's: in turn
    for group in groups:
        for box in B.boxes(cuts):
            memo = {}
            trees = [(v, B.resolved(t, cuts, box, memo)) for ph in group for v, t in ph.outputs]
            _box_loops(mb, f, kernel, ptrs, cuts, box, trees)
    if general is None:
        return True
    f.emit("ret void")
    f.block(general)
    return False


def _box_loops(mb, f, kernel, ptrs, cuts, box, trees):
    """The loop nest over one box, storing each tree's value at its element."""
    shape, full = kernel.shape, contiguous_strides(kernel.shape)
    ranges = []
    for d, n in enumerate(shape):
        lo, hi = (cuts[d][box[d]], cuts[d][box[d] + 1]) if d in box else (0, n)
        known = None if is_sym(lo) or is_sym(hi) else hi - lo
        lo, hi = f.size(lo), f.size(hi)
        if d == 0 and kernel.split:         # the threads' rows
            lo = _pick(f, "sgt", lo, "%lo")
            hi = _pick(f, "slt", hi, "%hi")
        ranges.append((lo, hi, known))
    idx = []

    def level(d):
        if d == len(shape):
            em = Emitter(mb, f, ptrs, list(idx))
            vals = [(v, em.value(t)) for v, t in trees]
            off = linear(f, idx, full)
            for v, x in vals:
                store(f, ptrs, v, off, x)
            return
        lo, hi, known = ranges[d]

        def trip(f, i):
            idx.append(i)
            level(d + 1)
            idx.pop()
        _counted(f, lo, hi, trip, ROLLED if d == len(shape) - 1 and known is not None and known >= ROLL_MIN else None)
    level(0)


def _pick(f, cmp, a, b):
    """a when `icmp cmp a, b` holds, else b (the larger or smaller of two i64 operands)."""
    return f.assign(f"select i1 {f.assign(f'icmp {cmp} i64 {a}, {b}')}, i64 {a}, i64 {b}")
