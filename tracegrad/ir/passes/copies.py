"""Rearranging copies as expressions (a part of fusion, ir/passes/fusion.py).

`unslice` (a slice's gradient; x[:, a:b:c] = v) and `cat` place pieces on slices of their result:
element p lies in piece i when p_d is one of its places start_d, start_d + step_d, ... on every
axis the piece does not span, and reads the piece there, else 0 (unslice) or the next piece
(cat). A select evaluates both branches, so a piece is read only where no address can leave its
memory: a unit-step piece without loads (a constant, an arange) is read at the shifted affine
index; a small expression without transcendentals (CHEAP_PIECE_OPS) with its loads gathered at the
piece's coordinate clamped into range; any other is a buffer (the piece materialized over its own,
smaller space) gathered so. Then the result is not written unless a non-fusible op or several
large readers need it. The CPU writes a map or a natural column walk over such a tree box by box
(ir/boxes.py: each piece's region by its own loop nest, selects and clamps resolved); cuda keeps the selects.
  t = x * 2; t[:, 100:300] = tanh(y); (t * g).sum(), (4096, 1024) float32, fwd+bwd: 68 -> 4.6 ms
  CPU per call (host index_add scatters and their mask before; survey slice_assign);
  (x[::2].exp() * g).sum(), x (4096, 1024), fwd+bwd, one thread: 6.5 -> 3.3 ms (a host copy before);
  cat([2a, exp(b), c], 1).sum(0) of three (2048, 512), one thread: 5.45 -> 4.59 ms with 2a not written.
A cat of more than MAX_PIECES pieces stays a host copy: each element would test every piece's box
(stack of 256 (10000,) float32, fwd+bwd: 15 ms as a host copy, 29 fused; of 16 (100000,): 3.3
host, 2.5 fused; 64: even)."""
from ... import dtypes as D
from ...ops import PRIMS
from ...symint import is_sym, same_size
from ..kernels import Const, Iota, Op, gathered, known, loads, postorder, remap, size
from .gathers import through

MAX_PIECES = 32
CHEAP_PIECE_OPS = 8      # a piece of at most this many nodes, none transcendental, is not written


def _op(name, args, dtype):
    p = PRIMS[name]
    return Op(name, args, dtype, p.lower, p.cost)


def pieces(n):
    """[(input, ((start, stop, step), ...) per result axis)] of an unslice or cat node."""
    if n.op == "unslice":       # an index may leave trailing axes out: whole
        index = tuple(n.attrs["index"])
        return [(n.inputs[0], index + tuple((0, s, 1) for s in n.out.shape[len(index):]))]
    axis, start, out = n.attrs["axis"], 0, []
    for v in n.inputs:
        out.append((v, tuple((start, start + s, 1) if d == axis else (0, s, 1) for d, s in enumerate(v.shape))))
        start += v.shape[axis]
    return out


def fusible(n):
    """Whether copy_tree expresses unslice or cat node n (at most MAX_PIECES pieces)."""
    return len(n.inputs) <= MAX_PIECES


def copy_tree(n, trees, buffer_load):
    """The expression of `unslice` or `cat` node n over its result's space, given its inputs'
    expressions; None when it stays a host kernel. buffer_load(v) is v as a plain Load (v
    materialized first when it is an expression)."""
    shape, dtype = tuple(n.out.shape), n.out.dtype
    if not fusible(n) or any(known(d, 0) for d in shape) or dtype.name not in PRIMS["where"].dtypes:
        return None
    parts = pieces(n)
    ndim = len(shape)
    coord = [Iota(tuple(1 if k == d else 0 for k in range(ndim)), 0, D.int64) for d in range(ndim)]
    tree = None if n.op == "cat" else Const(0, dtype)
    for k in reversed(range(len(parts))):
        v, box = parts[k]
        if any(known(d, 0) for d in v.shape):
            continue
        cut = {d: _along(coord[d], a, step, v.shape[d]) for d, (a, b, step) in enumerate(box)
               if not (step == 1 and same_size(a, 0) and same_size(b, shape[d]))}   # whole axis: no cut, no guard
        if any(is_sym(v.shape[d]) for d in cut) and not _shifts(trees[k], box, cut):
            return None     # where that size is 0 the clamped reads would leave the piece's memory: a host copy
        read = _read(v, trees[k], box, cut, buffer_load)
        if tree is None:                     # cat's last piece: wherever no earlier one is
            tree = read
            continue
        inside = None
        for d, (_, test) in cut.items():
            inside = test if inside is None else _op("logical_and", [inside, test], D.bool_)
        tree = read if inside is None else _op("where", [inside, read, tree], dtype)
    return tree if tree is not None else Const(0, dtype)


def _int(v):
    return Const(v, D.int64)


def _along(p, a, step, n):
    """(q, inside) along one axis of a piece placed at a, a + step, ..., a + (n - 1) step: q the
    piece's coordinate at result coordinate p, clamped into [0, n); inside whether p is one of its
    places. A step > 1 divides in float64: (c + 1/2) / step lies strictly inside (q, q + 1), far
    from both ends for any c < 2**40, so truncation gives q exactly."""
    c = _op("minimum", [_op("maximum", [_op("sub", [p, _int(a)], D.int64), _int(0)], D.int64),
                        _int((n - 1) * step)], D.int64)
    test = _op("logical_and", [_op("ge", [p, _int(a)], D.bool_),
                               _op("lt", [p, _int(a + (n - 1) * step + 1)], D.bool_)], D.bool_)
    if step == 1:
        return c, test
    real = _op("cast", [c], D.float64)
    q = _op("cast", [_op("mul", [_op("add", [real, Const(0.5, D.float64)], D.float64),
                                 Const(1 / step, D.float64)], D.float64)], D.int64)
    on = _op("eq", [_op("sub", [c, _op("mul", [q, _int(step)], D.int64)], D.int64), _int(0)], D.bool_)
    return q, _op("logical_and", [test, on], D.bool_)


def _shifts(tree, box, cut):
    """Whether a piece is read at the shifted index, touching no memory (see _read)."""
    return not cut or all(box[d][2] == 1 for d in cut) and not loads(tree) and not gathered(tree)


def _read(v, tree, box, cut, buffer_load):
    """Piece v (expression `tree`, placed at `box`) read at the result's element: shifted when its
    steps are 1 and it has no memory to leave; a small expression without transcendentals read
    with its loads gathered at the clamped coordinates along the cut axes (no buffer); any other
    piece's buffer gathered there."""
    if _shifts(tree, box, cut):
        return remap(tree, lambda st, off: (st, off - sum(s * box[d][0] for d, s in enumerate(st))))
    ndim = len(box)
    coords = {d: (None, 0, cut[d][0]) if d in cut else (tuple(int(k == d) for k in range(ndim)), 0, None)
              for d in range(ndim)}
    if not gathered(tree) and size(tree) <= CHEAP_PIECE_OPS and \
            all(t.cost != "transcendental" for t in postorder(tree) if isinstance(t, Op)):
        return through(tree, coords, ndim)
    return through(buffer_load(v), coords, ndim)
