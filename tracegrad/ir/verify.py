"""The verifier: every value defined before use, every node's type what its primitive's rule says."""
from ..broadcast import quiet
from ..ops import PRIMS
from .printer import node_line, referrer


class IRVerifyError(RuntimeError):
    pass


def verify(graph):
    defined = {id(v) for v in graph.inputs}

    def line(n):                      # printed only for the error message
        return node_line(n, referrer(graph), comments=False).strip()
    with quiet():
        for n in graph.nodes:
            for v in n.inputs:
                if id(v) not in defined:
                    raise IRVerifyError(f"use of an undefined value in: {line(n)}")
            if n.op != "const":
                if n.op not in PRIMS:
                    raise IRVerifyError(f"unknown op {n.op!r} in: {line(n)}")
                try:
                    shape, dtype = PRIMS[n.op].rule([v.shape for v in n.inputs], [v.dtype for v in n.inputs],
                                                    **n.attrs)
                except Exception as e:
                    raise IRVerifyError(f"{e} in: {line(n)}") from None
                if tuple(shape) != n.out.shape or dtype is not n.out.dtype:
                    raise IRVerifyError(f"type {n.out.type} disagrees with the rule's "
                                        f"{dtype.short}[{','.join(map(str, shape))}] in: {line(n)}")
            defined.add(id(n.out))
    for v in graph.outputs:
        if id(v) not in defined:
            raise IRVerifyError(f"graph {graph.name} returns an undefined value")
    return graph
