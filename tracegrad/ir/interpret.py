"""The `interpret` backend: run a graph op by op with the primitives' NumPy implementations."""
import numpy as np

from ..ops import PRIMS


def run(graph, *arrays):
    """Evaluate `graph` on NumPy arrays (one per input); returns a tuple of arrays, one per output."""
    env = values(graph, *arrays)
    return tuple(env[id(v)] for v in graph.outputs)


def values(graph, *arrays):
    """Every value of `graph` for these inputs: {id(Value): array}."""
    if len(arrays) != len(graph.inputs):
        raise ValueError(f"graph {graph.name} takes {len(graph.inputs)} inputs, got {len(arrays)}")
    env = {}
    for v, a in zip(graph.inputs, arrays):
        a = np.asarray(a)
        if a.shape != v.shape or a.dtype != v.dtype.np:
            raise ValueError(f"input %{v.name}: expected {v.type}, got {a.dtype}{list(a.shape)}")
        env[id(v)] = a
    with np.errstate(all="ignore"):         # IEEE results without warnings, as eager ops run
        for n in graph.nodes:
            env[id(n.out)] = evaluate(n, [env[id(i)] for i in n.inputs])
    return env


def evaluate(node, args):
    if node.op == "const":
        return np.full(node.out.shape, node.attrs["value"], dtype=node.out.dtype.np)
    out = PRIMS[node.op].impl(*args, **node.attrs)
    if type(out) is not np.ndarray or out.dtype != node.out.dtype.np:
        out = np.asarray(out).astype(node.out.dtype.np, copy=False)
    return out
