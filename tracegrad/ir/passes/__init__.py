"""Graph -> Graph passes; `optimize` runs them to a fixed point and verifies the result."""
from ..verify import IRVerifyError, verify
from .cse import cse
from .dce import dce
from .factor import factor_sums
from .fold import fold_constants
from .product_sums import join_product_sums
from .simplify import simplify

PIPELINE = (simplify, fold_constants, cse, factor_sums, join_product_sums, dce)


def optimize(graph, check=True):
    """Simplify, fold, CSE, factor row sums (factor.py), join sums of products (product_sums.py) and DCE until nothing changes (at most a few rounds). check: verify the
    result (True), after every pass, naming the pass that broke the graph ("each"), or not (False). A pass returns the graph
    it was given when it changes nothing, and is not run again on a graph it left unchanged."""
    kept = {}                   # pass -> the graph it last returned unchanged (a pass is a function of its graph)
    for _ in range(4):
        before = len(graph.nodes)
        for p in PIPELINE:
            if kept.get(p) is graph:
                continue
            try:
                graph, given = p(graph), graph
            except Exception:
                if check:            # a pass that fails on a graph an earlier pass broke: name the break
                    verify(graph)
                raise
            if graph is given:
                kept[p] = graph
            if check == "each":
                try:
                    verify(graph)
                except IRVerifyError as e:
                    raise IRVerifyError(f"after pass {p.__name__}: {e}") from None
        if len(graph.nodes) == before:
            break
    if check is True:
        verify(graph)
    return graph


__all__ = ["optimize", "dce", "cse", "simplify", "fold_constants", "factor_sums"]
