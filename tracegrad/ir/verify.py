"""The verifier: every value defined before use, every node's type what its primitive's rule says."""
from ..broadcast import quiet
from ..ops import PRIMS
from .printer import print_graph


class IRVerifyError(RuntimeError):
    pass


def verify(graph):
    defined = {id(v) for v in graph.inputs}
    lines = print_graph(graph, comments=False).splitlines()
    for k, n in enumerate(graph.nodes):
        line = lines[k + 1].strip()
        for v in n.inputs:
            if id(v) not in defined:
                raise IRVerifyError(f"use of an undefined value in: {line}")
        if n.op != "const":
            if n.op not in PRIMS:
                raise IRVerifyError(f"unknown op {n.op!r} in: {line}")
            try:
                with quiet():
                    shape, dtype = PRIMS[n.op].rule([v.shape for v in n.inputs], [v.dtype for v in n.inputs],
                                                    **n.attrs)
            except Exception as e:
                raise IRVerifyError(f"{e} in: {line}") from None
            if tuple(shape) != n.out.shape or dtype is not n.out.dtype:
                raise IRVerifyError(f"type {n.out.type} disagrees with the rule's "
                                    f"{dtype.short}[{','.join(map(str, shape))}] in: {line}")
        defined.add(id(n.out))
    for v in graph.outputs:
        if id(v) not in defined:
            raise IRVerifyError(f"graph {graph.name} returns an undefined value")
    return graph
