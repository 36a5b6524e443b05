"""Common-subexpression elimination: one node per (op, inputs, attrs); random ops never merge."""
from ...ops import PRIMS
from ..printer import fmt_attr
from .rewrite import Builder


def cse(graph):
    """`graph` itself when no two nodes merge, else a rewritten copy."""
    attrs = {}                      # id(node) -> its attributes' part of the key, formatted once
    if not _merges(graph, attrs):
        return graph
    b, seen = Builder(graph), {}
    for n in graph.nodes:
        ins = [b.get(i) for i in n.inputs]
        key = _key(n, ins, attrs)
        if key is None:
            b.env[id(n.out)] = b.copy(n, ins)
            continue
        if key not in seen:
            seen[key] = b.copy(n, ins)
        b.env[id(n.out)] = seen[key]
    return b.finish()


def _merges(graph, attrs):
    """Whether some node of `graph` repeats an earlier one's key."""
    seen = set()
    for n in graph.nodes:
        key = _key(n, n.inputs, attrs)
        if key is not None:
            if key in seen:
                return True
            seen.add(key)
    return False


def _key(n, ins, attrs):
    """What node n (inputs `ins`) is the same computation as another by, or None (a random draw)."""
    p = PRIMS.get(n.op)
    if p is not None and p.effect:
        return None
    a = attrs.get(id(n))
    if a is None:
        a = attrs[id(n)] = tuple((k, fmt_attr(v)) for k, v in n.attrs.items())
    return n.op, tuple(map(id, ins)), a, n.out.type      # the type's text: a symbolic shape unhashed
