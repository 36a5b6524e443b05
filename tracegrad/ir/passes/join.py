"""The forward and backward graphs of a compiled call as one graph that also returns the gradients of
a unit cotangent: what `loss = f(...); loss.backward()` computes, for a call whose one differentiable
result has one element.

Run as two programs, the backward reads the inputs again (a layer norm's x and g: once to compute
the loss, once for the gradients). Joined, fusion sees both halves at once: a row kernel computing
the statistics also computes the gradients while its rows are in cache, and CSE shares what the two
halves both compute. The joined graph's outputs are the forward graph's (results, then saved
values, unless `keep_saved` is False: the caller then recomputes them if it needs them), then the
backward graph's (one gradient per target).
"""
from ..graph import Graph


def forward_with_gradient(fwd, bwd, n_diff, saved_at, keep_saved=True):
    """The joined graph: fwd's inputs, then the backward's constant inputs (after its cotangents and
    saved values); the cotangents are ones."""
    g = Graph(f"{fwd.name}_with_gradient")
    env = {id(v): g.add_input(v.name, v.shape, v.dtype) for v in fwd.inputs}
    for n in fwd.nodes:
        env[id(n.out)] = g.add(n.op, [env[id(i)] for i in n.inputs], n.attrs, n.out.shape, n.out.dtype, n.loc)
    saved = fwd.outputs[saved_at:]
    cotangents, reads, consts = bwd.inputs[:n_diff], bwd.inputs[n_diff:n_diff + len(saved)], \
        bwd.inputs[n_diff + len(saved):]
    for v in cotangents:
        env[id(v)] = g.add("const", [], {"value": v.dtype.np.type(1).item()}, v.shape, v.dtype)
    for v, s in zip(reads, saved):
        env[id(v)] = env[id(s)]
    for v in consts:
        env[id(v)] = g.add_input(v.name, v.shape, v.dtype)
    for n in bwd.nodes:
        env[id(n.out)] = g.add(n.op, [env[id(i)] for i in n.inputs], n.attrs, n.out.shape, n.out.dtype, n.loc)
    kept = fwd.outputs if keep_saved else fwd.outputs[:saved_at]
    g.outputs = [env[id(v)] for v in kept] + [env[id(v)] for v in bwd.outputs]
    return g
