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


def test_a_row_major_buffer_reshaped_across_a_derived_size_views():
    """reshape(-1, 17) of (B, T, S) traced at T = 0: the gradient's reshape back from (B*T*S // 17, 17) to
    (B, T, S) groups no axes by expressions (nor by the hints, all 0), yet a row-major buffer views in any
    shape: no NotAffine, no lost symbolic compile (fuzz --sizes seed 28 program 53, llvm default)."""
    def f(x):
        return x.reshape(-1, 17)
    compiled = [tg.compile(f, dynamic=True), tg.compile(f)]
    rng = np.random.default_rng(1)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)        # a lost symbolic compile warns
        for shape in [(3, 2, 17), (5, 0, 31), (1, 3, 17), (2, 17, 5), (0, 4, 17)]:
            a = rng.standard_normal(shape)
            for c in compiled:
                x = tg.tensor(a, requires_grad=True)
                y = c(x)
                (y * tg.tensor(np.arange(y.numel()).reshape(y.shape))).sum().backward()
                np.testing.assert_array_equal(y.detach().numpy(), a.reshape(-1, 17))
                np.testing.assert_array_equal(x.grad.numpy(), np.arange(a.size).reshape(shape))
    for c in compiled:
        assert c.stats()["symbolic_failures"] == []


def test_a_matmul_of_a_reshape_across_a_derived_size_keeps_the_symbolic_compile():
    """The same through a matmul (its operands and gradients are reshaped row-major buffers): values and
    gradients == NumPy's, no symbolic compile lost, in either mode."""
    def f(x, w):
        return (w.mT @ x.reshape(-1, 17).mT).sum(0)
    compiled = [tg.compile(f, dynamic=True), tg.compile(f)]
    rng = np.random.default_rng(2)
    w = rng.standard_normal((17, 3))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        for shape in [(3, 2, 17), (5, 0, 31), (1, 3, 17), (2, 17, 5), (4, 1, 17)]:
            a = rng.standard_normal(shape)
            for c in compiled:
                x, wt = tg.tensor(a, requires_grad=True), tg.tensor(w, requires_grad=True)
                c(x, wt).sum().backward()
                rows = a.reshape(-1, 17)
                np.testing.assert_allclose(c(x, wt).detach().numpy(), (w.T @ rows.T).sum(0), rtol=1e-12, atol=1e-12)
                np.testing.assert_allclose(x.grad.numpy(), np.tile(w.sum(1), (rows.shape[0], 1)).reshape(shape),
                                           rtol=1e-12, atol=1e-12)
                np.testing.assert_allclose(wt.grad.numpy(), np.tile(rows.sum(0)[:, None], (1, 3)), rtol=1e-12,
                                           atol=1e-12)
    for c in compiled:
        assert c.stats()["symbolic_failures"] == []


def test_a_symbol_pinned_then_equated_to_another_stays_pinned():
    """S0 == 1 (an expand stretches S0), then S0 == B (a matmul's inner sizes): the second equality, in
    the terms of the first, pins B too; it used to replace S0 -> B, forgetting S0 == 1, so the expand kept
    S0's stride and read past the row (zeros; fuzz --sizes seed 29 program 620, llvm both modes)."""
    env = ShapeEnv()
    with using(env):
        s0, b = sym("S0", 1), sym("B", 1)
        assert s0 == 1 and s0 == b
    assert env.simplify(Expr.symbol("S0")) == Expr.const(1) == env.simplify(Expr.symbol("B"))

    def f(x0, x1):
        v0 = x0.expand(1, 1, 3, 2)
        x0 @ x1
        return tg.stack([v0.square(), v0 * 0.5], 4)
    rng = np.random.default_rng(0)
    for c in [tg.compile(f, dynamic=True), tg.compile(f)]:
        for s, t in [(2, 17), (1, 1), (2, 3), (1, 4)]:
            a, w = rng.standard_normal((1, 1, s)), rng.standard_normal((s, t))
            want = np.stack([np.broadcast_to(a, (1, 1, 3, 2)) ** 2, np.broadcast_to(a, (1, 1, 3, 2)) * 0.5], 4)
            np.testing.assert_array_equal(c(tg.tensor(a), tg.tensor(w)).numpy(), want)
