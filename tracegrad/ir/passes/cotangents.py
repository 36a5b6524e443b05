"""The backward graph for some of its cotangents: what `backward()` from some of a compiled call's
outputs computes.

Eagerly, autograd never visits what only the other outputs lead to. The compiled backward is one
graph taking a cotangent for every differentiable output, and a zero cotangent is not the same
thing: 0 * inf is nan, and an input that only the other outputs depend on would get a zero
gradient where eager leaves its .grad None. A backward graph is linear in its cotangents, so a
value computed from absent cotangents alone is exactly zero: `drop_cotangents` removes each such
value where the primitive maps zero to zero (each primitive's `zero` field in the table), reads a
zero constant where a kept node uses one, and reports the gradients that are such values (None, as
eagerly).
"""
from ...ops import PRIMS
from ...symint import is_sym
from ..graph import Graph


def _is_zero(node, flags):
    """Whether node's result is exactly zero: flags[i] is "absent" for an input computed from absent
    cotangents alone, "literal" for a zero constant. A product is zero by an absent factor only
    (0 * inf, with a literal zero, is nan: it stays); sums and selects by absent and literal zeros."""
    if not any(f == "absent" for f in flags):
        return False
    prim = PRIMS.get(node.op)
    rule = "first" if prim is not None and prim.kind == "view" else prim.zero if prim is not None else None
    if rule == "any":
        return True
    if rule == "first":
        return flags[0] == "absent"
    if rule == "all":
        return all(flags)
    return rule == "branches" and bool(flags[1]) and bool(flags[2])


def drop_cotangents(bwd, present):
    """(graph, absent): backward graph `bwd` (its first inputs the cotangents, in order) for the
    cotangents `present[i]` True only. The graph keeps bwd's inputs (the absent cotangents unread)
    and outputs; `absent` is the set of output positions that are zero for want of any present
    cotangent (their gradient is None)."""
    g = Graph(bwd.name)
    env, zero = {}, set()           # zero: ids of bwd values that are exactly zero
    for i, v in enumerate(bwd.inputs):
        env[id(v)] = g.add_input(v.name, v.shape, v.dtype)
        if i < len(present) and not present[i]:
            zero.add(id(v))

    def read(v):
        if id(v) in zero:
            return g.add("const", [], {"value": v.dtype.np.type(0).item()}, v.shape, v.dtype)
        return env[id(v)]
    for n in bwd.nodes:
        flags = ["absent" if id(i) in zero else "literal" if _literal_zero(i) else "" for i in n.inputs]
        if _is_zero(n, flags):
            zero.add(id(n.out))
            continue
        env[id(n.out)] = g.add(n.op, [read(i) for i in n.inputs], n.attrs, n.out.shape, n.out.dtype, n.loc)
    g.outputs = [read(v) for v in bwd.outputs]
    g.n_saved = bwd.n_saved
    return g, frozenset(j for j, v in enumerate(bwd.outputs) if id(v) in zero)


def _literal_zero(v):
    """Whether v is a constant 0 (a symbolic size as a constant, a mean's count, is none: comparing it
    would decide on the trace's hint, for every call)."""
    return v.node is not None and v.node.op == "const" and not is_sym(v.node.attrs["value"]) and \
        v.node.attrs["value"] == 0
