"""Bounds of data-dependent indices, checked at every call at the Python boundary, before the kernels run.

An index whose values come from the inputs (labels, token ids, a `where` of them as nll_loss makes) is
checked by the kernel that reads it, but only if one does: a gather whose result is unused (dead code) or
empty (an empty dimension beside the index) reads none, and eager raises there all the same. So each call
computes such indices from its integer input arrays (NumPy, trace_indices.computed) and raises eager's
IndexError for the first one out of range, in program order (an index computed from float inputs is
checked at the trace and by the kernel reading it only). A used, non-empty gather is left to its kernel
(a NumPy pass over the labels at each call cost a small training step a third of its time); where a
kernel meets an index out of range, the checks name the first one in program order, as eager does. Indices the trace knows (a list, an arange) are checked
while tracing, with guards on symbolic sizes (trace_indices.py), and need nothing here."""
import math

from ..ir.graph import bind_sizes
from ..ops import PRIMS
from ..symint import hints
from ..trace_indices import check_bounds, computed, through_rearranges


def index_checks(graph, sizes):
    """[(index value, dimension size, axis, wrap, read)] of the index ops of traced `graph` whose indices depend
    on its inputs, in program order; `read`: whether a kernel reads the index (its gather is used and not
    empty at these sizes) and so checks it itself (runtime.py); `sizes`: the call's symbol values, binding
    the graph's symbolic sizes."""
    out, live = [], _live(graph)
    for n in graph.nodes:
        if n.op not in PRIMS or PRIMS[n.op].kind != "index":
            continue
        read = id(n.out) in live and math.prod(hints(bind_sizes(n.out.shape, sizes))) > 0
        shape = n.inputs[0].shape if n.op == "index" else n.attrs["shape"]
        for axis, idx in zip(n.attrs["axes"], n.inputs[1:]):
            if _reads_input(idx):
                out.append((idx, hints(bind_sizes(shape[axis], sizes)), axis, n.attrs.get("wrap", True), read))
    return out


def _live(graph):
    """The ids of the values graph's outputs depend on."""
    live, stack = set(), list(graph.outputs)
    while stack:
        v = stack.pop()
        if id(v) not in live:
            live.add(id(v))
            if v.node is not None:
                stack.extend(v.node.inputs)
    return live


def _reads_input(v):
    """Whether value v is a graph input or computed from some, all of them integers or bools (labels, ids,
    masks: cheap to compute again at each call; an index computed from floats, argmax(x @ w), is left to
    the kernel that reads it)."""
    seen, stack, found = set(), [v], False
    while stack:
        u = stack.pop()
        if u.node is None:
            if u.dtype.is_floating_point:
                return False
            found = True
        elif id(u.node) not in seen:
            seen.add(id(u.node))
            stack.extend(u.node.inputs)
    return found


def checking(run, graph, sizes):
    """`run` (a forward on the host arrays of `graph`'s inputs) checking first the data-dependent indices no
    kernel reads, and where one is out of range, or a kernel met one, raising eager's IndexError: the
    first index out of range in program order. `run` itself where there are none."""
    checks = index_checks(graph, sizes)
    if not checks:
        return run
    unread = [c for c in checks if not c[4]]
    position = {id(v): k for k, v in enumerate(graph.inputs)}

    def bind(x):                        # a shape, or a node's attributes
        if type(x) is dict:
            return {k: hints(bind_sizes(v, sizes)) for k, v in x.items()}
        return hints(bind_sizes(x, sizes))

    def verify(arrays, which):
        def leaf(v):
            return arrays[position[id(v)]] if id(v) in position else None
        for idx, size, axis, wrap, _ in which:
            root = through_rearranges(idx)
            a = leaf(root) if root.node is None else None
            if a is None:
                a = computed(idx, leaf, bind)
            if a is not None:
                check_bounds(a, size, axis, wrap)

    def checked_run(arrays):
        try:
            verify(arrays, unread)
            return run(arrays)
        except IndexError:
            verify(arrays, checks)      # eager's error: the first in program order
            raise
    return checked_run
