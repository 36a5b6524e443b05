"""Issue 27's everyday names, math: ceil, trunc, fix, frac, asin, acos, atan, atan2, sinh, cosh, the
bitwise and logical operations and their operators, and the in-place forms. Oracles: NumPy float64,
tg.gradcheck (central differences in float64) eager and compiled, compiled == eager."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tracegrad as tg

R = np.random.default_rng(27)
X = R.uniform(-3, 3, (4, 5))
X[0, :4] = [-2.5, -0.5, 0.5, 2.0]            # halves and whole numbers: the rounding edges
XG = X.copy()
XG[0, :4] = [-2.3, -0.4, 0.6, 2.1]            # central differences away from frac's jumps
U = R.uniform(-0.9, 0.9, (4, 5))              # inside asin/acos's domain
Y = R.uniform(-2, 2, (4, 5))

# (name, tracegrad function of (x, u, y), NumPy float64 value of (X, U, Y), differentiable)
CASES = [
    ("ceil", lambda x, u, y: x.ceil(), lambda x, u, y: np.ceil(x), False),
    ("trunc", lambda x, u, y: tg.trunc(x), lambda x, u, y: np.trunc(x), False),
    ("fix", lambda x, u, y: x.fix(), lambda x, u, y: np.trunc(x), False),
    ("frac", lambda x, u, y: tg.frac(x) * y, lambda x, u, y: (x - np.trunc(x)) * y, True),
    ("asin", lambda x, u, y: tg.asin(u), lambda x, u, y: np.arcsin(u), True),
    ("acos", lambda x, u, y: u.acos() * y, lambda x, u, y: np.arccos(u) * y, True),
    ("atan", lambda x, u, y: tg.arctan(x), lambda x, u, y: np.arctan(x), True),
    ("atan2", lambda x, u, y: tg.atan2(x, y), lambda x, u, y: np.arctan2(x, y), True),
    ("atan2_broadcast", lambda x, u, y: x.atan2(y[:1]), lambda x, u, y: np.arctan2(x, y[:1]), True),
    ("sinh", lambda x, u, y: x.sinh(), lambda x, u, y: np.sinh(x), True),
    ("cosh", lambda x, u, y: tg.cosh(x) + x.sinh().cosh(), lambda x, u, y: np.cosh(x) + np.cosh(np.sinh(x)), True),
]


@pytest.mark.parametrize("name,fn,want,grads", CASES, ids=[c[0] for c in CASES])
def test_values_gradients_and_compiled(name, fn, want, grads):
    args = [tg.tensor(a, requires_grad=grads) for a in (X, U, Y)]
    got = fn(*args)
    np.testing.assert_allclose(got.detach().numpy(), want(X, U, Y), rtol=1e-13, atol=1e-13)
    compiled = tg.compile(fn)
    np.testing.assert_allclose(compiled(*[a.detach() for a in args]).numpy(), got.detach().numpy(), rtol=1e-13)
    f32 = compiled(*[a.detach().float() for a in args])
    assert f32.dtype is tg.float32
    np.testing.assert_allclose(f32.numpy(), want(*[a.astype(np.float32) for a in (X, U, Y)]), rtol=2e-6, atol=2e-6)
    if grads:
        args[0] = tg.tensor(XG, requires_grad=True)
        assert tg.gradcheck(fn, args)
        assert tg.gradcheck(compiled, args)
    else:                                      # piecewise constant: a zero gradient, as PyTorch
        x = tg.tensor(X, requires_grad=True)
        fn(x, x, x).sum().backward()
        np.testing.assert_array_equal(x.grad.numpy(), np.zeros_like(X))


def test_rounding_of_integers_keeps_them():
    i = tg.tensor([-3, 0, 7])
    for name in ("ceil", "trunc", "floor"):
        out = getattr(i, name)()
        assert out.dtype is tg.int64 and out.tolist() == [-3, 0, 7]


def test_math_of_integers_promotes_to_float():
    out = tg.atan(tg.tensor([0, 1]))
    assert out.dtype is tg.float32
    np.testing.assert_allclose(out.numpy(), [0.0, np.pi / 4], rtol=1e-7)
    assert tg.atan2(tg.tensor([1]), tg.tensor([0])).dtype is tg.float32


def test_torch_literals():
    """torch 2.13: torch.tensor([-1.5, -0.5, 0.5, 1.5, 2.7]).ceil()/.trunc()/.frac(); asin(0.5), atan2."""
    x = tg.tensor([-1.5, -0.5, 0.5, 1.5, 2.7])
    assert x.ceil().tolist() == [-1.0, -0.0, 1.0, 2.0, 3.0]
    assert x.trunc().tolist() == [-1.0, -0.0, 0.0, 1.0, 2.0]
    np.testing.assert_allclose(x.frac().numpy(), [-0.5, -0.5, 0.5, 0.5, 0.7000000476837158], rtol=1e-7)
    np.testing.assert_allclose(tg.tensor(0.5).asin().item(), 0.5235987901687622, rtol=1e-7)
    np.testing.assert_allclose(tg.atan2(tg.tensor([1.0, -1.0]), tg.tensor([-1.0, -1.0])).numpy(),
                               [2.356194496154785, -2.356194496154785], rtol=1e-7)


INTS = st.lists(st.integers(-2 ** 31, 2 ** 31 - 1), min_size=1, max_size=12)


@settings(max_examples=30, deadline=None)
@given(INTS, INTS, st.sampled_from([np.int32, np.int64]))
def test_bitwise_against_numpy_eager_and_compiled(a, b, dtype):
    n = min(len(a), len(b))
    A, B = np.array(a[:n], dtype), np.array(b[:n], dtype)
    x, y = tg.from_numpy(A), tg.from_numpy(B)

    def f(x, y):
        return x & y, x | y, x ^ y, ~x, tg.bitwise_and(x, 3), 7 ^ y
    want = (A & B, A | B, A ^ B, ~A, A & 3, 7 ^ B)
    for g, c, w in zip(f(x, y), tg.compile(f)(x, y), want):
        assert g.dtype.name == np.dtype(dtype).name
        np.testing.assert_array_equal(g.numpy(), w)
        np.testing.assert_array_equal(c.numpy(), w)


def test_bitwise_of_small_ints_and_bools():
    a, b = np.array([5, -3, 127], np.int8), np.array([3, 6, -1], np.int8)
    x, y = tg.from_numpy(a), tg.from_numpy(b)
    np.testing.assert_array_equal((x ^ y).numpy(), a ^ b)
    np.testing.assert_array_equal(tg.compile(lambda x, y: x & y)(x, y).numpy(), a & b)
    p, q = tg.tensor([True, True, False, False]), tg.tensor([True, False, True, False])
    assert (p ^ q).tolist() == [False, True, True, False]
    assert tg.bitwise_not(p).tolist() == [False, False, True, True]
    assert tg.compile(lambda p, q: (p & q, p | q, p ^ q, ~p))(p, q)[2].tolist() == [False, True, True, False]
    with pytest.raises(TypeError, match="integer and bool"):
        tg.tensor([1.0]) & tg.tensor([2.0])


def test_logical_forms_treat_nonzero_as_true():
    a, b = tg.tensor([0, 2, -1, 0]), tg.tensor([0.0, 0.0, 3.0, 1.5])
    assert tg.logical_xor(a, b).tolist() == [False, True, False, True]
    assert a.logical_and(b).tolist() == [False, False, True, False]
    assert a.logical_or(b).tolist() == [False, True, True, True]
    assert a.logical_not().tolist() == [True, False, False, True]


@pytest.mark.parametrize("name", "sqrt abs log sin cos tanh sigmoid floor ceil round trunc frac sign reciprocal "
                                 "square rsqrt log1p expm1 asin acos atan sinh cosh".split())
def test_inplace_forms_write_their_value(name):
    v = np.abs(U) + 0.05
    x = tg.tensor(v)
    out = getattr(x, name + "_")()
    assert out is x and x._version == 1
    np.testing.assert_allclose(x.numpy(), getattr(tg.tensor(v), name)().numpy(), rtol=1e-15)

    def f(t):
        getattr(t, name + "_")()
        return t * 2
    np.testing.assert_allclose(tg.compile(f)(tg.tensor(v)).numpy(), 2 * x.numpy(), rtol=1e-13)


def test_inplace_binary_forms_and_autograd():
    x = tg.tensor(X, requires_grad=True)
    y = x * 1.0
    y.atan2_(tg.tensor(Y))
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), Y / (X * X + Y * Y), rtol=1e-12)
    i = tg.tensor([12, 10])
    i.bitwise_and_(tg.tensor([10, 6]))
    assert i.tolist() == [8, 2]
    with pytest.raises(RuntimeError, match="leaf Variable"):
        tg.tensor([1.0], requires_grad=True).sin_()


@pytest.mark.parametrize("fn", [lambda t: t.asin(), lambda t: t.acos(), lambda t: t.atan(), lambda t: t.sinh(),
                                lambda t: t.cosh(), lambda t: tg.atan2(t, t * t + 1.0), lambda t: t.frac(),
                                lambda t: t.reshape(4, 5).diagonal(1)],
                         ids=["asin", "acos", "atan", "sinh", "cosh", "atan2", "frac", "diagonal"])
def test_forward_mode_and_second_derivatives(fn):
    """tg.jvp against central differences, and a second derivative through create_graph."""
    u, t = tg.tensor(U.reshape(-1) * 0.9), tg.tensor(R.standard_normal(20))
    out, tangent = tg.jvp(fn, (u,), (t,))
    eps = 1e-6
    fd = (fn(u + eps * t).numpy() - fn(u - eps * t).numpy()) / (2 * eps)
    np.testing.assert_allclose(tangent.numpy(), fd, rtol=1e-6, atol=1e-8)
    x = tg.tensor(U.reshape(-1) * 0.9, requires_grad=True)
    assert tg.gradcheck(lambda v: tg.grad(fn(v).sum(), v, create_graph=True)[0], (x,))


def test_rounding_fuses_in_compiled_code():
    """floor, ceil and trunc lower to one instruction each (LLVM's intrinsics), fused with their
    neighbours; signed zeros, infinities, NaN and values past 2**23 as NumPy's."""
    v = np.array([-np.inf, -2.5, -0.5, -0.0, 0.0, 0.3, 2.5, np.inf, np.nan, 1e30, -8388609.5, 4503599627370497.0])
    for dtype in (np.float32, np.float64):
        x = tg.from_numpy(v.astype(dtype))
        f = tg.compile(lambda t: (t.floor(), t.ceil(), t.trunc() * 2, tg.fix(t)))
        assert "[host]" not in f.ir(x, stage="kernels") and f.stats()["kernels"] == 1
        for got, want in zip(f(x), (np.floor, np.ceil, lambda a: np.trunc(a) * 2, np.trunc)):
            np.testing.assert_array_equal(got.numpy(), want(v.astype(dtype)))
            np.testing.assert_array_equal(np.signbit(got.numpy()), np.signbit(want(v.astype(dtype))))
