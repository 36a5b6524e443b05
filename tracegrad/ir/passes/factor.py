"""Factoring row sums: a float sum whose terms wait on another reduction only through a factor that is
constant along the summed axes is rewritten so that it no longer waits on that reduction's rows.

The rule. depth(v): the longest chain of reductions (and matrix products) v is computed through.
A sum over axes A of b (b's elements summed over A) needs depth(b) + 1. Where b is built from
  u + v, u - v, -u                    (sum(u) + sum(v), sum(u) - sum(v), -sum(u): exact rewrites
                                       but for rounding),
  s * v, v * s, v / s                 with s constant along A (a row statistic broadcast over the row:
                                       s * sum(v), sum(v) / s),
  c                                   constant along A, at the top (c times the number of elements),
the sum is rewritten as such a combination of sums exactly when that lowers its depth: a factor s
comes out only when depth(s) > depth(v) (the sum of v then no longer waits for s, so the two
reductions can share a walk over the row; ir/walks.py's `walks`), an addition splits only
when a part must (the parts already shallow enough stay one sum), and never a shift u +- c by a c
constant along A: sum(x - mean) is how a centered sum is written, and its small value is exactly
what sum(x) - n * mean would lose to cancellation. Nothing else changes: a sum that
cannot get shallower is kept as written, so sums are split only where that cuts a dependency chain.
A layer norm's backward: sum_j(a_j / std + dvar * xc_j) with dvar itself a row sum becomes
sum(a) / std + dvar * sum(xc), whose sums read only the row and its mean.

Float semantics: the value differs from the written sum by rounding (and where a partial sum
overflows that the written one does not). NaN and +-inf stay where eager puts them: a sum of
s * v_j for s = +-inf (or of v_j / s for s = +-0) is NaN as soon as one v_j is 0 or NaN or two have
opposite signs, which s * sum(v) does not see; so unless s is a finite constant (division: unless s
is provably positive, as sqrt(var + eps)), the rewrite also sums K = sum(v * inf), which is eager's
sum up to the sign of s, and takes s * where(isinf(s), K, sum(v)) (where(s == 0, K, sum(v)) / s). A
sum over no elements is left alone; one over axes whose sizes are known only at the call (symbolic)
takes where(count > 0, rewritten, 0), count the summed elements read at the call (eager's 0 over
none, where s * 0 could be NaN), and records no guard. Integer sums are left alone.
"""
import math

import numpy as np

from ...ops import PRIMS
from ...symint import active, is_sym, same_shape, same_size
from ..kernels import known
from .rewrite import Builder

_CHAINED = ("reduction", "extern")     # kinds that start a new link in a chain of reductions
BUDGET = 64                            # nodes of a summed tree looked into, at most


def factor_sums(graph):
    """`graph` itself when no sum gets shallower, else a rewritten copy."""
    if not _Depths(graph).factors():
        return graph
    b = _Factor(graph)
    for n in graph.nodes:
        ins = [b.get(i) for i in n.inputs]
        out = b.rewrite(n, ins) if n.op == "sum" else None
        b.env[id(n.out)] = out if out is not None else b.copy(n, ins)
    return b.finish()


class _Depths:
    """The depth of each value of `graph` as it is (before any rewrite)."""

    def __init__(self, graph):
        self.graph, self.depths = graph, {}

    def depth(self, v):
        return self.depths.get(id(v), 0)

    def deepen(self, out, op, inputs):
        chained = op != "const" and PRIMS[op].kind in _CHAINED
        self.depths[id(out)] = max((self.depth(i) for i in inputs), default=0) + chained

    def factors(self):
        """Whether some sum of the graph gets shallower."""
        for n in self.graph.nodes:
            if n.op == "sum" and self.target(n, n.inputs) is not None:
                return True
            self.deepen(n.out, n.op, n.inputs)
        return False

    def target(self, n, ins):
        """(the _Sum of sum node n over inputs `ins`, the depth it gets) when it gets shallower, else
        None."""
        (x,) = ins
        axes, keep = n.attrs["axis"], n.attrs["keepdims"]
        if not n.out.dtype.is_floating_point or x.dtype is not n.out.dtype or \
                any(not is_sym(x.shape[a]) and x.shape[a] == 0 for a in axes) or not axes:   # no element
            return None
        s = _Sum(self, x.shape, axes, keep)
        target = s.best(x)
        return None if target >= self.depth(x) + 1 else (s, target)


class _Factor(Builder, _Depths):
    def __init__(self, src):
        super().__init__(src)
        self.depths, self.lows = {}, {}

    def emit(self, op, inputs, attrs, shape, dtype, loc=None):
        out = super().emit(op, inputs, attrs, shape, dtype, loc)
        self.deepen(out, op, inputs)
        self.lows[id(out)] = _low(self, out)
        return out

    def add(self, op, inputs, **attrs):
        """Emit op(inputs) typed by its primitive's rule."""
        shape, dtype = PRIMS[op].rule([v.shape for v in inputs], [v.dtype for v in inputs], **attrs)
        return self.emit(op, inputs, attrs, shape, dtype)

    def const(self, value, dtype):
        return self.emit("const", [], {"value": value}, (), dtype)

    def low(self, v):
        return self.lows.get(id(v))

    def rewrite(self, n, ins):
        """The factored sum of node n (inputs rewritten to `ins`), or None to keep it as written."""
        got = self.target(n, ins)
        if got is None:
            return None
        s, target = got
        out = s.emit(ins[0], target)
        if out.dtype.is_floating_point:     # a sum from +0.0 is never -0.0; a product of its factors may be
            out = self.add("add", [out, self.const(0.0, out.dtype)])
        count = math.prod(ins[0].shape[a] for a in n.attrs["axis"])
        if is_sym(count):                   # known at the call: over no element, eager's 0, not s * 0
            some = self.add("gt", [self.const(count, out.dtype), self.const(0.0, out.dtype)])
            out = self.add("where", [some, out, self.const(0.0, out.dtype)])
        return out if same_shape(out.shape, n.out.shape) else self.add("expand", [out], shape=n.out.shape)


class _Sum:
    """Sums over `axes` of values broadcast to `shape` (one reduction node's input), each as a value
    that broadcasts to the reduction's result."""

    def __init__(self, b, shape, axes, keep):
        self.b, self.shape, self.axes, self.keep, self.memo = b, shape, set(axes), keep, {}
        self.budget = BUDGET

    def along(self, v):
        """Constant v along the summed axes as a value that broadcasts to the result (an expand of
        such a value counts as the value)."""
        while v.node is not None and v.node.op == "expand":
            v = v.node.inputs[0]
        padded = (1,) * (len(self.shape) - len(v.shape)) + tuple(v.shape)
        if self.keep or v.shape == ():
            return v
        kept = tuple(d for a, d in enumerate(padded) if a not in self.axes)
        if same_shape(kept, v.shape):
            return v
        if v.node is not None and v.node.op == "const":
            return self.b.emit("const", [], v.node.attrs, kept, v.dtype)
        return self.b.add("reshape", [v], shape=kept)

    def _factor(self, v):
        """(s, u, op) when v is s * u, u * s or u / s with s constant along the axes and u not."""
        n = v.node
        if n is None or not (n.op == "mul" or n.op == "div") or any(i.dtype is not v.dtype for i in n.inputs):
            return None
        pairs = [(n.inputs[1], n.inputs[0])] + ([(n.inputs[0], n.inputs[1])] if n.op == "mul" else [])
        for s, u in pairs:
            if self._constant(s) and not self._constant(u):
                return s, u, n.op
        return None

    def _constant(self, v):
        while v.node is not None and v.node.op == "expand":
            v = v.node.inputs[0]
        padded = (1,) * (len(self.shape) - len(v.shape)) + tuple(v.shape)
        return all(known(padded[a], 1) for a in self.axes)

    def _split(self, v):
        """v's node when v is u + w, u - w or -u that may be summed part by part: not a shift u +- c
        by a c constant along the axes (a centered x - mean, whose sum is the small residual that
        sum(x) - n * mean loses to cancellation)."""
        n = v.node
        if n is None or not _linear(n.op) or any(i.dtype is not v.dtype for i in n.inputs):
            return None
        return None if any(self._constant(i) for i in n.inputs) else n

    def best(self, v):
        """The least depth of the sum of v over the axes by the rewrites of the module docstring
        (at most BUDGET nodes of v's tree looked into)."""
        if id(v) in self.memo:
            return self.memo[id(v)]
        d, b = self.b.depth(v), self.b
        got, self.budget = d + 1, self.budget - 1
        if self.budget < 0:
            pass
        elif self._constant(v):
            got = d
        elif self._split(v) is not None:
            got = min(got, max(self.best(i) for i in v.node.inputs))
        elif self._factor(v) is not None:
            s, u, _ = self._factor(v)
            if b.depth(s) > b.depth(u):
                got = max(b.depth(s), b.depth(u) + 1)
        self.memo[id(v)] = got
        return got

    def emit(self, v, target):
        """The sum of v over the axes, of depth at most `target` (>= best(v)), split no further than
        needed."""
        b = self.b
        if b.depth(v) + 1 <= target:
            return self.plain(v)
        if self._constant(v):
            count = math.prod(self.shape[a] for a in self.axes)
            return b.add("mul", [self.along(v), b.const(count if is_sym(count) else float(count), v.dtype)])
        n = self._split(v)
        if n is not None:
            return b.add(n.op, [self.emit(i, target) for i in n.inputs])
        s, u, op = self._factor(v)
        s, r = self.along(s), self.plain(u)
        if op == "mul":
            if not (s.node is not None and s.node.op == "const" and
                    (is_sym(s.node.attrs["value"]) or math.isfinite(s.node.attrs["value"]))):     # a size: finite
                r = b.add("where", [b.add("eq", [b.add("abs", [s]), b.const(math.inf, s.dtype)]), self.spread(u), r])
            return b.add("mul", [s, r])
        if not (b.low(s) or 0) > 0 and not self._empty_if_zero(s):
            r = b.add("where", [b.add("eq", [s, b.const(0.0, s.dtype)]), self.spread(u), r])
        return b.add("div", [r, s])

    def _empty_if_zero(self, s):
        """Whether s is a size known at the call that is 0 only where a summed axis is empty (a mean's T
        over T elements): the sum is then eager's 0 whatever s (rewrite's where), so s == 0 needs no K."""
        while s.node is not None and s.node.op == "expand":
            s = s.node.inputs[0]
        c = s.node.attrs["value"] if s.node is not None and s.node.op == "const" else None
        return is_sym(c) and any(is_sym(self.shape[a]) and same_size(c, self.shape[a]) for a in self.axes)

    def plain(self, v):
        if not same_shape(v.shape, self.shape):
            v = self.b.add("expand", [v], shape=self.shape)
        return self.b.add("sum", [v], axis=tuple(sorted(self.axes)), keepdims=self.keep)

    def spread(self, u):
        """sum(u * inf): eager's sum of s * u_j (of u_j / s) for s = +inf (s = +0): +-inf, or NaN
        where a u_j is 0 or NaN or two have opposite signs."""
        return self.plain(self.b.add("mul", [u, self.b.const(math.inf, u.dtype)]))


def _linear(op):
    """Whether the sum of op(u, w) is op(sum(u), sum(w)) in exact arithmetic."""
    return op == "add" or op == "sub" or op == "neg"


def _low(b, v):
    """A lower bound on v's elements (NaN aside), or None: enough to show sqrt(var + eps) > 0."""
    n, lo = v.node, None
    if not v.dtype.is_floating_point:
        return None
    ins = [b.low(i) for i in n.inputs]
    if n.op == "const":
        lo = _size_low(n.attrs["value"]) if is_sym(n.attrs["value"]) else float(n.attrs["value"])
    elif PRIMS[n.op].kind == "view":
        lo = ins[0]
    elif n.op == "sqrt" and ins[0] is not None and ins[0] >= 0:
        lo = math.sqrt(ins[0])
    elif n.op == "add" and None not in ins and min(ins) >= 0:
        lo = ins[0] + ins[1]
    elif n.op == "mul" and n.inputs[0] is n.inputs[1]:
        lo = ins[0] ** 2 if (ins[0] or 0) > 0 else 0.0
    elif n.op == "mul" and None not in ins and min(ins) >= 0:
        lo = ins[0] * ins[1]
    elif n.op == "abs" or n.op == "exp" or (n.op == "sum" and ins[0] is not None and ins[0] >= 0):
        lo = 0.0
    elif n.op == "div" and ins[0] is not None and ins[0] >= 0 and n.inputs[1].node is not None \
            and n.inputs[1].node.op == "const" and is_sym(n.inputs[1].node.attrs["value"]):
        lo = 0.0 if (_size_low(n.inputs[1].node.attrs["value"]) or -1) >= 0 else None    # (0 / 0: the NaN set aside)
    elif n.op == "div" and ins[0] is not None and ins[0] >= 0 and n.inputs[1].node is not None \
            and n.inputs[1].node.op == "const" and n.inputs[1].node.attrs["value"] > 0:
        lo = ins[0] / n.inputs[1].node.attrs["value"]
    if lo is not None and lo > 0:       # below by more than the dtype rounds; under its smallest normal: 0
        lo *= 1 - 1e-3
        lo = lo if lo >= np.finfo(v.dtype.np).tiny else 0.0
    return lo


def _size_low(d):
    """A lower bound on symbolic size expression d over its symbols' ranges (the active env's; records no
    guard), or None: T and T*S are at least 0, T - 1 at least -1, -T unbounded below."""
    env = active()
    lo, _ = d.expr.bounds(env.ranges() if env is not None else {})
    return None if lo is None else float(lo)
