"""Graph -> Graph passes; `optimize` runs them to a fixed point, verifying after each."""
from ..verify import verify
from .cse import cse
from .dce import dce
from .fold import fold_constants
from .simplify import simplify

PIPELINE = (simplify, fold_constants, cse, dce)


def optimize(graph, check=True):
    """Simplify, fold, CSE and DCE until nothing changes (at most a few rounds)."""
    for _ in range(4):
        before = len(graph.nodes)
        for p in PIPELINE:
            graph = p(graph)
            if check:
                verify(graph)
        if len(graph.nodes) == before:
            break
    return graph


__all__ = ["optimize", "dce", "cse", "simplify", "fold_constants"]
