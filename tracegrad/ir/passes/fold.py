"""Constant folding: an op whose inputs are all constants becomes a constant when its result is
uniform (every element equal — scalars, fills), which the IR's `const` op can represent."""
import math

import numpy as np

from ...ops import PRIMS
from ...symint import hint, is_sym
from .rewrite import Builder


def fold_constants(graph):
    """`graph` itself when no node folds, else a rewritten copy."""
    if not any(_folded(n, n.inputs) is not None for n in graph.nodes):
        return graph
    b = Builder(graph)
    for n in graph.nodes:
        ins = [b.get(i) for i in n.inputs]
        value = _folded(n, ins)
        if value is not None:
            b.env[id(n.out)] = b.emit("const", [], {"value": value}, n.out.shape, n.out.dtype, n.loc)
        else:
            b.env[id(n.out)] = b.copy(n, ins)
    return b.finish()


def _folded(n, ins):
    """The constant node n computes from inputs `ins` when they are all constants and its result is
    uniform (a Python number), else None."""
    p = PRIMS.get(n.op)
    if n.op == "const" or p is None or p.effect or not ins or \
            not all(i.node is not None and i.node.op == "const" and not is_sym(i.node.attrs["value"]) for i in ins):
        return None             # (a size known at the call stays one: folding would pin it)
    scalar = p.kind == "elementwise"
    if not scalar and (sum(_numel(v.shape) for v in ins + [n.out]) > 4096
                       or any(is_sym(d) for v in ins + [n.out] for d in v.shape)):    # (sizes known at the call)
        return None
    args = [np.full(() if scalar else i.shape, i.node.attrs["value"], i.dtype.np) for i in ins]
    with np.errstate(all="ignore"):
        out = np.asarray(PRIMS[n.op].impl(*args, **n.attrs))
    flat = out.reshape(-1)
    if flat.size and (flat == flat[0]).all() or flat.size and np.isnan(flat).all():
        return flat[0].item()
    return None


def _numel(shape):
    return math.prod(map(hint, shape))
