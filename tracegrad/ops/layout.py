"""Views (reshape, permute, expand, slice: the result shares the input's memory) and the copies
that rearrange into new memory (unslice, cat)."""
import math

import numpy as np

from ..broadcast import unbroadcast
from ..core import bind, prim
from ..strides import contiguous_strides
from ..symint import active, as_expr, hint, is_sym, same_size, slice_length
from .rules import same_dtype

_NOT_LOWERED = dict(lower=None, dtypes=(), cost=None)   # views are strides; copies run on the host


def reshape_strides(shape, strides, new):
    """Strides that view (shape, strides) as `new` without copying (NumPy's rule), or None."""
    if any(map(is_sym, (*shape, *strides, *new))):
        return _symbolic_reshape_strides(shape, strides, new)
    if 0 in shape or 0 in new:
        return [0] * len(new)
    return _grouped(shape, strides, new, lambda a, b: a == b, lambda n, o: n > o, lambda n: n == 1)


def _symbolic_reshape_strides(shape, strides, new):
    """reshape_strides over symbolic sizes: axes group where their products are the same expression (B*T
    as B, T), or equal sizes by a guard where the trace equated them (T against a literal 512 it had
    specialized: the guard is already recorded); a group views only where its strides chain as the same
    expressions, else None (a copy: right for every size). Sizes the guards fix (B == 0) are numbers;
    a row-major layout views in any shape (_row_major)."""
    env = active()
    if env is not None:
        fixed = [env.simplify(as_expr(d)) for d in (*shape, *strides, *new)]
        n, m = len(shape), len(strides)
        if all(e.is_const() for e in fixed):
            fixed = [e.constant() for e in fixed]
            return reshape_strides(fixed[:n], fixed[n:n + m], fixed[n + m:])
        if any(e.is_const() and e.constant() == 0 for e in fixed[:n]):
            return [0] * len(new)           # empty under the guards: no element to address
    if _row_major(shape, strides):          # a row-major buffer read in another shape: the same elements in order
        return list(contiguous_strides(new))
    return _grouped(shape, strides, new, lambda a, b: same_size(a, b) or _pinned_equal(a, b), _grows_old,
                    lambda n: same_size(n, 1))


def _row_major(shape, strides):
    """Whether (shape, strides) lays its elements out row-major, for every value of the symbols (the
    strides of axes of length 1 are free): then any reshape views it, whatever the grouping of the axes
    (Q, 17) as (B, T, S) with Q = B*T*S // 17 included, which _grouped cannot prove from expressions."""
    return all(same_size(s, c) or same_size(n, 1) for n, s, c in zip(shape, strides, contiguous_strides(shape)))


def _grouped(shape, strides, new, same, grows_old, is_one):
    """NumPy's rule: the axes of length 1 (`is_one`) dropped, consecutive axes of the old and the new shape grouped
    where their products are `same` (the side whose product `grows_old(new, old)` says is short takes its
    next axis); a group views where its old strides chain; the new strides from the group's last; None
    where no grouping or no chain exists."""
    old = [(n, s) for n, s in zip(shape, strides) if not is_one(n)]
    nz = [i for i, n in enumerate(new) if not is_one(n)]
    od, os_ = [n for n, _ in old], [s for _, s in old]
    nd = [new[i] for i in nz]
    res = [0] * len(nd)
    oi = ni = 0
    while ni < len(nd) and oi < len(od):
        np_, op_ = nd[ni], od[oi]
        nj, oj = ni + 1, oi + 1
        while not same(np_, op_):
            if not grows_old(np_, op_) and nj < len(nd):
                np_ *= nd[nj]
                nj += 1
            elif oj < len(od):
                op_ *= od[oj]
                oj += 1
            else:
                return None
        if any(not same(os_[k], od[k + 1] * os_[k + 1]) for k in range(oi, oj - 1)):
            return None
        res[nj - 1] = os_[oj - 1]
        for k in range(nj - 1, ni, -1):
            res[k - 1] = res[k] * nd[k]
        ni, oi = nj, oj
    if ni < len(nd) or oi < len(od):
        return None
    out = [0] * len(new)
    for k, i in enumerate(nz):
        out[i] = res[k]
    return out


def _grows_old(new, old):
    """Whether the old axes' product must take the next old axis: it divides the new axes' product (B
    into B*T), by the expressions; else by their hints."""
    if as_expr(new).exact_div(as_expr(old)) is not None:
        return True
    if as_expr(old).exact_div(as_expr(new)) is not None:
        return False
    return hint(new) > hint(old)


def _pinned_equal(a, b):
    """A symbolic size and a literal of its hint (the trace specialized it), or two sizes an equality
    guard of the active env ties (T == S0): equal, by that guard."""
    if hint(a) != hint(b):
        return False
    if is_sym(a) != is_sym(b):
        return a == b
    env = active()
    if env is None:
        return False
    diff = env.simplify(as_expr(a) - as_expr(b))
    return any(g.op == "==" and env.simplify(g.lhs - g.rhs) in (diff, -diff) for g in env.guards)


def broadcast_strides(shape, to, strides):
    """Strides reading (shape, strides) broadcast to `to`: new and stretched axes stride 0. Only a size
    known to be 1 stretches (a symbolic one is the result's own: the trace decided, with its guards)."""
    off = len(to) - len(shape)
    return [0] * off + [0 if same_size(shape[i], 1) and not same_size(to[off + i], 1) else st
                        for i, st in enumerate(strides)]


def _reshape_remap(in_shape, out_shape, strides, offset, shape):
    s = reshape_strides(in_shape, strides, out_shape)
    return None if s is None else (s, offset)


def _slice_remap(in_shape, out_shape, strides, offset, index):
    off = offset + sum(start * s for (start, _, _), s in zip(index, strides))
    return [s * step for (_, _, step), s in zip(index, strides)] + list(strides[len(index):]), off


def _reshape_rule(shapes, dtypes, shape):
    if math.prod(shapes[0]) != math.prod(shape):
        raise RuntimeError(f"shape '{list(shape)}' is invalid for input of size {math.prod(shapes[0])}")
    return tuple(shape), dtypes[0]


prim("reshape", "view", _reshape_rule, lambda x, shape: x.reshape(shape),
     vjp=(lambda n, g: g.reshape(n.shapes[0]),), jvp=lambda n, ts: ts[0].reshape(n.attrs["shape"]),
     save=(), remap=_reshape_remap, rearranges=True, **_NOT_LOWERED)


def _permute_rule(shapes, dtypes, perm):
    if sorted(perm) != list(range(len(shapes[0]))):
        raise RuntimeError(f"permute: dims {perm} are not a permutation of the {len(shapes[0])} "
                           f"dimensions of shape {shapes[0]}")
    return tuple(shapes[0][p] for p in perm), dtypes[0]


prim("permute", "view", _permute_rule, lambda x, perm: x.transpose(perm),
     vjp=(lambda n, g: g.permute(*np.argsort(n.attrs["perm"]).tolist()),),
     jvp=lambda n, ts: ts[0].permute(*n.attrs["perm"]), save=(),
     remap=lambda in_shape, out_shape, strides, offset, perm: ([strides[p] for p in perm], offset),
     rearranges=True, **_NOT_LOWERED)


def _expand_rule(shapes, dtypes, shape):
    src = shapes[0]
    if len(shape) < len(src):
        raise RuntimeError(f"expand: the target shape {shape} has fewer dimensions than the tensor's {src}")
    off = len(shape) - len(src)
    for i, s in enumerate(src):
        if not same_size(s, shape[off + i]) and s != 1 and s != shape[off + i]:
            raise RuntimeError(f"The expanded size of the tensor ({shape[off + i]}) must match the existing size "
                               f"({s}) at non-singleton dimension {off + i}.  Target sizes: {list(shape)}.  "
                               f"Tensor sizes: {list(src)}")
    return tuple(shape), dtypes[0]


prim("expand", "view", _expand_rule, lambda x, shape: np.broadcast_to(x, shape),
     vjp=(lambda n, g: unbroadcast(g, n.shapes[0]),), jvp=lambda n, ts: ts[0].expand(*n.attrs["shape"]),
     save=(), remap=lambda in_shape, out_shape, strides, offset, shape: (
         broadcast_strides(in_shape, out_shape, strides), offset), **_NOT_LOWERED)


def _slice_rule(shapes, dtypes, index):
    out = []
    for size, (start, stop, step) in zip(shapes[0], index):
        out.append(slice_length(start, stop, step))
    return tuple(out) + tuple(shapes[0][len(index):]), dtypes[0]


def _slices(index):
    return tuple(slice(a, b, c) for a, b, c in index)


prim("slice", "view", _slice_rule, lambda x, index: x[_slices(index)],
     vjp=(lambda n, g: bind("unslice", g, shape=n.shapes[0], index=n.attrs["index"]),),
     jvp=lambda n, ts: bind("slice", ts[0], index=n.attrs["index"]), save=(), remap=_slice_remap,
     **_NOT_LOWERED)


def _unslice_impl(g, shape, index):
    out = np.zeros(shape, g.dtype)
    out[_slices(index)] = g
    return out


prim("unslice", "copy", lambda shapes, dtypes, shape, index: (tuple(shape), dtypes[0]), _unslice_impl,
     vjp=(lambda n, g: bind("slice", g, index=n.attrs["index"]),),
     jvp=lambda n, ts: bind("unslice", ts[0], **n.attrs), save=(), zero="first", **_NOT_LOWERED)


def _cat_rule(shapes, dtypes, axis):
    ref = shapes[0]
    for s in shapes[1:]:
        if len(s) != len(ref) or any(a != b for i, (a, b) in enumerate(zip(s, ref)) if i != axis):
            raise RuntimeError(f"cat: tensors must have the same shape except in dimension {axis}; "
                               f"got {ref} and {s}")
    return ref[:axis] + (sum(s[axis] for s in shapes),) + ref[axis + 1:], same_dtype("cat", dtypes)


def _cat_vjp(n, g):
    axis, out, start = n.attrs["axis"], [], 0
    for shape in n.shapes:
        index = tuple((start, start + s, 1) if i == axis else (0, s, 1) for i, s in enumerate(shape))
        out.append(bind("slice", g, index=index))
        start += shape[axis]
    return tuple(out)


prim("cat", "copy", _cat_rule, lambda *xs, axis: np.concatenate(xs, axis),
     vjp=_cat_vjp, jvp=lambda n, ts: bind("cat", *[t if t is not None else bind("zeros_like", n.x(i))
                                                   for i, t in enumerate(ts)], axis=n.attrs["axis"]),
     save=(), zero="all", **_NOT_LOWERED)
