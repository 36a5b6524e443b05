"""`B % k` and `B // k` of a symbolic size stay expressions (a derived symbol B_divk, bound at each call):
`if B % 2 == 0` records the guard `B % 2 == 0` instead of pinning B, and chunk/split/view of a symbolic
size by a constant give B//k pieces under it (torch's chunk rule: ceil(B/k) each, the last the rest)."""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import tracegrad as tg
from tracegrad.symint import ShapeEnv, hint, is_sym, sym, using


def _torch_chunk_sizes(n, k):
    """torch.chunk's piece sizes along a dim of n: ceil(n/k) each, the last the rest; n == 0: k empty."""
    if n == 0:
        return [0] * k
    c = -(-n // k)
    return [min(c, n - i) for i in range(0, n, c)]


@given(h=st.integers(0, 40), k=st.integers(1, 5), c=st.integers(0, 4))
@settings(max_examples=60, deadline=None)
def test_mod_and_floordiv_are_expressions_checked_at_each_call(h, k, c):
    env = ShapeEnv()
    with using(env):
        b = sym("B", h)
        q, r = b // k, b % k
        even = r == c % k
    assert (hint(q), hint(r)) == (h // k, h % k) and is_sym(q)
    assert not env.specializations()
    assert [g.text for g in env.guards] == ([f"B % {k} {'==' if even else '!='} {c % k}"] if k > 1 else [])
    for v in range(0, 3 * k + 3):        # the guard holds exactly where the decision is the same
        assert (env.check({"B": v}) is None) == ((v % k == c % k) == even)


def test_a_divisibility_guard_makes_the_quotient_exact():
    env = ShapeEnv()
    with using(env):
        b = sym("B", 6)
        assert b % 2 == 0
        half = b // 2
        assert half * 2 - b == 0 and str(half) == "B_div2"
        assert (3 * b) // 2 == 3 * half      # exact under the guard: no second derived symbol
    assert not env.specializations() and env.check({"B": 10}) is None
    assert env.check({"B": 7}) == "B % 2 == 0 failed (B = 7, B_div2 = 3)"


def _pieces_program(k, dim, branch):
    def f(x):
        if branch and x.shape[dim] % k != 0:
            return x.sum()
        out = x.sum() * 0
        for i, p in enumerate(x.chunk(k, dim=dim)):
            out = out + (p * p).sum() * (i + 1) + p.sum()
        return out
    return f


def _oracle(xv, k, dim, branch):
    n = xv.shape[dim]
    if branch and n % k:
        return xv.sum()
    out, start = 0.0, 0
    for i, s in enumerate(_torch_chunk_sizes(n, k)):
        p = np.take(xv, range(start, start + s), axis=dim)
        out += (p * p).sum() * (i + 1) + p.sum()
        start += s
    return out


def _run(g, f, xv):
    x, y = tg.tensor(xv, requires_grad=True), tg.tensor(xv, requires_grad=True)
    a, b = g(x), f(y)
    a.backward()
    b.backward()
    return float(a), float(b), x.grad.numpy(), y.grad.numpy()


@given(sizes=st.lists(st.integers(0, 13), min_size=1, max_size=6), k=st.integers(2, 4), dim=st.integers(0, 1),
       branch=st.booleans())
@settings(max_examples=25, deadline=None)
def test_chunk_of_any_size_matches_eager_and_the_torch_rule(sizes, k, dim, branch):
    f = _pieces_program(k, dim, branch)
    g = tg.compile(f, dynamic=True)
    rng = np.random.default_rng(len(sizes))
    for n in sizes:
        xv = rng.standard_normal((n, 3) if dim == 0 else (3, n))
        assert [p.shape[dim] for p in tg.tensor(xv).chunk(k, dim=dim)] == _torch_chunk_sizes(n, k)
        a, b, ga, gb = _run(g, f, xv)
        assert np.isclose(a, b) and np.isclose(b, _oracle(xv, k, dim, branch))
        np.testing.assert_allclose(ga, gb, rtol=1e-12, atol=1e-12)


@given(mults=st.lists(st.integers(2, 9), min_size=2, max_size=6), k=st.integers(2, 4), dim=st.integers(0, 1),
       branch=st.booleans(), dynamic=st.sampled_from([True, None]))
@settings(max_examples=20, deadline=None)
def test_chunk_of_multiples_traces_once(mults, k, dim, branch, dynamic):
    """Sizes that are multiples k*m (m >= 2) stay on one side of every guard (B % k == 0, the piece
    count): one trace with dynamic=True, at most two (static, then symbolic) by default."""
    f = _pieces_program(k, dim, branch)
    g = tg.compile(f, dynamic=dynamic)
    rng = np.random.default_rng(k)
    for m in mults:
        xv = rng.standard_normal((k * m, 2) if dim == 0 else (2, k * m))
        a, b, ga, gb = _run(g, f, xv)
        assert np.isclose(a, b) and np.isclose(b, _oracle(xv, k, dim, branch))
        np.testing.assert_allclose(ga, gb, rtol=1e-12, atol=1e-12)
    assert g.stats()["traces"] <= (1 if dynamic else 2), g.stats()["retrace_reasons"]


def test_the_repro_traces_twice_for_even_and_odd_sizes():
    def f(x):
        if x.shape[0] % 2 == 0:
            a, b = x.chunk(2, dim=0)
            return (a * b).sum()
        return x.sum()
    g = tg.compile(f, dynamic=True)
    # sum over rows i < n/2 of row_i * row_{i+n/2}, rows of arange: the literal totals of torch
    expect = {4: 145.0, 6: 528.0, 8: 1298.0, 10: 2590.0, 3: 36.0, 12: 4539.0}
    for n, want in expect.items():
        assert float(g(tg.tensor(np.arange(n * 3, dtype=np.float32).reshape(n, 3)))) == want
    assert g.stats()["traces"] == 2
    assert g.stats()["retrace_reasons"] == ["guard B % 2 == 0 failed (B = 3, B_div2 = 1)"]


def test_view_by_a_divisor_of_a_symbolic_size():
    def f(x):
        return (x.view(2, -1) * tg.tensor([[1.0], [2.0]])).sum(1)
    g = tg.compile(f, dynamic=True)
    for n in (4, 6, 10, 8):
        xv = np.arange(n * 3, dtype=np.float64).reshape(n, 3)
        want = xv.reshape(2, -1).sum(1) * [1, 2]
        np.testing.assert_allclose(g(tg.tensor(xv)).numpy(), want)
    assert g.stats()["traces"] == 1, g.stats()["retrace_reasons"]



@settings(max_examples=10, deadline=None)
@given(st.sampled_from([6, 17]), st.lists(st.tuples(st.integers(0, 4), st.integers(0, 4), st.integers(0, 3)),
                                          min_size=1, max_size=3))
def test_reshape_by_a_literal_returned_as_is_for_every_size(k, more):
    """x (B, T, S) as (-1, k), returned (its gradient is the cotangent read back as (B, T, S) through
    the quotient symbol B_xS0_xT_divk): traced static, then symbolic at an empty size (B*S0*T % k
    == 0 by the hint 0), then sizes whose product k divides; values and gradients as eager's, no
    failed symbolic compile (it was NotAffine: a row-major layout that grouped with nothing)."""
    def f(x):
        return x.reshape(-1, k)
    g = tg.compile(f)
    for b, t, s in [(2, 3, k), (5, 0, 2 * k + 1)] + [(b, t, k * m) for b, t, m in more]:
        xv = np.random.default_rng(b * 100 + t * 10 + s).standard_normal((b, t, s))
        got_x, want_x = tg.tensor(xv, requires_grad=True), tg.tensor(xv, requires_grad=True)
        got, want = g(got_x), f(want_x)
        np.testing.assert_array_equal(got.detach().numpy(), want.detach().numpy())
        w = tg.arange(float(k))
        (got * w).sum().backward()
        (want * w).sum().backward()
        np.testing.assert_array_equal(got_x.grad.numpy(), want_x.grad.numpy())
    assert g.stats()["symbolic_failures"] == []
