"""Boxes: a kernel's space cut where the pieces of a cat, an unslice or a pad meet.

Fusion writes element p of a cat or an unslice (a slice's gradient, a constant pad) as selects over
box tests `p_d >= a`, `p_d < b` on the coordinate Iotas, each piece read at its coordinate clamped
into range (ir/passes/copies.py). Along an axis, the tests' bounds cut it into intervals; over a
product of intervals (a box) every test has one value and every clamp is the identity, so there the
tree is that of the one piece the box holds, read at affine indices: a Gather of a clamped
coordinate becomes a Load, a pad's border a constant. A target that writes each box by a loop nest
of its own (backends/cpu/boxes.py) computes each element once, without selects or gathers; one that
does not (cuda) evaluates the selects as they are: the values are the same.

Bounds may be symbolic sizes. Boxes are ordered by the bounds' hints; for another call's sizes the
order holds when `ordered` does (cat and unslice bounds always keep it: 0 <= a <= b <= n).
"""
import itertools

from .. import dtypes as D
from .. import scalar as S
from ..symint import hint, is_sym, same_size
from .kernels import Const, Gather, Iota, Load, Op, applies, loads, postorder


def bounds(kernel):
    """{axis: [0, c_1, ..., c_k, n]}: the distinct bounds of the box tests on each axis of the kernel's
    space, in the order of their hints (only axes some test cuts; none whose bounds leave [0, n])."""
    return tree_bounds(kernel.shape, _trees(kernel))


def tree_bounds(shape, trees):
    """bounds() of expression trees over a space of `shape`."""
    found = {}
    for t in trees:
        for x in postorder(t):
            test = _test(x, len(shape))
            if test is not None:
                found.setdefault(test[0], []).append(test[1])
    out = {}
    for d, cs in sorted(found.items()):
        n = shape[d]
        if any(not 0 <= hint(c) <= hint(n) for c in cs):
            continue
        line = [0]
        for c in sorted(cs, key=hint) + [n]:
            if not any(same_size(c, b) for b in line):
                line.append(c)
        if len(line) > 2:
            out[d] = line
    return out


def boxes(cuts):
    """Every box of `cuts` (bounds' result): {axis: i}, the box's interval [cuts[axis][i], cuts[axis][i + 1])."""
    axes = sorted(cuts)
    return [dict(zip(axes, pick)) for pick in itertools.product(*(range(len(cuts[d]) - 1) for d in axes))]


def count(cuts):
    """The number of boxes of `cuts`."""
    n = 1
    for line in cuts.values():
        n *= len(line) - 1
    return n


def ordered(cuts):
    """The pairs (a, b) of consecutive bounds, one of them symbolic, whose order a <= b a call's sizes must
    keep for the boxes to cover the space (known ones are ordered)."""
    return [(a, b) for line in cuts.values() for a, b in zip(line, line[1:]) if is_sym(a) or is_sym(b)]


def resolved(tree, cuts, box, memo):
    """`tree` over box `box` of `cuts`: its box tests constants, selects on constants their branch, clamps
    of coordinates inside their range gone, integer affine expressions of coordinates Iotas, and Gathers
    whose indices are then all affine Loads. `memo` keeps nodes shared among one box's trees shared."""
    for x in postorder(tree):
        if id(x) not in memo:
            args = [memo[id(a)] for a in x.args] if isinstance(x, Op) else None
            memo[id(x)] = _resolve(x, args, cuts, box)
    return memo[id(tree)]


def reads(kernel):
    """The Loads of loop or reduce_acc kernel `kernel`, those under box tests as each box reads them
    (Kernel.reads reads a piece gathered along the cut axis: its source's stride there 0): where the
    kernel walks memory, for the facts about memory order (ir/layout.py)."""
    return tree_reads(kernel.shape, _trees(kernel))


def tree_reads(shape, trees, most=64):
    """reads() of expression trees over a space of `shape`; their plain loads() where they have more
    than `most` boxes."""
    cuts = tree_bounds(shape, trees)
    if not cuts or count(cuts) > most:
        return [ld for t in trees for ld in loads(t)]
    out = []
    for box in boxes(cuts):
        memo = {}
        out += [ld for t in trees for ld in loads(resolved(t, cuts, box, memo))]
    return out


def _trees(kernel):
    return [t for ph in kernel.phases for _, t in ph.outputs]


def _unit_axis(t, ndim):
    """The axis d when t is the coordinate Iota of d (strides the unit vector, offset 0), else None."""
    if not isinstance(t, Iota) or len(t.strides) != ndim or is_sym(t.offset) or t.offset != 0:
        return None
    ones = [d for d, s in enumerate(t.strides) if is_sym(s) or s != 0]
    return ones[0] if len(ones) == 1 and not is_sym(t.strides[ones[0]]) and t.strides[ones[0]] == 1 else None


def _int_const(t):
    return isinstance(t, Const) and (is_sym(t.value) or isinstance(t.value, int) and not isinstance(t.value, bool))


def _test(x, ndim):
    """(axis, bound) of a box test `p_d >= c` or `p_d < c` (c an integer constant), else None."""
    if (applies(x, S.GE) or applies(x, S.LT)) and _int_const(x.args[1]):
        d = _unit_axis(x.args[0], ndim)
        if d is not None:
            return d, x.args[1].value
    return None


def _place(cuts, d, c):
    """The index of bound c among cuts[d], or None."""
    return next((j for j, b in enumerate(cuts.get(d, ())) if same_size(b, c)), None)


def _affine(t):
    """(strides, offset) of an int64 node affine in the coordinates (Iotas, integer constants, +, -, and
    products by constants), else None; strides None for a constant."""
    if isinstance(t, Iota):
        return (t.strides, t.offset) if t.dtype is D.int64 else None
    if _int_const(t) and t.dtype is D.int64:
        return None, t.value
    if not isinstance(t, Op) or t.dtype is not D.int64 or type(t) is not Op:
        return None
    parts = [_affine(a) for a in t.args]
    if any(p is None for p in parts):
        return None
    if applies(t, S.ADD) or applies(t, S.SUB):
        (sa, oa), (sb, ob) = parts
        sign = 1 if applies(t, S.ADD) else -1
        if sa is None and sb is None:
            return None
        sa, sb = sa or (0,) * len(sb), sb or (0,) * len(sa)
        return tuple(x + sign * y for x, y in zip(sa, sb)), oa + sign * ob
    if applies(t, S.MUL):
        (sa, oa), (sb, ob) = parts
        if (sa is None) == (sb is None):
            return None
        (s, o), k = ((sa, oa), ob) if sb is None else ((sb, ob), oa)
        return tuple(x * k for x in s), o * k
    return None


def _resolve(x, args, cuts, box):
    """One node over the box, its arguments already resolved (`args`; None for a leaf)."""
    if args is None:
        return x
    if (applies(x, S.GE) or applies(x, S.LT)) and _int_const(x.args[1]):
        d = _unit_axis(x.args[0], len(x.args[0].strides)) if isinstance(x.args[0], Iota) else None
        j = _place(cuts, d, x.args[1].value) if d in box else None
        if j is not None:
            return Const(j <= box[d] if applies(x, S.GE) else j > box[d], D.bool_)
    if applies(x, S.AND) and any(isinstance(a, Const) for a in args):
        k = next(a for a in args if isinstance(a, Const))
        other = args[1] if k is args[0] else args[0]
        return other if k.value else k
    if applies(x, S.where) and isinstance(args[0], Const):
        pick = args[1] if args[0].value else args[2]
        if pick.dtype is x.dtype:
            return pick
    if applies(x, S.minimum) and x.dtype is D.int64:
        inner = _clamped(args, cuts, box)
        if inner is not None:
            return inner
    if isinstance(x, Gather):
        return _gather(x, args)
    if x.dtype is D.int64 and type(x) is Op:
        aff = _affine(x.with_args(args))
        if aff is not None and aff[0] is not None:
            return Iota(aff[0], aff[1], D.int64)
    return x if all(a is b for a, b in zip(args, x.args)) else x.with_args(args)


def _clamped(args, cuts, box):
    """The coordinate c when minimum(args) is min(max(c, 0), m) with c = p_d - a and the box inside
    [a, a + m], else None (copies.py's clamp of a piece's coordinate)."""
    inner, top = args
    if not (applies(inner, S.maximum) and _int_const(top) and _int_const(inner.args[1])):
        return None
    c, zero = inner.args
    if is_sym(zero.value) or zero.value != 0 or not isinstance(c, Iota):
        return None
    d = next((e for e, s in enumerate(c.strides) if is_sym(s) or s), None)
    if d not in box or _unit_axis(Iota(c.strides, 0, c.dtype), len(c.strides)) != d:
        return None
    a = -c.offset
    lo, hi = _place(cuts, d, a), _place(cuts, d, a + top.value + 1)
    return c if lo is not None and hi is not None and lo <= box[d] < hi else None


def _gather(x, args):
    """A Gather with the affine ones of its (resolved) indices moved into its source's strides: a Load
    when all are."""
    strides, offset = list(x.src.strides), x.src.offset
    rest, rest_strides = [], []
    for a, s in zip(args, x.strides):
        aff = _affine(a)
        if aff is None:
            rest.append(a)
            rest_strides.append(s)
            continue
        st, off = aff
        if st is not None:
            strides = [u + s * v for u, v in zip(strides, st)]
        offset = offset + s * off
    src = Load(x.src.buf, strides, offset)
    return Gather(src, rest, rest_strides) if rest else src
