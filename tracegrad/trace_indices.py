"""Bounds of index tensors whose values the trace knows (a list or an arange made inside the function):
checked while tracing, in program order, as eager checks them. A compiled kernel checks the indices it
reads, but only those it reads: a gather whose result is unused, or whose result is empty (an index into
an empty dimension beside it), reads none, and a shape error later in the program would be raised at the
trace, before a kernel's index error. Here the IndexError comes where eager raises it; on a symbolic size
each bound is a comparison on the symbol, recorded as a guard (`B >= 2` for an index 1), so a call at a
size where the index is out of range retraces and raises there.

Indices computed from the inputs' values (labels, token ids, a `where` of them, as nll_loss makes) are
computed here with NumPy from this call's inputs and checked the same way, so that their IndexError comes
before a later shape error of the trace, as eagerly; calls that do not trace check them at the call
(jit/index_checks.py)."""
import numpy as np

from .core import PRIMS
from .symint import hint, hints

MAX_NODES = 32      # an index computed by more ops than this is left to the kernels' own checks


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
            a = computed(idx._ir, lambda v: _input_array(tracer, v), hints)
            if a is not None:
                check_bounds(a, hint(x_shape[axis]), axis, wrap)     # the input's values: this call only
            continue
        lo, hi, values, made_inside = known
        size = x_shape[axis] if made_inside else hint(x_shape[axis])    # an input's values: this call only
        if (-size if wrap else 0) <= lo and hi < size:
            continue
        bad = next(int(v) for v in values() if not (-hint(size) if wrap else 0) <= v < hint(size))
        raise IndexError(f"index {bad} is out of bounds for dimension {axis} with size {size}")


def check_bounds(a, size, axis, wrap):
    """IndexError in eager's words for the first value of int array `a` out of range of a dimension of `size`."""
    if not a.size:
        return
    low = -size if wrap else 0
    if int(a.min()) < low or int(a.max()) >= size:
        bad = next(int(v) for v in a.reshape(-1) if not low <= v < size)
        raise IndexError(f"index {bad} is out of bounds for dimension {axis} with size {size}")


def computed(v, leaf, bind):
    """The values of traced value v computed with NumPy from its graph's inputs (`leaf(input value)`: its
    array, or None where unknown; `bind`: a shape or attributes with plain sizes), or None where v is no
    computation of inputs: a graph input itself (_known checks those), made of no input, through a random
    primitive, or through more than MAX_NODES ops."""
    order = _ops_before(v, [], set())
    if order is None or v.node is None or not any(i.node is None for n in order for i in n.inputs):
        return None
    env = {}
    with np.errstate(all="ignore"):
        for n in order:
            args = [env[id(i)] if i.node is not None else leaf(i) for i in n.inputs]
            if any(a is None for a in args):
                return None
            if n.op == "const":
                env[id(n.out)] = np.full(bind(n.out.shape), n.attrs["value"], dtype=n.out.dtype.np)
            else:
                env[id(n.out)] = np.asarray(PRIMS[n.op].impl(*args, **bind(n.attrs))).astype(n.out.dtype.np, copy=False)
    return env[id(v.node.out)]


def _ops_before(v, order, seen):
    """The ops value v depends on, each once, in an order that computes each op's inputs before it (None
    where they are more than MAX_NODES or one is random)."""
    n = v.node
    if n is None or id(n) in seen:
        return order
    if len(seen) >= MAX_NODES or n.op != "const" and (n.op not in PRIMS or PRIMS[n.op].effect):
        return None
    seen.add(id(n))
    for i in n.inputs:
        if _ops_before(i, order, seen) is None:
            return None
    order.append(n)
    return order


def through_rearranges(v):
    """The value v rearranges (reshape, permute: each element once, so the same values), or v."""
    while v.node is not None and v.node.op in PRIMS and PRIMS[v.node.op].rearranges:
        v = v.node.inputs[0]
    return v


def _input_array(tracer, v):
    """The array of this call's value of graph input v (cpu only), or None."""
    entry = next((e for e in tracer.order if e.value is v), None)
    return None if entry is None or entry.real._device.type != "cpu" else np.asarray(entry.real._data)


def _known(tracer, v):
    """(least, greatest, the values in order, whether made inside the function) of traced value v when the
    trace knows them and they are not none (an empty index checks nothing); else None. An input's values
    (labels passed in) are this call's only: checked here so that its error comes in eager's order (a later
    call with the same sizes checks them at the call, jit/index_checks.py), compared without a guard."""
    v = through_rearranges(v)
    node = v.node
    if node is None:              # a graph input: an index array made inside the function is a frozen one
        a = _input_array(tracer, v)
        if a is None or not a.size or a.dtype.kind not in "iu":
            return None
        entry = next(e for e in tracer.order if e.value is v)
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
