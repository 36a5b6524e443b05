"""Bounds of index tensors whose values the trace knows (a list or an arange made inside the function):
checked while tracing, in program order, as eager checks them. A compiled kernel checks the indices it
reads, but only those it reads: a gather whose result is unused, or whose result is empty (an index into
an empty dimension beside it), reads none, and a shape error later in the program would be raised at the
trace, before a kernel's index error. Here the IndexError comes where eager raises it; on a symbolic size
each bound is a comparison on the symbol, recorded as a guard (`B >= 2` for an index 1), so a call at a
size where the index is out of range retraces and raises there."""
import numpy as np

from .core import PRIMS
from .symint import hint


def check_known_indices(tracer, p, inputs, attrs):
    """IndexError in eager's words for the first known index out of range of `p` when it indexes (index or
    index_add); nothing for other primitives."""
    if p.kind != "index":
        return
    x_shape = inputs[0]._shape if p.name == "index" else attrs["shape"]
    wrap = attrs.get("wrap", True)
    for axis, idx in zip(attrs["axes"], inputs[1:]):
        known = _known(tracer, idx._ir)
        if known is None:
            continue
        lo, hi, values, made_inside = known
        size = x_shape[axis] if made_inside else hint(x_shape[axis])    # an input's values: this call only
        if (-size if wrap else 0) <= lo and hi < size:
            continue
        bad = next(int(v) for v in values() if not (-hint(size) if wrap else 0) <= v < hint(size))
        raise IndexError(f"index {bad} is out of bounds for dimension {axis} with size {size}")


def _known(tracer, v):
    """(least, greatest, the values in order, whether made inside the function) of traced value v when the
    trace knows them and they are not none (an empty index checks nothing); else None. An input's values
    (labels passed in) are this call's only: checked here so that its error comes in eager's order (a later
    call with the same sizes runs the kernel, which checks them), compared without a guard."""
    node = v.node
    while node is not None and node.op in PRIMS and PRIMS[node.op].rearranges:
        v = node.inputs[0]
        node = v.node
    if node is None:              # a graph input: an index array made inside the function is a frozen one
        entry = next((e for e in tracer.order if e.value is v), None)
        a = None if entry is None or entry.real._device.type != "cpu" else np.asarray(entry.real._data)
        if a is None or not a.size or a.dtype.kind not in "iu":
            return None
        return int(a.min()), int(a.max()), lambda: a.reshape(-1).tolist(), entry.source[0] == "const"
    if node.op == "const" and isinstance(node.attrs["value"], int) and all(hint(d) for d in v.shape):
        c = node.attrs["value"]
        return c, c, lambda: [c], True
    if node.op == "iota" and hint(node.attrs["n"]):
        n, start, step = node.attrs["n"], node.attrs["start"], node.attrs["step"]
        last = start + step * (n - 1)
        lo, hi = (start, last) if hint(step) >= 0 else (last, start)
        return lo, hi, lambda: [hint(start) + hint(step) * k for k in range(hint(n))], True
    return None
