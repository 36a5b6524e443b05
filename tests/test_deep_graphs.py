"""Deep graphs compile: no pass and no code generator recurses along a chain of ops, so chains far
longer than Python's recursion limit compile and match eager."""
import sys

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import tracegrad as tg
from tracegrad.ir.passes.fusion import MAX_TREE_OPS

STEPS = {
    "affine": lambda x: x * 1.0001 + 0.001,
    "tanh": lambda x: x.tanh(),
    "sigmoid": lambda x: x.sigmoid() - 0.5,
    "relu": lambda x: x.relu() - 0.25,
    "where": lambda x: tg.where(x > 0, x * 0.5, x),
    "view": lambda x: x.reshape(60, 50).permute(1, 0).reshape(3000),    # views; the last one copies
    "abs": lambda x: x.abs() * 0.9,
}


def _chain(steps):
    def f(x):
        for s in steps:
            x = STEPS[s](x)
        return x
    return f


def test_a_chain_of_3000_ops_compiles_and_matches_eager():
    steps = ["affine"] * 1400 + ["tanh"] * 100 + ["view"] * 10       # 2,900 ops and 30 views
    np.random.default_rng(1).shuffle(steps)
    x = tg.tensor(np.linspace(-1.0, 1.0, 3000, dtype=np.float32))
    f = tg.compile(_chain(steps))
    got = f(x)
    assert len(f.ir(x, stage="forward").splitlines()) > sys.getrecursionlimit() + 1000
    np.testing.assert_allclose(got.numpy(), _chain(steps)(x).numpy(), rtol=1e-5, atol=1e-6)
    # the chain is cut into kernels of bounded size (LLVM's time grows faster than linearly)
    assert f.stats()["kernels"] >= 2900 // MAX_TREE_OPS


# LLVM takes ~10 ms per inlined transcendental and ~20 ms per kernel: those come one in a hundred steps
CHEAP = sorted(set(STEPS) - {"tanh", "sigmoid", "view"})


@settings(max_examples=2, deadline=None)
@given(st.lists(st.sampled_from(CHEAP), min_size=1100, max_size=1300), st.sampled_from(["tanh", "sigmoid"]))
def test_generated_deep_chains_match_eager(steps, transcendental):
    steps = [transcendental if i % 100 == 50 else "view" if i % 100 == 0 else s for i, s in enumerate(steps)]
    x = tg.tensor(np.linspace(-2.0, 2.0, 3000, dtype=np.float32))
    got = tg.compile(_chain(steps))(x)
    np.testing.assert_allclose(got.numpy(), _chain(steps)(x).numpy(), rtol=1e-4, atol=1e-5)


def test_the_gradient_of_a_deep_chain_compiles_and_matches_eager():
    steps = ["tanh" if i % 100 == 50 else "view" if i % 100 == 0 else "affine" for i in range(1100)]
    x = tg.tensor(np.linspace(-1.0, 1.0, 3000), requires_grad=True)
    loss = tg.compile(lambda x: _chain(steps)(x).sum())(x)
    loss.backward()
    g = x.grad.numpy().copy()
    x.grad = None
    want = _chain(steps)(x).sum()
    want.backward()
    np.testing.assert_allclose(loss.item(), want.item(), rtol=1e-12)
    np.testing.assert_allclose(g, x.grad.numpy(), rtol=1e-10, atol=1e-12)
