"""Adjacent axes of a kernel's space that every operand walks as one axis become one loop.

Fusion keeps a kernel's logical space: a map over an NCHW tensor is a (32, 64, 28, 28) nest whose
innermost loop runs 28 elements (three vectors and a scalar tail per trip), and a float32 sum over
such a short innermost loop adds element by element in float64 (reductions.py, MIN_BLOCK). NumPy
collapses such axes before it loops; so does this step, before a kernel is lowered: axes d and
d + 1 merge when every load reads them as one axis (stride[d] == stride[d + 1] * shape[d + 1],
broadcast axes 0 == 0 included), every reduce phase reduces both or neither, and they lie on the same
side of the kernel's row split. Outputs are contiguous over the space (or its kept axes), so they
always merge. Axis 0 never merges: the runtime splits it across threads by its trip count. A kernel
with a Schedule that reorders its loops keeps its space. The merged kernel is lowered in place of
the original; `stage="kernels"` still shows the original.
"""
from ..ir.kernels import Iota, Kernel, Phase, Schedule, postorder, remap


def coalesce(kernel):
    """`kernel`, or an equivalent kernel over fewer axes (see the module docstring)."""
    sch = kernel.schedule
    shape = kernel.shape
    if kernel.kind not in ("loop", "reduce_acc") or len(shape) < 3 or 0 in shape or \
            (sch is not None and (sch.reorders() or sch.rows or sch.transposed or sch.map_levels)):
        return kernel
    reads = kernel.reads + [t for ph in kernel.phases for _, tree in ph.outputs for t in postorder(tree)
                            if isinstance(t, Iota)]          # an arange's index walks the axes too
    reduces = [ph for ph in kernel.phases if ph.kind == "reduce"]
    groups = [[0]]
    stride = [None] * len(reads)          # per load: the current group's stride (None: only 1-axes yet)
    for d in range(1, len(shape)):
        g = groups[-1]
        n = shape[d]
        same_side = g[0] != 0 and (kernel.split == 0 or (d < kernel.split) == (g[0] < kernel.split))
        if same_side and n > 1:
            same_side = all(s is None or s == ld.strides[d] * n for s, ld in zip(stride, reads)) and \
                all(_kind(g, ph, shape) in (None, d in ph.axes) for ph in reduces)
        if same_side:
            g.append(d)
        else:
            groups.append([d])
            stride = [None] * len(reads)
        if n > 1 or not same_side:
            stride = [ld.strides[d] if n > 1 else s for s, ld in zip(stride, reads)]
    if len(groups) == len(shape):
        return kernel
    return _rebuilt(kernel, groups)


def _kind(group, ph, shape):
    """Whether reduce phase ph reduces the axes of `group` longer than 1 (None: it has none)."""
    long = [d for d in group if shape[d] > 1]
    return (long[0] in ph.axes) if long else None


def _rebuilt(kernel, groups):
    shape = kernel.shape
    new_shape = [_prod(shape[d] for d in g) for g in groups]

    def strides(old):
        out = []
        for g in groups:
            long = [d for d in g if shape[d] > 1]
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
    split = sum(1 for g in groups if g[0] < kernel.split)
    out = Kernel(kernel.kind, new_shape, split, phases)
    sch = kernel.schedule
    if sch is not None:
        out.schedule = Schedule([(d, 0) for d in range(len(new_shape))], online=sch.online, walks=sch.walks)
    return out


def _prod(xs):
    p = 1
    for x in xs:
        p *= x
    return p
