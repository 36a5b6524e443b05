"""More of PyTorch's names (composites/): F.silu, leaky_relu, elu, softplus, normalize,
cosine_similarity, smooth_l1_loss, huber_loss, kl_div; nn.SiLU, LeakyReLU, ELU, Softplus;
flip, roll, repeat, index_select, tril, triu as methods and tg functions. Oracles: NumPy float64
formulas (PyTorch's definitions), central differences in float64 (tg.gradcheck), and compiled ==
eager. (All were also compared with torch 2.13 to 1e-10, values and gradients, when written.)"""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tracegrad as tg
import tracegrad.nn.functional as F

R = np.random.default_rng(0)
X = R.standard_normal((5, 7)) * 3
X[1, 1] = 0.0
Y = R.standard_normal((5, 7))
XG = X.copy()
XG[1, 1] = 0.3          # central differences away from the kinks at 0 (X checks the values there)
P = R.random((5, 7))
P[0, 0] = 0.0


def _np_softplus(v):
    return np.logaddexp(0.0, v)


def _norm(v, p, axis):
    return (np.abs(v) ** p).sum(axis, keepdims=True) ** (1.0 / p)


def _kl_rows(logq, p):
    return np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0) - p * logq


def _log_softmax(v):
    m = v.max(1, keepdims=True)
    return v - m - np.log(np.exp(v - m).sum(1, keepdims=True))


# (name, tracegrad function of (x, y), NumPy float64 value of (X, Y))
CASES = [
    ("silu", lambda x, y: F.silu(x), lambda x, y: x / (1 + np.exp(-x))),
    ("leaky_relu", lambda x, y: F.leaky_relu(x, 0.2), lambda x, y: np.where(x > 0, x, 0.2 * x)),
    ("elu", lambda x, y: F.elu(x, 1.5), lambda x, y: np.where(x > 0, x, 1.5 * np.expm1(x))),
    ("softplus", lambda x, y: F.softplus(x, 2.0, 5.0),
     lambda x, y: np.where(2 * x > 5, x, _np_softplus(2 * x) / 2)),
    ("softplus_large", lambda x, y: F.softplus(x * 300), lambda x, y: np.where(300 * x > 20, 300 * x, _np_softplus(300 * x))),
    ("normalize", lambda x, y: F.normalize(x, p=2.0, dim=1), lambda x, y: x / np.maximum(_norm(x, 2, 1), 1e-12)),
    ("normalize_p1", lambda x, y: F.normalize(x, p=1, dim=0), lambda x, y: x / np.maximum(_norm(x, 1, 0), 1e-12)),
    ("cosine_similarity", lambda x, y: F.cosine_similarity(x, y, dim=1),
     lambda x, y: (x * y).sum(1) / np.maximum(_norm(x, 2, 1), 1e-8)[:, 0] / np.maximum(_norm(y, 2, 1), 1e-8)[:, 0]),
    ("cosine_broadcast", lambda x, y: F.cosine_similarity(x, y[:1], dim=0),
     lambda x, y: (x * y[:1]).sum(0) / _norm(x, 2, 0)[0] / _norm(np.broadcast_to(y[:1], x.shape), 2, 0)[0]),
    ("smooth_l1", lambda x, y: F.smooth_l1_loss(x, y, beta=0.5),
     lambda x, y: np.where(np.abs(x - y) < 0.5, (x - y) ** 2 / 1.0, np.abs(x - y) - 0.25).mean()),
    ("smooth_l1_none", lambda x, y: F.smooth_l1_loss(x, y, reduction="none"),
     lambda x, y: np.where(np.abs(x - y) < 1, 0.5 * (x - y) ** 2, np.abs(x - y) - 0.5)),
    ("smooth_l1_beta0", lambda x, y: F.smooth_l1_loss(x, y, beta=0.0), lambda x, y: np.abs(x - y).mean()),
    ("huber", lambda x, y: F.huber_loss(x, y, delta=0.7),
     lambda x, y: np.where(np.abs(x - y) < 0.7, 0.5 * (x - y) ** 2, 0.7 * (np.abs(x - y) - 0.35)).mean()),
    ("kl_batchmean", lambda x, y: F.kl_div(F.log_softmax(x, dim=1), tg.tensor(P), reduction="batchmean"),
     lambda x, y: _kl_rows(_log_softmax(x), P).sum() / 5),
    ("kl_log_target", lambda x, y: F.kl_div(F.log_softmax(x, dim=1), F.log_softmax(y, dim=1), reduction="sum",
                                            log_target=True),
     lambda x, y: (np.exp(_log_softmax(y)) * (_log_softmax(y) - _log_softmax(x))).sum()),
    ("kl_mean", lambda x, y: F.kl_div(x, tg.tensor(P)), lambda x, y: _kl_rows(x, P).mean()),
    ("flip", lambda x, y: x.flip(0, 1) * y, lambda x, y: x[::-1, ::-1] * y),
    ("tg.flip", lambda x, y: tg.flip(x, [1]), lambda x, y: x[:, ::-1]),
    ("roll", lambda x, y: x.roll((2, -1), (0, 1)) * y, lambda x, y: np.roll(x, (2, -1), (0, 1)) * y),
    ("roll_flat", lambda x, y: x.roll(3), lambda x, y: np.roll(x, 3)),
    ("repeat", lambda x, y: x.repeat(2, 1, 3), lambda x, y: np.tile(x, (2, 1, 3))),
    ("index_select", lambda x, y: x.index_select(1, tg.tensor([3, 0, 3])), lambda x, y: x[:, [3, 0, 3]]),
    ("tril", lambda x, y: x.tril(-1), lambda x, y: np.tril(x, -1)),
    ("triu", lambda x, y: tg.triu(x, 2), lambda x, y: np.triu(x, 2)),
]


@pytest.mark.parametrize("name,fn,want", CASES, ids=[c[0] for c in CASES])
def test_values_gradients_and_compiled(name, fn, want):
    x, y = tg.tensor(X, requires_grad=True), tg.tensor(Y, requires_grad=True)
    got = fn(x, y)
    np.testing.assert_allclose(got.detach().numpy(), want(X, Y), rtol=1e-12, atol=1e-12)
    assert tg.gradcheck(fn, (tg.tensor(XG, requires_grad=True), y))
    compiled = tg.compile(fn)(x.detach(), y.detach())
    np.testing.assert_allclose(compiled.numpy(), got.detach().numpy(), rtol=1e-12, atol=1e-12)


def test_modules_call_their_functions():
    x = tg.tensor(X)
    np.testing.assert_allclose(tg.nn.SiLU()(x).numpy(), F.silu(x).numpy())
    np.testing.assert_allclose(tg.nn.LeakyReLU(0.3)(x).numpy(), np.where(X > 0, X, 0.3 * X))
    np.testing.assert_allclose(tg.nn.ELU(2.0)(x).numpy(), np.where(X > 0, X, 2 * np.expm1(X)))
    np.testing.assert_allclose(tg.nn.Softplus(beta=3.0)(x).numpy(), np.where(3 * X > 20, X, _np_softplus(3 * X) / 3))


def test_inplace_activations_update_their_input():
    for f, want in [(lambda t: F.silu(t, inplace=True), X / (1 + np.exp(-X))),
                    (lambda t: tg.nn.LeakyReLU(0.1, inplace=True)(t), np.where(X > 0, X, 0.1 * X)),
                    (lambda t: F.elu(t, inplace=True), np.where(X > 0, X, np.expm1(X)))]:
        x = tg.tensor(X)
        out = f(x)
        assert out is x
        np.testing.assert_allclose(x.numpy(), want, rtol=1e-12)


def test_integer_and_bool_tensors_keep_their_dtype():
    a = tg.tensor(np.arange(12).reshape(3, 4))
    b = a > 5
    assert a.tril().dtype == tg.int64 and (a.tril().numpy() == np.tril(np.arange(12).reshape(3, 4))).all()
    assert (b.flip(1).numpy() == (np.arange(12).reshape(3, 4) > 5)[:, ::-1]).all() and b.flip(1).dtype == tg.bool
    assert (a.repeat(2, 2).numpy() == np.tile(np.arange(12).reshape(3, 4), (2, 2))).all()
    assert (a.roll(1, 0).numpy() == np.roll(np.arange(12).reshape(3, 4), 1, 0)).all()
    one = tg.tensor(np.array([[True]]))             # nothing to move: a copy, still bool
    assert one.flip(0).dtype == tg.bool and one.roll(1, 0).dtype == tg.bool and one.flip(0) is not one


def test_bad_arguments_raise_clearly():
    x = tg.tensor(X)
    with pytest.raises(Exception, match="index must be a 1-D int64 or int32 tensor"):
        x.index_select(0, tg.tensor([0.0, 1.0]))
    with pytest.raises(RuntimeError, match="repeat dims can not be smaller"):
        x.repeat(2)
    with pytest.raises(RuntimeError, match="shifts and dimensions must align"):
        x.roll((1, 2), 0)
    with pytest.raises(RuntimeError, match="at least 2 dimensions"):
        tg.tensor(np.ones(3)).tril()


@settings(max_examples=25, deadline=None)
@given(shape=st.lists(st.integers(1, 5), min_size=1, max_size=3), data=st.data())
def test_rearrangements_match_numpy_on_any_shape(shape, data):
    a = np.random.default_rng(len(shape)).standard_normal(shape)
    x = tg.tensor(a)
    nd = len(shape)
    dims = data.draw(st.lists(st.integers(0, nd - 1), min_size=1, max_size=nd, unique=True))
    np.testing.assert_array_equal(x.flip(dims).numpy(), np.flip(a, dims))
    shifts = data.draw(st.lists(st.integers(-7, 7), min_size=len(dims), max_size=len(dims)))
    np.testing.assert_array_equal(x.roll(tuple(shifts), tuple(dims)).numpy(), np.roll(a, shifts, dims))
    reps = data.draw(st.lists(st.integers(1, 3), min_size=nd, max_size=nd + 1))
    np.testing.assert_array_equal(x.repeat(*reps).numpy(), np.tile(a, reps))
    d = dims[0]
    idx = data.draw(st.lists(st.integers(0, shape[d] - 1), min_size=1, max_size=4))
    np.testing.assert_array_equal(x.index_select(d, tg.tensor(idx)).numpy(), np.take(a, idx, d))
    f = tg.compile(lambda t: (t.flip(dims).roll(tuple(shifts), tuple(dims)) * 2).repeat(*reps))
    np.testing.assert_array_equal(f(x).numpy(), np.tile(np.roll(np.flip(a, dims), shifts, dims) * 2, reps))


SMALL = [8.17e-10, 1e-8, -1e-8, 1e-20, 0.0, -0.0, 0.3, -0.7, 5.0, 1e-3, -50.0, 80.0]
SPECIAL = [-1.0, np.inf, -np.inf, np.nan, -2.0, 800.0, -800.0]


@pytest.mark.parametrize("dtype,rtol", [(np.float64, 4e-16), (np.float32, 2.4e-7)])
@pytest.mark.parametrize("name", ["log1p", "expm1"])
def test_log1p_expm1_keep_the_digits_of_small_arguments(name, dtype, rtol):
    # log(1 + x) and exp(x) - 1 kept only the digits of x above 1's last bit: log1p(8.2e-10) was
    # 1.2e-7 off in float64, log1p(1e-8) was 0 in float32
    v = np.array(SMALL + SPECIAL, dtype=dtype)
    with np.errstate(all="ignore"):
        want = getattr(np, name)(v)
    f = lambda t: getattr(t, name)()     # noqa: E731
    for got in (f(tg.tensor(v)).numpy(), tg.compile(f)(tg.tensor(v)).numpy(), getattr(tg, name)(tg.tensor(v)).numpy()):
        fin = np.isfinite(want) & (want != 0)
        np.testing.assert_allclose(got[fin], want[fin], rtol=rtol, atol=0)
        np.testing.assert_array_equal(got[~fin], want[~fin])                 # inf, nan, -1 where NumPy's
        np.testing.assert_array_equal(np.signbit(got[want == 0]), np.signbit(want[want == 0]))     # -0.0


def test_log1p_expm1_gradients():
    v = np.array([1e-9, 0.5, -0.5, 3.0])
    for name, d in [("log1p", 1 / (1 + v)), ("expm1", np.exp(v))]:
        x = tg.tensor(v, requires_grad=True)
        getattr(x, name)().sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), d, rtol=1e-15)
        assert tg.gradcheck(lambda t: getattr(t, name)(), (tg.tensor(v, requires_grad=True),))


EINSUMS = [("ij,jk->ik", [(3, 4), (4, 5)]), ("ij,jk", [(3, 4), (4, 5)]), ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
           ("bhqd,bhkd->bhqk", [(2, 3, 5, 4), (2, 3, 6, 4)]), ("i,i->", [(5,), (5,)]), ("i,j->ij", [(3,), (4,)]),
           ("ij->ji", [(3, 4)]), ("ij->", [(3, 4)]), ("ij->j", [(3, 4)]),
           ("...ij,...jk->...ik", [(2, 1, 3, 4), (5, 4, 2)]), ("ijk,ikl,lm->jm", [(2, 3, 4), (2, 4, 5), (5, 6)]),
           ("bn,anm,bm->ba", [(2, 3), (4, 3, 5), (2, 5)]), ("ij,ij->ij", [(3, 4), (3, 4)]), ("i,i", [(4,), (4,)]),
           ("ij, kj -> ik", [(3, 4), (5, 4)])]


@pytest.mark.parametrize("equation,shapes", EINSUMS, ids=[e for e, _ in EINSUMS])
def test_einsum_against_numpy(equation, shapes):
    arrays = [np.random.default_rng(k).standard_normal(s) for k, s in enumerate(shapes)]
    ts = [tg.tensor(a, requires_grad=True) for a in arrays]
    want = np.einsum(equation.replace(" ", ""), *arrays)
    got = tg.einsum(equation, *ts)
    assert got.shape == want.shape
    np.testing.assert_allclose(got.detach().numpy(), want, rtol=1e-12, atol=1e-12)
    assert tg.gradcheck(lambda *t: tg.einsum(equation, *t), ts)
    compiled = tg.compile(lambda *t: tg.einsum(equation, *t))(*[t.detach() for t in ts])
    np.testing.assert_allclose(compiled.numpy(), want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(tg.einsum(equation, ts).detach().numpy(), want, rtol=1e-12)     # a list, as torch


def test_einsum_refuses_clearly():
    x = tg.tensor(np.ones((3, 3)))
    with pytest.raises(ValueError, match="repeated subscripts"):
        tg.einsum("ii->i", x)
    with pytest.raises(ValueError, match="do not match an operand of shape"):
        tg.einsum("ijk->i", x)
    with pytest.raises(ValueError, match="has 2 operands, 1 were given"):
        tg.einsum("ij,jk->ik", x)
    with pytest.raises(ValueError, match="must be distinct and appear in an input"):
        tg.einsum("ij->iz", x)


M = R.random((5, 7)) > 0.5
MORE = [
    ("masked_fill", lambda x, y: x.masked_fill(tg.tensor(M), -1.5) * y, lambda x, y: np.where(M, -1.5, x) * y),
    ("masked_fill_row", lambda x, y: tg.masked_fill(x, tg.tensor(M[0]), 2.0), lambda x, y: np.where(M[0], 2.0, x)),
    ("unbind", lambda x, y: x.unbind(1)[2] * 3, lambda x, y: x[:, 2] * 3),
    ("narrow", lambda x, y: x.narrow(1, 1, 2) * y[:, :2], lambda x, y: x[:, 1:3] * y[:, :2]),
    ("outer", lambda x, y: x[0].outer(y[1]), lambda x, y: np.outer(x[0], y[1])),
    ("lerp", lambda x, y: x.lerp(y, y.sigmoid()), lambda x, y: x + (y - x) / (1 + np.exp(-y))),
    ("addmm", lambda x, y: tg.addmm(y[:, :5], x, y.T[:, :5], beta=0.5, alpha=2.0),
     lambda x, y: 0.5 * y[:, :5] + 2 * x @ y.T[:, :5]),
    ("repeat_interleave", lambda x, y: x.repeat_interleave(2, dim=1), lambda x, y: np.repeat(x, 2, 1)),
    ("repeat_interleave_flat", lambda x, y: x.repeat_interleave(3), lambda x, y: np.repeat(x.reshape(-1), 3)),
]


@pytest.mark.parametrize("name,fn,want", MORE, ids=[c[0] for c in MORE])
def test_masks_pieces_and_small_products(name, fn, want):
    test_values_gradients_and_compiled(name, fn, want)


def test_masked_fill_in_place_and_its_errors():
    x = tg.tensor(X)
    assert x.masked_fill_(tg.tensor(M), 0.0) is x
    np.testing.assert_array_equal(x.numpy(), np.where(M, 0.0, X))
    with pytest.raises(Exception, match="boolean masks"):
        x.masked_fill(tg.tensor(M.astype(np.int64)), 1.0)
    with pytest.raises(RuntimeError, match="must broadcast to the tensor's shape"):
        x[0].masked_fill(tg.tensor(M), 1.0)
    with pytest.raises(NotImplementedError, match="per-element repeats"):
        x.repeat_interleave(tg.tensor([1, 2, 1, 1, 1]), dim=0)
