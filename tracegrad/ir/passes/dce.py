"""Dead-code elimination: drop nodes whose results no output needs (graph inputs always stay)."""
from .rewrite import Builder


def dce(graph):
    live = {id(v) for v in graph.outputs}
    keep = set()
    for n in reversed(graph.nodes):
        if id(n.out) in live:
            keep.add(id(n))
            live.update(id(i) for i in n.inputs)
    b = Builder(graph)
    for n in graph.nodes:
        if id(n) in keep:
            b.env[id(n.out)] = b.copy(n)
    return b.finish()
