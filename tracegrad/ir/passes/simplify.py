"""Algebraic simplification, exact in IEEE arithmetic (signed zeros included): x*1, x+(-0.0), x-(+0.0)
(any zero for integers; x + 0.0 is not x when x is -0.0), x/1, neg(neg x), copy, cast to the same dtype,
reshape∘reshape, permute∘permute, expand of a constant, x**1, x**2 and x**3 as products, where with a
constant condition, (A @ B)^T as B^T @ A^T when the product is used only transposed (the
product then comes out in the layout its consumer reads; the operand transposes are free views), and a
sum, max or min of a cat along a kept axis as the cat of the pieces' reductions, each over the same
elements (each piece then reduced by a plain strided loop fused with its expression, instead of every
element selecting among gathers of all pieces: cat([2a, exp(b), c], 1).sum(0)), and a sum of unslices
that tile an axis as a cat (tiling.py); a slice of a cat or of an unslice as what lies under its box (slices.py)."""
import math

from ...symint import is_sym, same_shape
from ...ops.rules import _reduce_shape
from .rewrite import Builder
from .slices import slice_of_copy
from .tiling import unslices_as_cat


def _const(v):
    """A constant node's value; None for others and for a symbolic size (a mean's count B*T: no rule
    decides on it, which would record a guard)."""
    if v.node is None or v.node.op != "const" or is_sym(v.node.attrs["value"]):
        return None
    return v.node.attrs["value"]


def simplify(graph):
    """`graph` itself when no rule applies, else a rewritten copy."""
    uses = {}
    for n in graph.nodes:
        for i in n.inputs:
            uses[id(i)] = uses.get(id(i), 0) + 1
    for v in graph.outputs:
        uses[id(v)] = uses.get(id(v), 0) + 1
    if not _applies(graph, uses):
        return graph
    b = Builder(graph)
    b.uses = uses
    for n in graph.nodes:
        ins = [b.get(i) for i in n.inputs]
        b.env[id(n.out)] = _rule(b, n, ins) or b.copy(n, ins)
    return b.finish()


class _Applies(Exception):
    pass


class _Probe:
    """Stands in for the Builder while asking whether a rule applies: a rule emits only when it does."""

    def __init__(self, uses):
        self.uses = uses

    def emit(self, *args):
        raise _Applies

    def get(self, v):
        return v


def _applies(graph, uses):
    """Whether some rule rewrites a node of `graph` (as the graph is, before any rewrite)."""
    probe = _Probe(uses)
    try:
        return any(_rule(probe, n, n.inputs) is not None for n in graph.nodes)
    except _Applies:
        return True


def _same(v, n):
    """v may replace n's output only when it has exactly n's type."""
    return v if same_shape(v.shape, n.out.shape) and v.dtype is n.out.dtype else None


def _rule(b, n, ins):
    """The rewrite of node n (with its inputs already rewritten to `ins`), or None."""
    rule = _RULES.get(n.op)
    return rule(b, n, ins) if rule is not None else None


def _zero(v, sign, dtype):
    """v is a constant zero that leaves every value of `dtype` unchanged when added with `sign`:
    -0.0 for a float add (+0.0 + -0.0 is +0.0), +0.0 for a float subtraction, any zero otherwise."""
    c = _const(v)
    if c is None or c != 0:
        return False
    return not dtype.is_floating_point or math.copysign(1.0, c) == -sign


def _visit_add(b, n, ins):                  # x + (-0.0), (-0.0) + x; unslices tiling an axis
    x, y = ins
    d = n.out.dtype
    return _same(x, n) if _zero(y, 1, d) else _same(y, n) if _zero(x, 1, d) else unslices_as_cat(b, n)


def _visit_sub(b, n, ins):                  # x - (+0.0)
    return _same(ins[0], n) if _zero(ins[1], -1, n.out.dtype) else None


def _visit_mul(b, n, ins):                  # x * 1, 1 * x
    x, y = ins
    return _same(x, n) if _const(y) == 1 else _same(y, n) if _const(x) == 1 else None


def _visit_div(b, n, ins):                  # x / 1
    return _same(ins[0], n) if _const(ins[1]) == 1 else None


def _visit_neg(b, n, ins):                  # -(-x)
    if ins[0].node is not None and ins[0].node.op == "neg":
        return _same(ins[0].node.inputs[0], n)
    return None


def _visit_cast(b, n, ins):                 # a cast to the same dtype
    return ins[0] if ins[0].dtype is n.out.dtype else None


def _visit_copy(b, n, ins):
    return ins[0]   # values are immutable in the IR: a copy is the value itself


def _visit_reshape(b, n, ins):              # to the same shape; of a reshape
    src = ins[0]
    if same_shape(src.shape, n.out.shape):
        return src
    if src.node is not None and src.node.op == "reshape":
        if same_shape(src.node.inputs[0].shape, n.out.shape):
            return src.node.inputs[0]
        return b.emit("reshape", [src.node.inputs[0]], n.attrs, n.out.shape, n.out.dtype, n.loc)
    return None


def _visit_permute(b, n, ins):              # (A @ B)^T; the identity; of a permute
    if _transposes_product(b, n, ins[0]):
        a, c = ins[0].node.inputs
        ta = b.emit("permute", [a], {"perm": _swap(a)}, _swapped(a.shape), a.dtype, n.loc)
        tc = b.emit("permute", [c], {"perm": _swap(c)}, _swapped(c.shape), c.dtype, n.loc)
        return b.emit("matmul", [tc, ta], {}, n.out.shape, n.out.dtype, n.loc)
    src, perm = ins[0], n.attrs["perm"]
    if perm == tuple(range(len(perm))):
        return src
    if src.node is not None and src.node.op == "permute":
        inner = src.node.attrs["perm"]
        composed = tuple(inner[p] for p in perm)
        if composed == tuple(range(len(composed))):
            return src.node.inputs[0]
        return b.emit("permute", [src.node.inputs[0]], {"perm": composed}, n.out.shape, n.out.dtype, n.loc)
    return None


def _visit_expand(b, n, ins):               # of a constant
    if _const(ins[0]) is not None:
        return b.emit("const", [], {"value": _const(ins[0])}, n.out.shape, n.out.dtype, n.loc)
    return None


def _visit_pow(b, n, ins):                  # x**1; x**2 and x**3 as products
    e = _const(ins[1]) if ins[1].shape == () else None
    if e == 1:
        return _same(ins[0], n)
    if (e == 2 or e == 3) and same_shape(ins[0].shape, n.out.shape):
        x = ins[0]
        sq = b.emit("mul", [x, x], {}, n.out.shape, n.out.dtype, n.loc)
        return sq if e == 2 else b.emit("mul", [sq, x], {}, n.out.shape, n.out.dtype, n.loc)
    return None


def _visit_where(b, n, ins):                # with a constant condition
    if _const(ins[0]) is not None:
        return _same(ins[1] if _const(ins[0]) else ins[2], n)
    return None


def _visit_sum(b, n, ins):                  # of a cat along a kept axis: a cat of the pieces' sums
    src = ins[0]
    if src.node is None or src.node.op != "cat" or b.uses.get(id(n.inputs[0])) != 1 or \
            src.node.attrs["axis"] in n.attrs["axis"]:
        return None
    dims, keep, axis = n.attrs["axis"], n.attrs["keepdims"], src.node.attrs["axis"]
    parts = [b.emit(n.op, [x], n.attrs, _reduce_shape(x.shape, dims, keep), n.out.dtype, n.loc)
             for x in src.node.inputs]
    at = axis if keep else axis - sum(d < axis for d in dims)
    return b.emit("cat", parts, {"axis": at}, n.out.shape, n.out.dtype, n.loc)


_visit_max = _visit_min = _visit_sum
_visit_slice = slice_of_copy                # of a cat inside one piece; of an unslice


def _swap(v):
    k = len(v.shape)
    return tuple(range(k - 2)) + (k - 1, k - 2)


def _swapped(shape):
    return tuple(shape[:-2]) + (shape[-1], shape[-2])


def _transposes_product(b, n, src):
    """n swaps the last two axes of a matmul result that nothing else uses, with equal ranks."""
    node = src.node
    if node is None or node.op != "matmul" or b.uses.get(id(n.inputs[0]), 0) != 1:
        return False
    k = len(n.attrs["perm"])
    return (n.attrs["perm"] == tuple(range(k - 2)) + (k - 1, k - 2)
            and all(len(i.shape) == k for i in node.inputs))


_RULES = {name[len("_visit_"):]: f for name, f in list(globals().items()) if name.startswith("_visit_")}
