"""A guard that fixes a symbol through a multiple of it (16*S0 == 16, from comparing a product of sizes
with a literal) makes the symbol that constant for the passes after the trace, as `S0 == 1` does: a
reshape over it views instead of failing the symbolic compile (NotAffine; fuzz --sizes seed 4 program 79)."""
import warnings

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import tracegrad as tg
from tracegrad.symexpr import Expr
from tracegrad.symint import ShapeEnv, sym, using


@settings(max_examples=50, deadline=None)
@given(c=st.integers(1, 40), k=st.integers(0, 80), h=st.integers(0, 10))
def test_a_multiple_of_a_symbol_pinned_by_a_guard_simplifies(c, k, h):
    env = ShapeEnv()
    with using(env):
        s = sym("S", h)
        pinned = s * c == k              # records `c*S == k` (or its negation) on the hint
    simple = env.simplify(Expr.symbol("S"))
    if pinned and k % c == 0:
        assert simple == Expr.const(k // c)
    else:
        assert simple == Expr.symbol("S")
    assert all(g.holds({"S": h}) for g in env.guards)


def test_a_reshape_over_a_symbol_pinned_through_a_product_keeps_the_symbolic_compile():
    g = {}

    def f(x0, x1):
        x0 * 0.5 + g["t"]
        return x1.reshape(-1)
    compiled = [tg.compile(f, dynamic=True), tg.compile(f)]
    rng = np.random.default_rng(0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)        # a lost symbolic compile warns
        for b, n in [(17, 3), (16, 4), (16, 1), (0, 11), (1, 4), (18, 0)]:
            x0, x1 = rng.standard_normal((b, 1, n)), rng.standard_normal((b, 1, n))
            g["t"] = tg.tensor(rng.standard_normal((b, n, n)))
            want = f(tg.tensor(x0), tg.tensor(x1)).numpy()
            for c in compiled:
                np.testing.assert_array_equal(c(tg.tensor(x0), tg.tensor(x1)).numpy(), want)
    for c in compiled:
        assert c.stats()["symbolic_failures"] == []
