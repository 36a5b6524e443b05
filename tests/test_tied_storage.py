"""Captured tensors over one storage (a weight tied with `w1.data = w0.data`, a tensor and its
detach()) updated in place inside a compiled function: every read sees what the storage holds at
that point, as eagerly. The class: a captured (not argument) tensor read after an update through
another tensor over its array read its value from before the update (an optimizer step over tied
weights lost one of the updates). Oracle: eager tracegrad; both backends."""
import os

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import tracegrad as tg
import tracegrad.nn as nn

EXAMPLES = int(os.environ.get("TRACEGRAD_HYPOTHESIS_EXAMPLES", "12"))
OPS = st.lists(st.tuples(st.sampled_from(["a", "b"]), st.sampled_from(["add_", "mul_", "read"]),
                         st.floats(-2, 2, allow_nan=False).filter(lambda v: abs(v) > 0.1)), min_size=1, max_size=6)


@settings(max_examples=EXAMPLES, deadline=None)
@given(ops=OPS, how=st.sampled_from(["data", "detach"]), backend=st.sampled_from(["llvm", "interpret"]))
def test_reads_and_updates_through_two_tensors_over_one_array(ops, how, backend):
    def tensors():
        a = tg.tensor(np.arange(1.0, 5.0))
        if how == "data":
            b = tg.tensor(np.zeros(4))
            b.data = a.data
        else:
            b = a.detach()
        return a, b

    def make(a, b):
        def f(x):
            out = x * 0.0
            for name, op, v in ops:
                t = a if name == "a" else b
                if op == "read":
                    out = out + t * v
                else:
                    getattr(t, op)(v)
            return out + a + b
        return f
    a, b = tensors()
    want = make(a, b)(tg.tensor(np.ones(4))).numpy()
    ca, cb = tensors()
    got = tg.compile(make(ca, cb), backend=backend)(tg.tensor(np.ones(4))).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-12)
    np.testing.assert_allclose(ca.numpy(), a.numpy(), rtol=1e-12)
    np.testing.assert_allclose(cb.numpy(), b.numpy(), rtol=1e-12)


@settings(max_examples=EXAMPLES, deadline=None)
@given(tie=st.sampled_from([(0, 1), (0, 2), (1, 2)]), opt=st.sampled_from(["sgd", "momentum", "adam"]),
       steps=st.integers(1, 3), backend=st.sampled_from(["llvm", "interpret"]))
def test_a_training_step_over_tied_weights(tie, opt, steps, backend):
    def make():
        tg.manual_seed(0)
        m = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 4))
        layers = [m[0], m[2], m[4]]
        layers[tie[1]].weight.data = layers[tie[0]].weight.data
        o = {"sgd": lambda p: tg.optim.SGD(p, lr=0.1), "momentum": lambda p: tg.optim.SGD(p, lr=0.1, momentum=0.9),
             "adam": lambda p: tg.optim.Adam(p, lr=0.01)}[opt](m.parameters())
        return m, o, layers
    x = tg.tensor(np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32))

    def step(m, o, x):
        loss = (m(x) ** 2).sum()
        loss.backward()
        o.step()
        o.zero_grad()
        return loss
    runs = []
    for fn in (step, tg.compile(step, backend=backend)):
        m, o, layers = make()
        losses = [fn(m, o, x).item() for _ in range(steps)]
        runs.append((losses, [layer.weight.detach().numpy().copy() for layer in layers]))
    (want, wparams), (got, gparams) = runs
    np.testing.assert_allclose(got, want, rtol=1e-5)
    for g, w in zip(gparams, wparams):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
