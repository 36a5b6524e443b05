"""Adjacent axes of a kernel's space that every operand walks as one axis become one loop.

Fusion keeps a kernel's logical space: a map over an NCHW tensor is a (32, 64, 28, 28) nest whose
innermost loop runs 28 elements (three vectors and a scalar tail per trip), and a float32 sum over
such a short innermost loop adds element by element in float64 (reductions.py, MIN_BLOCK). NumPy
collapses such axes before it loops; so does this step, before a kernel is lowered: axes d and
d + 1 merge when every load reads them as one axis (stride[d] == stride[d + 1] * shape[d + 1],
broadcast axes 0 == 0 included), every reduce phase reduces both or neither, and they lie on the
same side of the kernel's row split (a kernel of maps only has none). Outputs are contiguous over
the space (or its kept axes), so they always merge. The runtime splits axis 0 across threads by its own trip count: when axis 0 absorbs
others, the lowered kernel scales its [lo, hi) bounds by their sizes (`scale`). A kernel with a
Schedule that reorders its loops keeps its space. The merged kernel is lowered in place of the
original; `stage="kernels"` still shows the original.
"""
from ...ir.kernels import Iota, Kernel, Phase, Schedule, known, postorder, remap, same_shape
from ...symint import is_sym


def coalesce(kernel):
    """`kernel`, or an equivalent kernel over fewer axes (see the module docstring)."""
    sch = kernel.schedule
    shape = kernel.shape
    if kernel.kind not in ("loop", "reduce_acc") or len(shape) < 2 or any(known(n, 0) for n in shape) or \
            (sch is not None and (sch.reorders() or sch.rows or sch.transposed or sch.map_levels)):
        return kernel
    reads = kernel.reads + [t for ph in kernel.phases for _, tree in ph.outputs for t in postorder(tree)
                            if isinstance(t, Iota)]          # an arange's index walks the axes too
    reduces = [ph for ph in kernel.phases if ph.kind == "reduce"]
    split = 0 if all(ph.kind == "map" for ph in kernel.phases) else kernel.split   # maps: no rows
    groups = [[0]]
    # per load: the current group's stride (None: only axes of length 1 yet)
    stride = [ld.strides[0] if _long(shape[0]) else None for ld in reads]
    for d in range(1, len(shape)):
        g = groups[-1]
        n = shape[d]
        same_side = split == 0 or (d < split) == (g[0] < split)
        if same_side and _long(n):
            same_side = all(s is None or same_shape((s,), (ld.strides[d] * n,)) for s, ld in zip(stride, reads)) and \
                all(_kind(g, ph, shape) in (None, d in ph.axes) for ph in reduces)
        if same_side:
            g.append(d)
        else:
            groups.append([d])
            stride = [None] * len(reads)
        if _long(n) or not same_side:
            stride = [ld.strides[d] if _long(n) else s for s, ld in zip(stride, reads)]
    if len(groups) == len(shape):
        return kernel
    return _rebuilt(kernel, groups)


def scale(kernel, lowered):
    """The elements of `lowered`'s axis 0 (coalesce(kernel)) per element of kernel's axis 0."""
    return lowered.rows_scale if lowered is not kernel else 1


def _long(n):
    """Whether an axis of size n may be longer than 1 (a symbolic size may: no guard)."""
    return is_sym(n) or n > 1


def _kind(group, ph, shape):
    """Whether reduce phase ph reduces the axes of `group` longer than 1 (None: it has none)."""
    long = [d for d in group if _long(shape[d])]
    return (long[0] in ph.axes) if long else None


def _rebuilt(kernel, groups):
    shape = kernel.shape
    new_shape = [_prod(shape[d] for d in g) for g in groups]

    def strides(old):
        out = []
        for g in groups:
            long = [d for d in g if _long(shape[d])]
            out.append(old[long[-1]] if long else 0)
        return out

    phases, memo = [], {}
    for ph in kernel.phases:
        outputs = [(v, remap(t, lambda st, off: (strides(st), off), memo)) for v, t in ph.outputs]
        axes = None
        if ph.kind == "reduce":
            axes = tuple(j for j, g in enumerate(groups)
                         if _kind(g, ph, shape) or (_kind(g, ph, shape) is None and all(d in ph.axes for d in g)))
        phases.append(Phase(ph.kind, outputs, ph.op, axes, ph.lower, ph.cost))
    split = min(kernel.split, 1) if all(ph.kind == "map" for ph in kernel.phases) else \
        sum(1 for g in groups if g[0] < kernel.split)
    out = Kernel(kernel.kind, new_shape, split, phases)
    out.rows_scale = _prod(shape[d] for d in groups[0][1:])     # axis 0's elements per original row
    sch = kernel.schedule
    if sch is not None:
        out.schedule = Schedule([(d, 0) for d in range(len(new_shape))], online=sch.online, walks=sch.walks)
    return out


def _prod(xs):
    p = 1
    for x in xs:
        p *= x
    return p
