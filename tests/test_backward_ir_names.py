"""The backward IR's return line names the forward input of each gradient (`# grads of: x, w`): the
text still parses (the names read back into graph.grads_of) and, run with the interpreter, each
output is the gradient eager autograd gives the input it names."""
import os

import numpy as np
from hypothesis import given, settings, strategies as st

import tracegrad as tg

EXAMPLES = int(os.environ.get("TRACEGRAD_HYPOTHESIS_EXAMPLES", "8"))


class Affine(tg.nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = tg.nn.Parameter(tg.tensor(np.linspace(-1, 1, 16).reshape(4, 4)))
        self.bias = tg.nn.Parameter(tg.tensor(np.linspace(0.5, -0.5, 4)))

    def forward(self, x):
        return x @ self.weight + self.bias


def _program(model, x, w, pair):
    """Inputs of equal shapes, so that a gradient given to the wrong name has the right shape."""
    a, b = pair
    return (model(x * w).tanh() * a + b.exp() * w).sum()


def _graph_values(f, args, graph_inputs, named):
    """The graph's input arrays: cotangent 1, the forward's saved values, the rest by name."""
    fwd = tg.ir.parse(f.ir(*args, stage="forward"))
    fwd_inputs = dict(zip([v.name for v in fwd.inputs], named))
    outs = tg.ir.run(fwd, *[fwd_inputs[v.name] for v in fwd.inputs])
    saved = outs[len(outs) - fwd.n_saved:]
    values = []
    for v in graph_inputs:
        if v.name == "g0":
            values.append(np.ones(v.shape, v.dtype.np))
        elif v.name.startswith("s") and v.name[1:].isdigit():
            values.append(saved[int(v.name[1:])])
        else:
            values.append(fwd_inputs[v.name])
    return values


@settings(max_examples=EXAMPLES, deadline=None)
@given(needs=st.lists(st.booleans(), min_size=4, max_size=4), params=st.booleans(), seed=st.integers(0, 2 ** 16))
def test_each_gradient_is_named_after_its_input(needs, params, seed):
    rng = np.random.default_rng(seed)
    if not (any(needs) or params):
        needs[1] = True
    model = Affine()
    for p in model.parameters():
        p.requires_grad_(params)
    x, w, a, b = (tg.tensor(rng.standard_normal((3, 4)), requires_grad=r) for r in needs)
    f = tg.compile(lambda x, w, pair: _program(model, x, w, pair))
    args = (x, w, (a, b))
    text = f.ir(*args, stage="backward")
    g = tg.ir.parse(text)
    assert str(g) == text                                   # the comment round-trips
    ret = text.splitlines()[-2]
    assert ret.startswith("  return ") and ret.endswith("# grads of: " + ", ".join(g.grads_of))
    named = {"x": x, "w": w, "pair_0": a, "pair_1": b, "model.weight": model.weight, "model.bias": model.bias}
    wanted = [n for n, t in named.items() if t.requires_grad]
    assert sorted(g.grads_of) == sorted(wanted)
    loss = _program(model, x, w, (a, b))                    # eager: the oracle
    loss.backward()
    arrays = {n: t.detach().numpy() for n, t in named.items()}
    fwd_names = [v.name for v in tg.ir.parse(f.ir(*args, stage="forward")).inputs]
    grads = tg.ir.run(g, *_graph_values(f, args, g.inputs, [arrays[n] for n in fwd_names]))
    for name, grad in zip(g.grads_of, grads):
        np.testing.assert_allclose(grad, named[name].grad.numpy(), rtol=1e-10, atol=1e-12, err_msg=name)


def test_partial_backward_keeps_the_names():
    """The backward for some outputs only (ir/passes/cotangents.py) names its gradients too."""
    from tracegrad.jit.pipeline import partial_backward
    x, w = (tg.tensor(np.ones((2, 3)), requires_grad=True) for _ in range(2))
    f = tg.compile(lambda x, w: ((x * w).sum(), (x + w).sum()))
    f(x, w)
    entry = next(iter(f.cache.values()))
    _, graph, _, _ = partial_backward(entry.bwd, (True, False), "interpret", None, True)
    assert graph.grads_of == ["x", "w"] == entry.bwd.grads_of
    assert str(graph).splitlines()[-2].endswith("# grads of: x, w")
