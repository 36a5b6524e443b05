"""The backward graph for some of its cotangents: what `backward()` from some of a compiled call's
outputs computes.

Eagerly, autograd never visits what only the other outputs lead to. The compiled backward is one
graph taking a cotangent for every differentiable output, and a zero cotangent is not the same
thing: 0 * inf is nan, and an input that only the other outputs depend on would get a zero
gradient where eager leaves its .grad None. A backward graph is linear in its cotangents, so a
value computed from absent cotangents alone is exactly zero: `drop_cotangents` removes each such
value where the primitive maps zero to zero (the rules below), reads a zero constant where a kept
node uses one, and reports the gradients that are such values (None, as eagerly).
"""
from ...ops import PRIMS
from ..graph import Graph

# how a primitive's result is zero: "any" input zero (a product), "all" inputs zero (a sum, a
# concatenation), its first input zero (a quotient, a gather), both branches of a select zero;
# views, sums and copies of a zero are zero
_ZERO_IF = {"mul": "any", "matmul": "any", "add": "all", "sub": "all", "cat": "all", "div": "first",
            "index": "first", "where": "branches", "neg": "first", "cast": "first", "copy": "first",
            "sum": "first", "cumsum": "first", "unslice": "first"}


def _is_zero(node, zero):
    """Whether node's result is exactly zero when the inputs flagged in `zero` are."""
    rule = "first" if PRIMS[node.op].kind == "view" else _ZERO_IF.get(node.op)
    if rule == "any":
        return any(zero)
    if rule == "all":
        return all(zero)
    if rule == "first":
        return zero[0]
    if rule == "branches":
        return zero[1] and zero[2]
    return False


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
        flags = [id(i) in zero for i in n.inputs]
        if any(flags) and n.op in PRIMS and _is_zero(n, flags):
            zero.add(id(n.out))
            continue
        env[id(n.out)] = g.add(n.op, [read(i) for i in n.inputs], n.attrs, n.out.shape, n.out.dtype, n.loc)
    g.outputs = [read(v) for v in bwd.outputs]
    g.n_saved = bwd.n_saved
    return g, frozenset(j for j, v in enumerate(bwd.outputs) if id(v) in zero)
