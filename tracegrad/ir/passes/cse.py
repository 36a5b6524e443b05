"""Common-subexpression elimination: one node per (op, inputs, attrs); random ops never merge."""
from ...ops import PRIMS
from ..printer import fmt_attr
from .rewrite import Builder


def cse(graph):
    b, seen = Builder(graph), {}
    for n in graph.nodes:
        ins = [b.get(i) for i in n.inputs]
        p = PRIMS.get(n.op)
        if p is not None and p.kind == "random":
            b.env[id(n.out)] = b.copy(n, ins)
            continue
        key = (n.op, tuple(id(i) for i in ins), tuple((k, fmt_attr(v)) for k, v in n.attrs.items()),
               n.out.shape, n.out.dtype.name)
        if key not in seen:
            seen[key] = b.copy(n, ins)
        b.env[id(n.out)] = seen[key]
    return b.finish()
