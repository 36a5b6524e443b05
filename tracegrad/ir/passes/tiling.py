"""A sum of unslices that tile their result along one axis is a cat (a rule of simplify.py).

unslice(v, index) is v placed on a slice of zeros (a slice's gradient). Autodiff sums the gradients
of the slices of one value: chunk(4, -1) of an LSTM's gate pre-activations, gi[t] of every step of a
recurrence. Where those slices are unit-step ranges of one axis, whole on every other axis, and
cover it exactly once, the sum is cat(pieces in axis order, axis): exact (each element is one piece's
value plus zeros), no additions, and a value other passes recognize as row blocks (product_sums.py
joins products over a cat's pieces by reading the cat itself). Sizes must be known."""
from ...symint import is_sym, same_shape

BUDGET = 4096           # nodes of a sum tree looked into, at most


def unslices_as_cat(b, n):
    """The cat equal to the sum at add node n (of the source graph), emitted with `b`, or None."""
    if not (n.op == "add" and all(same_shape(i.shape, n.out.shape) and i.dtype is n.out.dtype for i in n.inputs)):
        return None
    terms, stack = [], list(n.inputs)
    while stack:
        v = stack.pop()
        node = v.node
        if node is not None and node.op == "add" and b.uses.get(id(v)) == 1 and len(terms) + len(stack) < BUDGET \
                and all(same_shape(i.shape, v.shape) and i.dtype is v.dtype for i in node.inputs):
            stack.extend(node.inputs)
        elif node is not None and node.op == "unslice" and b.uses.get(id(v)) == 1:
            terms.append(node)
        else:
            return None
    placed = _tiles(terms, n.out.shape)
    if placed is None:
        return None
    axis, order = placed
    return b.emit("cat", [b.get(t.inputs[0]) for t in order], {"axis": axis}, n.out.shape, n.out.dtype, n.loc)


def _tiles(terms, shape):
    """(axis, the unslices in axis order) when their boxes cover `shape` exactly once along one axis,
    whole on the others; else None."""
    if any(is_sym(s) for s in shape):
        return None
    boxes = []
    for t in terms:
        index = tuple(t.attrs["index"]) + tuple((0, s, 1) for s in shape[len(t.attrs["index"]):])
        if any(is_sym(x) for r in index for x in r) or any(step != 1 for _, _, step in index):
            return None
        boxes.append(index)
    cut = {d for box in boxes for d, (a, e, _) in enumerate(box) if (a, e) != (0, shape[d])}
    if len(cut) > 1 or len(terms) < 2:
        return None
    axis = cut.pop() if cut else 0
    order = sorted(range(len(terms)), key=lambda k: boxes[k][axis][0])
    at = 0
    for k in order:
        a, e, _ = boxes[k][axis]
        if a != at or e <= a:
            return None
        at = e
    if at != shape[axis]:
        return None
    return axis, [terms[k] for k in order]
