"""Integer-tensor indexing as expressions (a part of fusion, ir/passes/fusion.py).

`index` (x[i0, i1, ...] with integer tensors: x[arange(n), labels], take_along) is a view whose
coordinates along the indexed axes are values. Its result is x's expression read at those
coordinates: an index that is an arange seen through views (an Iota) stays an affine coordinate;
any other becomes a Checked value (wrapped when negative, bounds-checked: out of range raises as
eagerly) that a Gather adds to the address of each of x's loads along that axis. Only the picked
elements are read, and x's expression (a log-softmax) is computed at them alone, never written.

`index_add`, the scatter-add transposing it (the gradient of a pick), is an expression over its
result when one indexed axis `a` is picked by values J and every axis of the index tensors is either
covered by an arange onto another indexed axis of the same size, or free with at most UNROLL
elements in all (the picks per row of take_along): element p is then
sum over the free picks u of where(p_a == J[p, u], g[p, u], 0) -- no zero array, no scatter. Its
indices are those of the gather it transposes, which checked them: one out of range matches nothing.
"""
import itertools
import math

from ... import dtypes as D
from ...broadcast import broadcast_shapes
from ...ops import PRIMS
from ...ops.layout import broadcast_strides
from ...symint import as_expr, is_sym
from ..kernels import Checked, Const, Gather, Iota, Load, Op, known, postorder, remap, same_shape

UNROLL = 8      # picks per output element of a scatter unrolled into a sum of selects


def index_tree(n, trees):
    """The expression of `index` or `index_add` node n over its result's space, given its inputs'
    expressions; None when it stays a host kernel."""
    if n.op == "index":
        return _gather(n, trees)
    if n.op == "index_add":
        return _scatter(n, trees)
    return None


def _op(name, args, dtype):
    p = PRIMS[name]
    return Op(name, args, dtype, p.lower, p.cost)


def _int64(t):
    return t if t.dtype is D.int64 else _op("cast", [t], D.int64)


def _placement(ndim, axes, nb):
    """(result axis of each axis of the index tensors' broadcast shape, {axis of x not indexed:
    its result axis}): the order of the result's axes (ops/indexing.py's _index_rule)."""
    rest = [d for d in range(ndim) if d not in axes]
    if list(axes) == list(range(axes[0], axes[0] + len(axes))):
        before = [d for d in rest if d < axes[0]]
        after = [d for d in rest if d > axes[-1]]
        xpos = {d: i for i, d in enumerate(before)}
        xpos.update({d: len(before) + nb + i for i, d in enumerate(after)})
        return list(range(len(before), len(before) + nb)), xpos
    return list(range(nb)), {d: nb + i for i, d in enumerate(rest)}


def _broadcast(tree, shape, to):
    return remap(tree, lambda st, off: (broadcast_strides(shape, to, st), off))


def _unit(ndim, axis):
    return tuple(1 if d == axis else 0 for d in range(ndim))


# ------------------------------------------------------------------ gathers

def _gather(n, trees):
    x, idx = n.inputs[0], n.inputs[1:]
    axes, out = tuple(n.attrs["axes"]), tuple(n.out.shape)
    if any(known(x.shape[a], 0) for a in axes):  # nothing to pick from: the host kernel raises as eagerly
        return None
    B = broadcast_shapes(*(i.shape for i in idx))
    bpos, xpos = _placement(len(x.shape), axes, len(B))

    def embed(st, off):                          # an index tensor's strides over the result's axes
        new = [0] * len(out)
        for k, s in zip(bpos, st):
            new[k] = s
        return new, off
    coords = {}                                  # axis of x -> (strides, offset, None) or (.., .., Checked)
    for a, i, t in zip(axes, idx, trees[1:]):
        e = remap(_broadcast(t, i.shape, B), embed)
        if isinstance(e, Iota) and _inside(e, out, x.shape[a]):
            coords[a] = (e.strides, e.offset, None)
        else:
            coords[a] = (None, 0, Checked(_int64(e), x.shape[a], a, D.int64, n.attrs.get("wrap", True)))
    for d, k in xpos.items():
        coords[d] = (_unit(len(out), k), 0, None)
    return through(trees[0], coords, len(out))


def _inside(iota, shape, size):
    """Whether every value of `iota` over `shape` is an index in [0, size), for every value of the
    symbolic sizes (no guard: an unproven one keeps the index check)."""
    if any(known(m, 0) for m in shape):
        return True
    if any(is_sym(d) for d in (*shape, *iota.strides, iota.offset, size)):
        return _inside_always(iota, shape, size)
    lo = iota.offset + sum(min(0, s * (m - 1)) for s, m in zip(iota.strides, shape))
    hi = iota.offset + sum(max(0, s * (m - 1)) for s, m in zip(iota.strides, shape))
    return 0 <= lo and hi < size


def _inside_always(iota, shape, size):
    """_inside where sizes are symbolic: every axis at least 1 long (else there is no index), strides
    of known signs; lo >= 0 and size - 1 - hi >= 0 over every value of the symbols."""
    if any(is_sym(s) for s in iota.strides):
        return False
    lo, hi = as_expr(iota.offset), as_expr(iota.offset)
    for s, m in zip(iota.strides, shape):
        term = as_expr(m - 1) * as_expr(s)
        lo, hi = (lo + term, hi) if s < 0 else (lo, hi + term)
    room = as_expr(size) - as_expr(1) - hi
    names = lo.symbols() | room.symbols()
    ranges = {n: (1, None) for n in names}
    return all(e.bounds(ranges)[0] is not None and e.bounds(ranges)[0] >= 0 for e in (lo, room))


def through(tree, coords, ndim):
    """`tree` (over x's axes) read at the coordinates `coords` (over the result's ndim axes)."""
    def place(strides, offset):
        new, dyn = [0] * ndim, []
        for d, s in enumerate(strides):
            if known(s, 0):      # a symbolic stride is 0 only where there is no element: no guard
                continue
            cs, co, checked = coords[d]
            if checked is None:
                new = [a + s * c for a, c in zip(new, cs)]
                offset += s * co
            else:
                dyn.append((checked, s))
        return new, offset, dyn
    memo = {}
    for t in postorder(tree):
        if isinstance(t, (Load, Gather)):
            src = t.src if isinstance(t, Gather) else t
            st, off, dyn = place(src.strides, src.offset)
            args = [memo[id(a)] for a in t.args] if isinstance(t, Gather) else []
            strides = t.strides if isinstance(t, Gather) else ()
            load = Load(src.buf, st, off)
            memo[id(t)] = Gather(load, args + [c for c, _ in dyn], strides + tuple(s for _, s in dyn)) \
                if args or dyn else load
        elif isinstance(t, Iota):
            st, off, dyn = place(t.strides, t.offset)
            v = Iota(st, off, t.dtype if not dyn else D.int64)
            for c, s in dyn:
                v = _op("add", [v, _op("mul", [c, Const(s, D.int64)], D.int64)], D.int64)
            memo[id(t)] = v if v.dtype is t.dtype else _op("cast", [v], t.dtype)
        elif isinstance(t, Op):
            memo[id(t)] = t.with_args([memo[id(a)] for a in t.args])
        else:
            memo[id(t)] = t
    return memo[id(tree)]


# ------------------------------------------------------------------ scatters

def _scatter(n, trees):
    g, idx = n.inputs[0], n.inputs[1:]
    axes, shape = tuple(n.attrs["axes"]), tuple(n.attrs["shape"])
    if any(known(d, 0) for d in (*shape, *g.shape)):
        return None
    B = broadcast_shapes(*(i.shape for i in idx))
    bpos, xpos = _placement(len(shape), axes, len(B))
    covered, picked = {}, []                     # axis of B -> the axis of x its arange spans; (a, J)
    for a, i, t in zip(axes, idx, trees[1:]):
        e = _broadcast(t, i.shape, B)
        b = _spans(e, B, shape[a])
        if b is not None and b not in covered:
            covered[b] = a
        else:
            picked.append((a, e))
    free = [b for b in range(len(B)) if b not in covered]
    if len(picked) != 1 or any(is_sym(B[b]) for b in free) or math.prod(B[b] for b in free) > UNROLL:
        return None
    (a, J), ndim = picked[0], len(shape)
    source = {k: ("b", b) for b, k in enumerate(bpos)}
    source.update({k: ("x", d) for d, k in xpos.items()})
    total = None
    for u in itertools.product(*(range(B[b]) for b in free)):
        at = dict(zip(free, u))

        def over_b(st, off, at=at):              # a tree over B read at element p of the result
            new = [0] * ndim
            for b, s in enumerate(st):
                if b in covered:
                    new[covered[b]] += s
                else:
                    off += s * at[b]
            return new, off

        def over_g(st, off, at=at):              # a tree over g's (the index result's) axes, likewise
            new = [0] * ndim
            for k, s in enumerate(st):
                kind, c = source[k]
                if kind == "x":
                    new[c] += s
                elif c in covered:
                    new[covered[c]] += s
                else:
                    off += s * at[c]
            return new, off
        j = _int64(remap(J, over_b))
        j = _op("where", [_op("lt", [j, Const(0, D.int64)], D.bool_), _op("add", [j, Const(shape[a], D.int64)], D.int64),
                          j], D.int64)
        hit = _op("eq", [Iota(_unit(ndim, a), 0, D.int64), j], D.bool_)
        term = _op("where", [hit, remap(trees[0], over_g), Const(0, g.dtype)], g.dtype)
        total = term if total is None else _op("add", [total, term], g.dtype)
    return total


def _spans(e, B, size):
    """The axis of B along which `e` (a tree over B) is exactly 0, 1, ..., size - 1, or None."""
    if not isinstance(e, Iota) or not known(e.offset, 0):
        return None
    nz = [b for b, s in enumerate(e.strides) if (is_sym(s) or s) and not known(B[b], 1)]
    if len(nz) == 1 and known(e.strides[nz[0]], 1) and same_shape((B[nz[0]],), (size,)):
        return nz[0]
    return None
