"""Kernels that read no memory: reductions of values made inside the compiled function (a zeroed clone, a
constant times a mask of shapes only). The scheduler picked a walk by its kernel's largest read and had
none to pick from (fuzz seed 2613, program 737: `v = x.clone(); v.zero_(); v[0].mul_(2); v.amax(0)`
raised ValueError compiled). Generated: every reduction over every axis of such values, compiled == eager."""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import tracegrad as tg

REDUCTIONS = {"amax": lambda v, a: v.amax(a), "amin": lambda v, a: v.amin(a), "sum": lambda v, a: v.sum(a),
              "logsumexp": lambda v, a: v.logsumexp(a), "softmax": lambda v, a: v.softmax(a),
              "mean": lambda v, a: v.mean(a)}


@settings(max_examples=40, deadline=None)
@given(shape=st.sampled_from([(3, 1), (1, 3), (4, 5), (2, 3, 4), (5, 1, 2)]), name=st.sampled_from(sorted(REDUCTIONS)),
       axis=st.integers(0, 2), fill=st.sampled_from(["zeroed", "scaled row", "full"]))
def test_reductions_of_values_that_read_no_memory(shape, name, axis, fill):
    axis = axis % len(shape)

    def f(x):
        v = x.clone()
        v.zero_()
        if fill == "scaled row":
            v[0].add_(3.0)
            v[0].mul_(2.0)
        elif fill == "full":
            v = tg.full(shape, -1.5)
        return REDUCTIONS[name](v, axis)

    x = tg.tensor(np.random.default_rng(0).standard_normal(shape).astype(np.float32), requires_grad=True)
    want = f(x)
    got = tg.compile(f)(x)
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-6, atol=1e-6)
