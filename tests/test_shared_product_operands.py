"""An expression that two matrix products read, one of them through a view (a transpose, a reshape), is
written once in its own layout and the viewing product reads it by BLAS's transpose flag (ir/passes/
fusion.py _shared_source), instead of the expression computed again into a transposed copy: W12's
logits gradient, read by the head's input gradient and, transposed, by the tied embedding's gradient.
Values == NumPy in float64 with a float32 bound, static and symbolic; gradients == central differences."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tracegrad as tg


def both(e_of, a, b, c, d):
    """(e @ c, e.T @ d) of the shared expression e = e_of(a, b), the transpose taken first (its view
    then holds e's expression, not yet a buffer)."""
    e = e_of(a, b)
    et = e.T
    return e @ c, et @ d


def expr(a, b):
    return (a * 0.5).exp() - b


def np_expr(a, b):
    return np.exp(a * 0.5) - b


def close(got, want):
    want = np.asarray(want, np.float64)
    scale = max(1.0, float(np.abs(want).max()))
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=1e-4, atol=1e-4 * scale)


def arrays(rng, m, k, n, p):
    f = lambda *s: rng.standard_normal(s).astype(np.float32)    # noqa: E731
    return f(m, k), f(m, k), f(k, n), f(m, p)


def exp_kernels(f, *args):
    return sum(" exp" in line.replace("+", " ") for line in f.ir(*args, stage="kernels").splitlines()
               if line.strip().startswith("k"))


@settings(max_examples=20)
@given(m=st.integers(1, 40), k=st.integers(1, 40), n=st.integers(1, 9), p=st.integers(1, 9), seed=st.integers(0, 2 ** 16))
def test_shared_expression_read_twice_matches_numpy(m, k, n, p, seed):
    a, b, c, d = arrays(np.random.default_rng(seed), m, k, n, p)
    f = tg.compile(lambda a, b, c, d: both(expr, a, b, c, d))
    args = [tg.from_numpy(x) for x in (a, b, c, d)]
    got = f(*args)
    e = np_expr(a.astype(np.float64), b.astype(np.float64))
    close(got[0].numpy(), e @ c.astype(np.float64))
    close(got[1].numpy(), e.T @ d.astype(np.float64))


def test_expression_is_computed_once():
    """One kernel computes the exp (on main: two, the second writing the transposed copy)."""
    a, b, c, d = arrays(np.random.default_rng(0), 33, 17, 5, 3)
    f = tg.compile(lambda a, b, c, d: both(expr, a, b, c, d))
    args = [tg.from_numpy(x) for x in (a, b, c, d)]
    f(*args)
    assert exp_kernels(f, *args) == 1


def test_batched_view_through_a_reshape():
    """e [B, T, K] read as [B*T, K].T by one product and as itself by a batched one; batch of 1 too."""
    rng = np.random.default_rng(3)
    for B in (1, 3):
        a, b = (rng.standard_normal((B, 7, 5)).astype(np.float32) for _ in range(2))
        c, d = rng.standard_normal((5, 4)).astype(np.float32), rng.standard_normal((B * 7, 2)).astype(np.float32)

        def g(a, b, c, d):
            e = expr(a, b)
            et = e.reshape(-1, 5).T
            return e @ c, et @ d
        f = tg.compile(g)
        got = f(*[tg.from_numpy(x) for x in (a, b, c, d)])
        e = np_expr(a.astype(np.float64), b.astype(np.float64))
        close(got[0].numpy(), e @ c)
        close(got[1].numpy(), e.reshape(-1, 5).T @ d)


def test_symbolic_sizes():
    """dynamic=True: the rows symbolic; one trace serves each size."""
    f = tg.compile(lambda a, b, c, d: both(expr, a, b, c, d), dynamic=True)
    rng = np.random.default_rng(4)
    for m in (6, 11, 2):
        a, b, c, d = arrays(rng, m, 9, 4, 3)
        got = f(*[tg.from_numpy(x) for x in (a, b, c, d)])
        e = np_expr(a.astype(np.float64), b.astype(np.float64))
        close(got[0].numpy(), e @ c)
        close(got[1].numpy(), e.T @ d)
    assert f.stats()["traces"] == 1


@pytest.mark.parametrize("compiled", [False, True])
def test_tied_head_gradient(compiled):
    """cross_entropy(h @ E.T): E's gradient reads the logits gradient transposed, h's reads it as it
    is; float64 gradients == central differences, eager and compiled."""
    rng = np.random.default_rng(5)
    h = tg.tensor(rng.standard_normal((6, 4)), requires_grad=True)
    E = tg.tensor(rng.standard_normal((7, 4)), requires_grad=True)
    tgt = tg.from_numpy(rng.integers(0, 7, 6))

    def loss(h, E):
        return tg.nn.functional.cross_entropy(h @ E.T, tgt)
    fn = tg.compile(loss) if compiled else loss
    assert tg.gradcheck(fn, (h, E))


@pytest.mark.parametrize("make", ["zeros", "full", "arange", "arange.T"])
def test_a_constant_or_arange_operand(make):
    """A product's operand made by a const or iota node (no primitive: W11's zero initial state raised
    KeyError 'const' in _shared_source), as it is or transposed, compiled == NumPy, with its gradient."""
    rng = np.random.default_rng(0)
    w = tg.tensor(rng.standard_normal((3, 2)), requires_grad=True)
    operand = {"zeros": (lambda: tg.zeros(4, 3, dtype=tg.float64), np.zeros((4, 3))),
               "full": (lambda: tg.full((4, 3), 0.5, dtype=tg.float64), np.full((4, 3), 0.5)),
               "arange": (lambda: tg.arange(12.0, dtype=tg.float64).reshape(4, 3), np.arange(12.0).reshape(4, 3)),
               "arange.T": (lambda: tg.arange(12.0, dtype=tg.float64).reshape(3, 4).T,
                            np.arange(12.0).reshape(3, 4).T)}[make]
    f = tg.compile(lambda w: ((operand[0]() @ w) * w.sum()).sum())
    got = f(w)
    got.backward()
    a, wn = operand[1], w.detach().numpy()
    np.testing.assert_allclose(got.item(), ((a @ wn) * wn.sum()).sum(), rtol=1e-12)
    grad = a.sum(axis=0)[:, None] * wn.sum() + (a @ wn).sum()       # d/dw of sum(a @ w) * sum(w)
    np.testing.assert_allclose(w.grad.numpy(), np.broadcast_to(grad, (3, 2)), rtol=1e-12)
