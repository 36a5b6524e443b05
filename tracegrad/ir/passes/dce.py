"""Dead-code elimination: drop nodes whose results no output needs (graph inputs always stay); a graph
with none is returned as it is.

A random draw is an effect on the generator, not only a value: it stays even when unused, so the
draws after it (and the generator's state after the call) are eager's under the same seed."""
from ...ops import PRIMS
from .rewrite import Builder


def dce(graph):
    live = {id(v) for v in graph.outputs}
    keep = set()
    for n in reversed(graph.nodes):
        if id(n.out) in live or is_effect(n):
            keep.add(id(n))
            live.update(id(i) for i in n.inputs)
    if len(keep) == len(graph.nodes):
        return graph
    b = Builder(graph)
    for n in graph.nodes:
        if id(n) in keep:
            b.env[id(n.out)] = b.copy(n)
    return b.finish()


def is_effect(node):
    p = PRIMS.get(node.op)
    return p is not None and p.effect
