"""A slice of a cat or of an unslice, read from what lies under its box (a rule of simplify.py).

A recurrence stacks its steps' outputs (cat) and a model reads only the last one (lstm(x)[0][-1]);
its gradient places that step's cotangent on zeros (unslice), then each step slices it again. So:
- slice(cat(pieces)) whose box lies inside one piece along the cat's axis is a slice of that piece
  (the piece itself where the box covers it): the cat is no longer read and is dropped;
- slice(unslice(v)) whose box is the unslice's box is v; one that misses it on some axis is zeros;
  one inside it is a slice of v; one around it is v placed on the smaller zeros (an unslice).
Exact (each element of the result is the very element it was). Unit steps and known sizes only;
other slices stay as they are."""
from ...symint import is_sym


def _box(index, shape):
    """The (start, stop) per axis of a slice `index` of a value of `shape` (trailing axes whole), or
    None when a bound is symbolic or a step is not 1."""
    full = tuple(index) + tuple((0, s, 1) for s in shape[len(index):])
    if any(is_sym(x) for r in full for x in r) or any(step != 1 for _, _, step in full):
        return None
    return [(a, e) for a, e, _ in full]


def _sliced(b, n, src, box):
    """src (of shape its own) sliced to `box`, or src itself where the box is all of it."""
    if all((a, e) == (0, s) for (a, e), s in zip(box, src.shape)):
        return src if tuple(src.shape) == tuple(n.out.shape) else None
    return b.emit("slice", [src], {"index": tuple((a, e, 1) for a, e in box)}, n.out.shape, n.out.dtype, n.loc)


def slice_of_copy(b, n, ins):
    """The rewrite of slice node n (input rewritten to ins[0]) reading a cat's piece or an unslice's
    source, or None."""
    src = ins[0]
    node = src.node
    if node is None or any(is_sym(s) for s in src.shape):
        return None
    box = _box(n.attrs["index"], src.shape)
    if box is None or any(e <= a for a, e in box):
        return None
    if node.op == "cat":
        return _of_cat(b, n, node, box)
    if node.op == "unslice":
        return _of_unslice(b, n, node, box, src.shape)
    return None


def _of_cat(b, n, node, box):
    """The slice `box` of cat node `node`: a slice of the one piece it lies in, else None."""
    axis, at = node.attrs["axis"], 0
    a, e = box[axis]
    for piece in node.inputs:
        size = piece.shape[axis]
        if at <= a and e <= at + size:
            inner = list(box)
            inner[axis] = (a - at, e - at)
            return _sliced(b, n, piece, inner)
        at += size
    return None


def _of_unslice(b, n, node, box, shape):
    """The slice `box` of unslice node `node` (of `shape`): zeros where it misses the placed box, a
    slice of the source inside it, the source on smaller zeros around it, else None."""
    placed = _box(node.attrs["index"], shape)
    if placed is None:
        return None
    if any(e <= pa or pe <= a for (a, e), (pa, pe) in zip(box, placed)):
        zero = n.out.dtype.np.type(0).item()
        return b.emit("const", [], {"value": zero}, n.out.shape, n.out.dtype, n.loc)
    if all(pa <= a and e <= pe for (a, e), (pa, pe) in zip(box, placed)):
        return _sliced(b, n, node.inputs[0], [(a - pa, e - pa) for (a, e), (pa, _) in zip(box, placed)])
    if all(a <= pa and pe <= e for (a, e), (pa, pe) in zip(box, placed)):
        index = tuple((pa - a, pe - a, 1) for (a, _), (pa, pe) in zip(box, placed))
        return b.emit("unslice", [node.inputs[0]], {"shape": tuple(n.out.shape), "index": index}, n.out.shape,
                      n.out.dtype, n.loc)
    return None
