"""Rearranging copies as expressions (a part of fusion, ir/passes/fusion.py).

`unslice` (a slice's gradient; x[:, a:b] = v) and `cat` place pieces of unit-step slices of their
result: element p lies in piece i when start_d <= p_d < stop_d on every axis the piece does not
span, and reads the piece there, else 0 (unslice) or the next piece (cat). A select evaluates
both branches, so a piece is read only where no address can leave its memory: a piece without
loads (a constant, an arange) is read at the shifted affine index; any other is a buffer (the piece
materialized over its own, smaller space when it is an expression) gathered at its coordinate
clamped into range. Then the result is not written unless a non-fusible op or several large
readers need it. t = x * 2; t[:, 100:300] = tanh(y); (t * g).sum(), (4096, 1024) float32,
fwd+bwd: 68 -> 4.6 ms CPU per call (host index_add scatters and their mask before; survey
slice_assign). Strided pieces (a step > 1) stay host copies, and so does a cat of more than
MAX_PIECES pieces (stack of 256 (10000,) float32, fwd+bwd: 15 ms as a host copy, 29 fused; of 16
(100000,): 3.3 host, 2.5 fused; 64: even)."""
from ... import dtypes as D
from ...ops import PRIMS
from ..kernels import Const, Gather, Iota, Load, Op, gathered, loads, remap

MAX_PIECES = 32     # a cat of more pieces stays a host copy: each element tests every piece's box


def _op(name, args, dtype):
    p = PRIMS[name]
    return Op(name, args, dtype, p.lower, p.cost)


def pieces(n):
    """[(input, ((start, stop), ...) per result axis)] of an unslice or cat node, or None when a
    piece is strided (its coordinate would need a division)."""
    if n.op == "unslice":
        index = n.attrs["index"]
        if any(step != 1 for _, _, step in index):
            return None
        return [(n.inputs[0], tuple((a, b) for a, b, _ in index))]
    axis, start, out = n.attrs["axis"], 0, []
    for v in n.inputs:
        out.append((v, tuple((start, start + s) if d == axis else (0, s) for d, s in enumerate(v.shape))))
        start += v.shape[axis]
    return out


def fusible(n):
    """Whether copy_tree can express unslice or cat node n (unit steps, at most MAX_PIECES pieces)."""
    parts = pieces(n)
    return parts is not None and len(parts) <= MAX_PIECES


def copy_tree(n, trees, buffer_load):
    """The expression of `unslice` or `cat` node n over its result's space, given its inputs'
    expressions; None when it stays a host kernel. buffer_load(v) is v as a plain Load (v
    materialized first when it is an expression)."""
    shape, dtype = tuple(n.out.shape), n.out.dtype
    if not fusible(n) or 0 in shape or dtype.name not in PRIMS["where"].dtypes:
        return None
    parts = pieces(n)
    ndim = len(shape)
    coord = [Iota(tuple(1 if k == d else 0 for k in range(ndim)), 0, D.int64) for d in range(ndim)]
    tree = None if n.op == "cat" else Const(0, dtype)
    for k in reversed(range(len(parts))):
        v, box = parts[k]
        if 0 in v.shape:
            continue
        cut = [d for d, (a, b) in enumerate(box) if (a, b) != (0, shape[d])]
        read = _read(v, trees[k], box, cut, coord, buffer_load)
        if tree is None:                     # cat's last piece: wherever no earlier one is
            tree = read
            continue
        inside = None
        for d in cut:
            a, b = box[d]
            test = _op("logical_and", [_op("ge", [coord[d], Const(a, D.int64)], D.bool_),
                                       _op("lt", [coord[d], Const(b, D.int64)], D.bool_)], D.bool_)
            inside = test if inside is None else _op("logical_and", [inside, test], D.bool_)
        tree = read if inside is None else _op("where", [inside, read, tree], dtype)
    return tree if tree is not None else Const(0, dtype)


def _read(v, tree, box, cut, coord, buffer_load):
    """Piece v (expression `tree`, placed at `box`) read at the result's element: shifted when it
    has no memory to leave, else its buffer gathered at clamped coordinates along the cut axes."""
    if not cut or not loads(tree) and not gathered(tree):
        return remap(tree, lambda st, off: (st, off - sum(s * box[d][0] for d, s in enumerate(st))))
    load = buffer_load(v)
    strides = [0 if d in cut else s for d, s in enumerate(load.strides)]
    index = []
    for d in cut:
        a, b = box[d]
        q = _op("minimum", [_op("maximum", [_op("sub", [coord[d], Const(a, D.int64)], D.int64),
                                            Const(0, D.int64)], D.int64), Const(b - a - 1, D.int64)], D.int64)
        index.append(q)
    return Gather(Load(load.buf, strides, load.offset), index, [load.strides[d] for d in cut])
