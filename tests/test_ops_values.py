"""Values of every operation of SPEC §2 against NumPy computed independently, and dtype promotion (§1).

The oracle is always NumPy (or `math` for erf) applied to the same input arrays; tracegrad results
are compared in value, shape and dtype.
"""
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra import numpy as hnp

import tracegrad as tg
import tracegrad.nn.functional as F

pytestmark = pytest.mark.filterwarnings("ignore::tracegrad.BroadcastWarning")

SETTINGS = settings(max_examples=25, deadline=None)
NP = {tg.float16: np.float16, tg.float32: np.float32, tg.float64: np.float64, tg.int32: np.int32,
      tg.int64: np.int64, tg.bool: np.bool_}


def rnd(shape, seed=0, dtype=np.float64, low=-2.0, high=2.0):
    return np.random.default_rng(seed).uniform(low, high, shape).astype(dtype)


def T(a, **kw):
    return tg.tensor(np.asarray(a), **kw)


def val(t):
    assert isinstance(t, tg.Tensor), type(t)
    return t.detach().numpy()


def check(t, expected, rtol=1e-6, atol=1e-7, dtype=None):
    """Value, shape and (given or NumPy's) dtype of tensor `t` against the NumPy array `expected`."""
    expected = np.asarray(expected)
    got = val(t)
    assert got.shape == expected.shape, (got.shape, expected.shape)
    if dtype is not None:
        assert t.dtype == dtype, (t.dtype, dtype)
        assert got.dtype == NP[dtype]
    else:
        assert got.dtype == expected.dtype, (got.dtype, expected.dtype)
    if expected.dtype.kind in "biu":
        np.testing.assert_array_equal(got, expected)
    else:
        np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol, equal_nan=True)


def pair_shapes(max_dims=4):
    return hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=max_dims, min_side=1, max_side=4)


# ------------------------------------------------------------------ arithmetic, broadcasting

BINARY = {
    "add": (lambda a, b: a + b, np.add),
    "sub": (lambda a, b: a - b, np.subtract),
    "mul": (lambda a, b: a * b, np.multiply),
    "div": (lambda a, b: a / b, np.divide),
    "maximum": (tg.maximum, np.maximum),
    "minimum": (tg.minimum, np.minimum),
}


@pytest.mark.parametrize("name", list(BINARY))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@SETTINGS
@given(shapes=pair_shapes(), seed=st.integers(0, 2**16))
def test_binary_broadcast(name, dtype, shapes, seed):
    (sa, sb), out_shape = shapes
    a, b = rnd(sa, seed, dtype), rnd(sb, seed + 1, dtype)
    if name == "div":
        b = np.where(np.abs(b) < 0.1, 0.5, b).astype(dtype)
    f, g = BINARY[name]
    r = f(T(a), T(b))
    assert r.shape == out_shape
    check(r, g(a, b), rtol=1e-6 if dtype == np.float32 else 1e-12)


@SETTINGS
@given(shapes=pair_shapes(3), seed=st.integers(0, 2**16))
def test_pow_broadcast(shapes, seed):
    (sa, sb), _ = shapes
    a, b = rnd(sa, seed, low=0.1, high=3.0), rnd(sb, seed + 1, low=-2, high=2)
    check(T(a) ** T(b), np.power(a, b), rtol=1e-12)


def test_pow_integer_and_scalar_exponents():
    a = rnd((3, 4), 1, np.float32)
    check(T(a) ** 2, a ** 2, dtype=tg.float32, rtol=1e-6)
    check(T(a) ** 3.0, a ** np.float32(3.0), dtype=tg.float32, rtol=1e-6)
    check(T(np.abs(a)) ** 0.5, np.sqrt(np.abs(a)), dtype=tg.float32, rtol=1e-6)
    check(T(np.array([1, 2, 3])) ** 2, np.array([1, 4, 9]), dtype=tg.int64)


def test_reflected_scalar_forms():
    a = rnd((2, 3), 2, np.float32)
    a = np.where(np.abs(a) < 0.1, 0.3, a).astype(np.float32)
    x = T(a)
    for got, exp in [(2.5 + x, 2.5 + a), (x + 2.5, a + 2.5), (2.5 - x, 2.5 - a), (x - 2.5, a - 2.5),
                     (2.5 * x, 2.5 * a), (x * 2, a * 2), (2.5 / x, np.float32(2.5) / a), (x / 4, a / 4),
                     (2.0 ** x, np.float32(2.0) ** a), (-x, -a), (3 - x, 3 - a)]:
        check(got, exp.astype(np.float32), dtype=tg.float32, rtol=1e-6)


def test_abs_clamp_where():
    a = rnd((4, 5), 3)
    x = T(a)
    check(x.abs(), np.abs(a))
    check(abs(x), np.abs(a))
    check(tg.abs(x), np.abs(a))
    check(x.clamp(-0.5, 0.7), np.clip(a, -0.5, 0.7))
    check(x.clamp(min=-0.5), np.maximum(a, -0.5))
    check(x.clamp(max=0.3), np.minimum(a, 0.3))
    check(tg.clamp(x, -1.0, 1.0), np.clip(a, -1.0, 1.0))
    lo, hi = rnd((5,), 4, low=-1, high=0), rnd((4, 1), 5, low=0, high=1)
    check(x.clamp(T(lo), T(hi)), np.minimum(np.maximum(a, lo), hi))
    b = rnd((5,), 6)
    check(tg.where(x > 0, x, T(b)), np.where(a > 0, a, b))
    check(tg.where(x > 0, x, 0.0), np.where(a > 0, a, 0.0))
    check(tg.where(x > 0, -1.0, x), np.where(a > 0, -1.0, a))
    check(tg.where(T(a[:, :1] > 0), T(b), x), np.where(a[:, :1] > 0, b, a))
    f = T(a.astype(np.float32))
    assert tg.where(f > 0, f, 0.0).dtype == tg.float32
    assert tg.where(f > 0, 1.0, 0.0).dtype == tg.float32
    ai = np.array([[1, -2], [3, -4]])
    check(T(ai).abs(), np.abs(ai))
    check(T(ai).clamp(-1, 2), np.clip(ai, -1, 2))


@pytest.mark.parametrize("op,npop", [("__lt__", np.less), ("__le__", np.less_equal), ("__gt__", np.greater),
                                     ("__ge__", np.greater_equal), ("__eq__", np.equal), ("__ne__", np.not_equal)])
@SETTINGS
@given(shapes=pair_shapes(3), seed=st.integers(0, 2**16))
def test_comparisons(op, npop, shapes, seed):
    (sa, sb), _ = shapes
    r = np.random.default_rng(seed)
    a, b = r.integers(-2, 3, sa).astype(np.float32), r.integers(-2, 3, sb).astype(np.float32)
    got = getattr(T(a), op)(T(b))
    check(got, npop(a, b), dtype=tg.bool)
    check(getattr(T(a), op)(1.0), npop(a, np.float32(1.0)), dtype=tg.bool)
    check(getattr(T(a.astype(np.int64)), op)(T(b)), npop(a, b), dtype=tg.bool)


def test_reflected_comparisons_and_logical():
    a = np.array([-1.0, 0.0, 2.0], np.float32)
    x = T(a)
    check(1.0 < x, a > 1.0, dtype=tg.bool)
    check(0.0 >= x, a <= 0.0, dtype=tg.bool)
    check((x > -0.5) & (x < 1.0), (a > -0.5) & (a < 1.0), dtype=tg.bool)
    check((x < -0.5) | (x > 1.0), (a < -0.5) | (a > 1.0), dtype=tg.bool)
    check(~(x > 0), ~(a > 0), dtype=tg.bool)


# ------------------------------------------------------------------ unary

_erf = np.vectorize(math.erf)

UNARY = {
    "exp": (np.exp, (-3, 3)),
    "log": (np.log, (0.05, 4)),
    "sqrt": (np.sqrt, (0.01, 4)),
    "rsqrt": (lambda a: 1 / np.sqrt(a), (0.05, 4)),
    "tanh": (np.tanh, (-3, 3)),
    "sigmoid": (lambda a: 1 / (1 + np.exp(-a)), (-6, 6)),
    "relu": (lambda a: np.maximum(a, 0), (-2, 2)),
    "sin": (np.sin, (-4, 4)),
    "cos": (np.cos, (-4, 4)),
    "abs": (np.abs, (-2, 2)),
    "sign": (np.sign, (-2, 2)),
    "neg": (np.negative, (-2, 2)),
    "reciprocal": (lambda a: 1 / a, (0.1, 3)),
    "square": (np.square, (-3, 3)),
}


@pytest.mark.parametrize("name", list(UNARY))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@SETTINGS
@given(shape=hnp.array_shapes(min_dims=0, max_dims=4, min_side=1, max_side=5), seed=st.integers(0, 2**16))
def test_unary(name, dtype, shape, seed):
    f, (lo, hi) = UNARY[name]
    a = rnd(shape, seed, dtype, lo, hi)
    exp = f(a.astype(np.float64)).astype(dtype)
    rtol = 2e-6 if dtype == np.float32 else 1e-12
    check(getattr(T(a), name)(), exp, rtol=rtol)
    check(getattr(tg, name)(T(a)), exp, rtol=rtol)


def test_unary_special_values():
    a = np.array([0.0, -1.0, np.inf, -np.inf, np.nan], np.float32)
    with np.errstate(all="ignore"):
        check(T(a).log(), np.log(a))
        check(T(a).sqrt(), np.sqrt(a))
        check(T(a).exp(), np.exp(a))
        check(T(a).sigmoid(), np.array([0.5, 1 / (1 + np.e), 1.0, 0.0, np.nan], np.float32), rtol=1e-6)
        check(T(a).tanh(), np.tanh(a))
        check(T(a).relu(), np.array([0, 0, np.inf, 0, np.nan], np.float32))
    big = np.array([-100.0, 100.0], np.float32)
    check(T(big).sigmoid(), np.array([np.exp(-100.0), 1.0], np.float32), rtol=1e-5, atol=0)


def test_unary_on_integers_promotes_to_float():
    a = np.array([1, 2, 3])
    check(T(a).exp(), np.exp(a).astype(np.float32), dtype=tg.float32, rtol=1e-6)
    check(T(a).sqrt(), np.sqrt(a).astype(np.float32), dtype=tg.float32, rtol=1e-6)
    check(-T(a), -a, dtype=tg.int64)
    check(T(a).relu(), a, dtype=tg.int64)


# ------------------------------------------------------------------ reductions

@st.composite
def shape_and_axis(draw, min_dims=1):
    shape = draw(hnp.array_shapes(min_dims=min_dims, max_dims=4, min_side=1, max_side=4))
    kind = draw(st.sampled_from(["none", "int", "neg", "tuple"]))
    n = len(shape)
    if kind == "none":
        axis = None
    elif kind == "int":
        axis = draw(st.integers(0, n - 1))
    elif kind == "neg":
        axis = draw(st.integers(-n, -1))
    else:
        axes = draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=n, unique=True))
        axis = tuple(a - n if draw(st.booleans()) else a for a in axes)
    return shape, axis, draw(st.booleans())


def _np_logsumexp(a, axis, keepdims):
    m = np.max(a, axis=axis, keepdims=True)
    out = np.log(np.sum(np.exp(a - m), axis=axis, keepdims=True)) + m
    return out if keepdims else np.squeeze(out, axis=axis if axis is not None else tuple(range(a.ndim)))


REDUCTIONS = {
    "sum": np.sum,
    "mean": np.mean,
    "amax": np.max,
    "amin": np.min,
    "prod": np.prod,
    "logsumexp": _np_logsumexp,
}


@pytest.mark.parametrize("name", list(REDUCTIONS))
@SETTINGS
@given(sak=shape_and_axis(), seed=st.integers(0, 2**16))
def test_reductions(name, sak, seed):
    shape, axis, keepdims = sak
    a = rnd(shape, seed, np.float64, 0.5, 1.5)
    exp = REDUCTIONS[name](a, axis=axis, keepdims=keepdims)
    check(getattr(T(a), name)(axis, keepdims), exp, rtol=1e-10)
    check(getattr(T(a), name)(axis=axis, keepdims=keepdims), exp, rtol=1e-10)
    check(getattr(tg, name)(T(a), axis=axis, keepdims=keepdims), exp, rtol=1e-10)
    if axis is not None:
        check(getattr(T(a), name)(dim=axis, keepdim=keepdims), exp, rtol=1e-10)
    f = a.astype(np.float32)
    check(getattr(T(f), name)(axis=axis, keepdims=keepdims),
          np.asarray(REDUCTIONS[name](a, axis=axis, keepdims=keepdims)).astype(np.float32), rtol=1e-5)


@SETTINGS
@given(sak=shape_and_axis(), seed=st.integers(0, 2**16))
def test_var_std_unbiased(sak, seed):
    shape, axis, keepdims = sak
    a = rnd(shape, seed)
    n = a.size if axis is None else math.prod(a.shape[i] for i in ((axis,) if isinstance(axis, int) else axis))
    with np.errstate(all="ignore"):
        exp = np.var(a, axis=axis, keepdims=keepdims, ddof=1) if n > 1 else \
            np.full(np.var(a, axis=axis, keepdims=keepdims).shape, np.nan)
    check(T(a).var(axis, keepdims=keepdims), exp, rtol=1e-10)          # unbiased by default, as PyTorch
    check(T(a).var(axis, keepdims=keepdims, unbiased=True), exp, rtol=1e-10)
    check(T(a).var(axis=axis, keepdims=keepdims, unbiased=False), np.var(a, axis=axis, keepdims=keepdims),
          rtol=1e-10, atol=1e-14)
    check(T(a).var(axis, keepdims=keepdims, correction=0), np.var(a, axis=axis, keepdims=keepdims),
          rtol=1e-10, atol=1e-14)
    check(T(a).std(axis=axis, keepdims=keepdims, unbiased=False), np.std(a, axis=axis, keepdims=keepdims),
          rtol=1e-10, atol=1e-14)
    check(T(a).std(axis=axis, keepdims=keepdims), np.sqrt(exp), rtol=1e-10, atol=1e-14)


def test_reduction_defaults_and_dtypes():
    a = rnd((3, 4), 7, np.float32)
    check(T(a).sum(), np.sum(a, dtype=np.float32), rtol=1e-6)
    assert T(a).sum().shape == () and T(a).max().shape == ()
    check(T(a).max(), np.max(a))
    check(T(a).max(1).values, np.max(a, 1))      # max(dim): (values, indices), as PyTorch
    check(T(a).max(1).indices, np.argmax(a, 1), dtype=tg.int64)
    check(T(a).min(dim=0)[0], np.min(a, 0))
    check(T(a).var(), np.var(a.astype(np.float64), ddof=1).astype(np.float32), rtol=1e-5)
    ai = np.arange(12).reshape(3, 4)
    check(T(ai).sum(0), ai.sum(0), dtype=tg.int64)
    check(T(ai.astype(np.int32)).sum(), np.array(ai.sum()), dtype=tg.int64)
    check((T(ai) > 4).sum(), np.array(7), dtype=tg.int64)
    check(T(ai).max(1).values, ai.max(1), dtype=tg.int64)
    check(T(ai).prod(1), ai.prod(1), dtype=tg.int64)
    with pytest.raises(RuntimeError):
        T(ai).mean()
    with pytest.raises(IndexError):
        T(a).sum(2)
    with pytest.raises(IndexError):
        T(a).max(axis=-3)


def test_logsumexp_is_stable():
    a = np.array([[1000.0, 1000.0], [-1000.0, -1001.0], [-np.inf, -np.inf], [np.inf, 1.0]])
    exp = np.array([1000.0 + np.log(2.0), -1000.0 + np.log1p(np.exp(-1.0)), -np.inf, np.inf])
    check(T(a).logsumexp(1), exp, rtol=1e-12)
    check(T(a.astype(np.float32)).logsumexp(dim=-1, keepdim=True), exp.astype(np.float32)[:, None], rtol=1e-6)


@SETTINGS
@given(shape=hnp.array_shapes(min_dims=1, max_dims=4, min_side=1, max_side=5), seed=st.integers(0, 2**16),
       keep=st.booleans(), data=st.data())
def test_argmax_argmin(shape, seed, keep, data):
    a = np.random.default_rng(seed).permutation(math.prod(shape)).reshape(shape).astype(np.float32)
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    check(T(a).argmax(axis, keep), np.argmax(a, axis, keepdims=keep), dtype=tg.int64)
    check(T(a).argmin(dim=axis, keepdim=keep), np.argmin(a, axis, keepdims=keep), dtype=tg.int64)
    check(tg.argmax(T(a)), np.array(np.argmax(a)), dtype=tg.int64)
    check(T(a).argmin(), np.array(np.argmin(a)), dtype=tg.int64)


def test_argmax_ties_take_the_first():
    a = np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 0.0]])
    check(T(a).argmax(1), np.array([1, 0]))
    check(T(a).argmin(0), np.array([0, 1, 1]))


# ------------------------------------------------------------------ shapes and views

def test_shape_ops():
    a = rnd((2, 3, 4), 8)
    x = T(a)
    check(x.reshape(4, 6), a.reshape(4, 6))
    check(x.reshape((-1, 2)), a.reshape(-1, 2))
    check(x.view(6, 4), a.reshape(6, 4))
    check(x.view(-1), a.reshape(-1))
    check(x.transpose(0, 2), a.transpose(2, 1, 0))
    check(x.transpose(-1, -2), np.swapaxes(a, -1, -2))
    check(x.permute(1, 2, 0), a.transpose(1, 2, 0))
    check(x.permute((2, 0, 1)), a.transpose(2, 0, 1))
    check(x.T, a.transpose(2, 1, 0))
    check(x.mT, np.swapaxes(a, -1, -2))
    check(x[:, :1].expand(2, 5, 3, 4) if False else x[:, :1].expand(2, 3, 4), np.broadcast_to(a[:, :1], (2, 3, 4)))
    check(x[:, :1].expand(5, -1, 3, -1), np.broadcast_to(a[:, :1], (5, 2, 3, 4)))
    check(x.broadcast_to((3, 2, 3, 4)), np.broadcast_to(a, (3, 2, 3, 4)))
    check(tg.broadcast_to(T(a[:, :1, :]), (2, 3, 4)), np.broadcast_to(a[:, :1, :], (2, 3, 4)))
    b = a.reshape(2, 1, 3, 1, 4)
    y = T(b)
    check(y.squeeze(), b.squeeze())
    check(y.squeeze(1), b.squeeze(1))
    check(y.squeeze(-2), b.squeeze(-2))
    check(y.squeeze(0), b)   # size 2: unchanged, as PyTorch
    check(x.unsqueeze(0), a[None])
    check(x.unsqueeze(-1), a[..., None])
    check(x.unsqueeze(2), a[:, :, None])
    check(x.flatten(), a.reshape(-1))
    check(x.flatten(1), a.reshape(2, 12))
    check(x.flatten(0, 1), a.reshape(6, 4))
    t = x.transpose(0, 1)
    assert not t.is_contiguous()
    c = t.contiguous()
    assert c.is_contiguous()
    check(c, a.transpose(1, 0, 2))
    assert x.contiguous() is x
    with pytest.raises(RuntimeError, match="reshape"):
        t.view(-1)
    check(t.reshape(-1), a.transpose(1, 0, 2).reshape(-1))
    with pytest.raises(IndexError):
        x.transpose(0, 3)


def test_views_share_memory():
    base = tg.zeros(3, 4)
    base.transpose(0, 1)[2, 1] = 5.0
    base[:, ::2][0, 1] = 7.0
    base.reshape(12)[11] = 1.0
    exp = np.zeros((3, 4), np.float32)
    exp[1, 2], exp[0, 2], exp[2, 3] = 5.0, 7.0, 1.0
    check(base, exp)
    t = base.permute(1, 0)
    assert t.data_ptr() == base.data_ptr() and t.stride() == (1, 4)
    s = base[1:, 1::2]
    assert s.storage_offset() == 5 and s.stride() == (4, 2)


@pytest.mark.parametrize("axis", [0, 1, 2, -1, -3])
def test_cat_stack(axis):
    a, b, c = rnd((2, 3, 4), 1), rnd((2, 3, 4), 2), rnd((2, 3, 4), 3)
    check(tg.cat([T(a), T(b), T(c)], axis), np.concatenate([a, b, c], axis))
    check(tg.cat((T(a), T(b)), dim=axis), np.concatenate([a, b], axis))
    check(tg.stack([T(a), T(b), T(c)], axis), np.stack([a, b, c], axis))
    check(tg.stack([T(a), T(b)], dim=axis - 1 if axis < 0 else axis), np.stack([a, b], axis - 1 if axis < 0 else axis))


def test_cat_uneven_sizes_and_promotion():
    a, b = rnd((2, 3), 1, np.float32), rnd((5, 3), 2, np.float64)
    check(tg.cat([T(a), T(b)]), np.concatenate([a.astype(np.float64), b]), dtype=tg.float64)
    check(tg.cat([T(a.T), T(b.T)], 1), np.concatenate([a.T, b.T], 1).astype(np.float64))
    with pytest.raises(RuntimeError):
        tg.cat([T(a), T(b[:, :2])])
    with pytest.raises(RuntimeError):
        tg.stack([T(a), T(a[:1])])


# ------------------------------------------------------------------ indexing

def test_basic_indexing():
    a = rnd((5, 6, 7), 9)
    x = T(a)
    for idx in [1, -1, (2, 3), (1, -2, 4), slice(1, 4), (slice(None), 0), (slice(None, None, 2), slice(1, 6, 3)),
                (Ellipsis, None), (None, 1), (Ellipsis, 2), (slice(1, None, 2), Ellipsis, slice(None, None, 3)),
                (0, None, slice(2, 5), None), (slice(-3, None), -1), slice(10, 20), (slice(4, 1),)]:
        check(x[idx], a[idx])
    check(x[2, 3, 4], a[2, 3, 4])
    assert x[2, 3, 4].shape == ()
    with pytest.raises(IndexError):
        x[5]
    with pytest.raises(IndexError):
        x[0, 0, 0, 0]


def test_integer_tensor_indexing():
    a = rnd((5, 6, 7), 10)
    x = T(a)
    i = np.array([0, 4, 4, -1, 2])
    j = np.array([[1, 5], [0, 0]])
    check(x[T(i)], a[i])
    check(x[[0, 2]], a[[0, 2]])
    check(x[:, T(j)], a[:, j])
    check(x[T(i), T(i)], a[i, i])
    check(x[T(i), :, T(i)], a[i, :, i])          # non-adjacent: advanced dims go first
    check(x[1:4, T(j), ::2], a[1:4, j, ::2])
    check(x[..., T(i[:2])], a[..., i[:2]])
    check(x[T(j % 5), 1], a[j % 5, 1])
    check(x[None, T(i)], a[None, i])
    k = np.array([3, 1])
    check(x[T(k)[:, None], T(k)[None, :]], a[k[:, None], k[None, :]])
    mask = a > 0
    check(x[T(mask)], a[mask])
    check(x[T(mask[:, 0, 0])], a[mask[:, 0, 0]])
    with pytest.raises(IndexError):
        x[T(np.array([5]))]


def test_cross_entropy_style_gather():
    n, c = 6, 4
    logits = rnd((n, c), 11, np.float32)
    labels = np.array([3, 0, 1, 1, 2, 3])
    check(T(logits)[tg.arange(n), T(labels)], logits[np.arange(n), labels])
    check(T(logits)[tg.arange(n), T(labels.astype(np.int32))], logits[np.arange(n), labels])


# ------------------------------------------------------------------ matmul

@pytest.mark.parametrize("sa,sb", [
    ((4,), (4,)), ((4,), (4, 3)), ((2, 4), (4,)), ((2, 4), (4, 3)), ((5, 2, 4), (4, 3)), ((2, 4), (5, 4, 3)),
    ((2, 1, 3, 4), (5, 4, 2)), ((4,), (2, 4, 3)), ((2, 3, 4), (4,)), ((1, 2, 4), (6, 4, 3)), ((3, 1, 4), (1, 4, 1)),
])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_matmul(sa, sb, dtype):
    a, b = rnd(sa, 12, dtype), rnd(sb, 13, dtype)
    exp = np.matmul(a, b)
    rtol = 1e-5 if dtype == np.float32 else 1e-12
    check(T(a) @ T(b), exp, rtol=rtol, atol=1e-6)
    check(tg.matmul(T(a), T(b)), exp, rtol=rtol, atol=1e-6)
    check(T(a).matmul(T(b)), exp, rtol=rtol, atol=1e-6)


def test_matmul_errors_and_dtypes():
    with pytest.raises(RuntimeError):
        T(rnd((2, 3))) @ T(rnd((4, 2)))
    with pytest.raises(RuntimeError):
        T(rnd((3,))) @ T(rnd((4,)))
    a, b = rnd((2, 3), 1, np.float32), rnd((3, 2), 2, np.float64)
    with pytest.raises(RuntimeError, match="expected m1 and m2 to have the same dtype, but got: float != double"):
        T(a) @ T(b)                         # not promoted, as PyTorch
    check(T(a.astype(np.float64)) @ T(b), a.astype(np.float64) @ b, dtype=tg.float64, rtol=1e-12)
    ai = np.arange(6).reshape(2, 3)
    check(T(ai) @ T(ai.T), ai @ ai.T, dtype=tg.int64)


# ------------------------------------------------------------------ in place

def test_inplace_ops():
    a, b = rnd((3, 4), 14, np.float32), rnd((4,), 15, np.float32)
    b = np.where(np.abs(b) < 0.1, 0.5, b).astype(np.float32)
    x = T(a)
    ptr = x.data_ptr()
    exp = a.copy()
    x.add_(T(b)); exp += b
    check(x, exp, rtol=1e-6)
    x.add_(T(b), alpha=2.0); exp += 2.0 * b
    check(x, exp, rtol=1e-6)
    x.sub_(1.5); exp -= 1.5
    check(x, exp, rtol=1e-6)
    x.mul_(T(b)); exp *= b
    check(x, exp, rtol=1e-6)
    x.div_(T(b)); exp /= b
    check(x, exp, rtol=1e-5)
    x += 1.0; exp += 1.0
    x -= T(b); exp -= b
    x *= 2; exp *= 2
    x /= T(b); exp /= b
    check(x, exp, rtol=1e-5)
    assert x.data_ptr() == ptr and x.dtype == tg.float32
    x.copy_(T(b)); exp[:] = b
    check(x, exp)
    x.fill_(3.0)
    check(x, np.full((3, 4), 3.0, np.float32))
    x.zero_()
    check(x, np.zeros((3, 4), np.float32))
    assert x.data_ptr() == ptr
    xi = T(np.arange(4))
    with pytest.raises(RuntimeError):
        xi += 0.5          # float result cannot be cast into an int tensor, as PyTorch
    xi += 2
    check(xi, np.arange(4) + 2, dtype=tg.int64)


def test_inplace_through_views_and_setitem():
    a = rnd((4, 5), 16)
    x, exp = T(a), a.copy()
    v = x[:, 1::2]
    v += 1.0; exp[:, 1::2] += 1.0
    check(x, exp)
    x.T[0].mul_(0.0); exp.T[0] *= 0.0
    check(x, exp)
    x[1] = 7.0; exp[1] = 7.0
    x[2:, 3] = T(np.array([1.0, 2.0])); exp[2:, 3] = [1.0, 2.0]
    x[..., 0] = T(np.array(9.0)); exp[..., 0] = 9.0
    x[T(np.array([0, 3])), T(np.array([4, 2]))] = -1.0; exp[[0, 3], [4, 2]] = -1.0
    x[x > 8.0] = 0.5; exp[exp > 8.0] = 0.5
    x[:, :2] = T(np.array([10.0, 20.0])); exp[:, :2] = [10.0, 20.0]
    check(x, exp)


# ------------------------------------------------------------------ dtype promotion (SPEC §1)

@pytest.mark.parametrize("make_a,make_b,expected", [
    (lambda: tg.ones(3), lambda: 2.0, tg.float32),
    (lambda: tg.ones(3), lambda: 2, tg.float32),
    (lambda: tg.ones(3, dtype=tg.float64), lambda: 2.0, tg.float64),
    (lambda: tg.ones(3, dtype=tg.float16), lambda: 2.0, tg.float16),
    (lambda: tg.arange(3), lambda: 2.5, tg.float32),
    (lambda: tg.arange(3), lambda: 2, tg.int64),
    (lambda: tg.arange(3, dtype=tg.int32), lambda: 2, tg.int32),
    (lambda: tg.arange(3), lambda: tg.ones(3, dtype=tg.float64), tg.float64),
    (lambda: tg.arange(3, dtype=tg.int32), lambda: tg.ones(3), tg.float32),
    (lambda: tg.ones(3), lambda: tg.ones(3, dtype=tg.float64), tg.float64),
    (lambda: tg.ones(3, dtype=tg.float16), lambda: tg.ones(3), tg.float32),
    (lambda: tg.arange(3, dtype=tg.int32), lambda: tg.arange(3), tg.int64),
    (lambda: tg.ones(3) > 0, lambda: 1, tg.int64),
    (lambda: tg.ones(3) > 0, lambda: 1.5, tg.float32),
    (lambda: tg.ones(3) > 0, lambda: tg.arange(3, dtype=tg.int32), tg.int32),
    # 0-d tensors lose to dimensioned tensors of the same kind, win over a lower kind
    (lambda: tg.ones(3), lambda: tg.tensor(2.0, dtype=tg.float64), tg.float32),
    (lambda: tg.ones(3, dtype=tg.float16), lambda: tg.tensor(2.0), tg.float16),
    (lambda: tg.arange(3), lambda: tg.tensor(2.0, dtype=tg.float64), tg.float64),
    (lambda: tg.arange(3, dtype=tg.int32), lambda: tg.tensor(2), tg.int32),
    (lambda: tg.tensor(1.0), lambda: tg.tensor(2.0, dtype=tg.float64), tg.float64),
    (lambda: tg.tensor(1.0), lambda: 2.0, tg.float32),
    (lambda: tg.tensor(1), lambda: 2.0, tg.float32),
    (lambda: tg.tensor(1.0, dtype=tg.float64), lambda: tg.ones(3, dtype=tg.float16), tg.float16),
])
def test_promotion(make_a, make_b, expected):
    a, b = make_a(), make_b()
    na = np.asarray(a.numpy(), np.float64)
    nb = np.asarray(b.numpy() if isinstance(b, tg.Tensor) else b, np.float64)
    for got, exp in [(a + b, na + nb), (b + a, nb + na), (a * b, na * nb), (a - b, na - nb), (b - a, nb - na)]:
        assert got.dtype == expected, (got.dtype, expected)
        np.testing.assert_allclose(val(got).astype(np.float64), exp, rtol=1e-3)
    assert tg.maximum(a, b).dtype == expected if isinstance(b, tg.Tensor) else True
    for cmp in (a < b, a == b, b >= a, a != b):
        assert cmp.dtype == tg.bool
    if expected.is_floating_point and isinstance(b, tg.Tensor):
        assert tg.where(a > 0, a, b).dtype == expected


def test_true_division_of_integers_is_float():
    a, b = np.array([1, 7, -3]), np.array([2, 2, 2])
    check(T(a) / T(b), (a / b).astype(np.float32), dtype=tg.float32)
    check(T(a) / 2, (a / 2).astype(np.float32), dtype=tg.float32)
    check(7 / T(b), (7 / b).astype(np.float32), dtype=tg.float32)


# ------------------------------------------------------------------ nn.functional

def _np_log_softmax(a, axis):
    m = a.max(axis, keepdims=True)
    return a - m - np.log(np.exp(a - m).sum(axis, keepdims=True))


def test_gelu_both_modes():
    a = np.concatenate([np.linspace(-6, 6, 101), [0.0, -20.0, 20.0]])
    exact = a * 0.5 * (1 + _erf(a / math.sqrt(2)))
    tanh = 0.5 * a * (1 + np.tanh(math.sqrt(2 / math.pi) * (a + 0.044715 * a ** 3)))
    check(F.gelu(T(a)), exact, rtol=1e-12, atol=1e-15)
    check(F.gelu(T(a), approximate="none"), exact, rtol=1e-12, atol=1e-15)
    check(F.gelu(T(a), approximate="tanh"), tanh, rtol=1e-12, atol=1e-15)
    check(F.gelu(T(a.astype(np.float32))), exact.astype(np.float32), rtol=1e-5, atol=1e-6)
    check(F.gelu(T(a.astype(np.float32)), approximate="tanh"), tanh.astype(np.float32), rtol=1e-5, atol=1e-6)
    assert not np.allclose(exact, tanh, rtol=1e-6, atol=0)   # the two modes really differ
    with pytest.raises(ValueError):
        F.gelu(T(a), approximate="fast")


@pytest.mark.parametrize("axis", [0, 1, -1, 2])
def test_softmax_log_softmax(axis):
    a = rnd((3, 4, 5), 17, low=-5, high=5)
    a[0, 0, 0] = 500.0   # stability
    ls = _np_log_softmax(a, axis)
    check(F.softmax(T(a), axis), np.exp(ls), rtol=1e-10, atol=1e-300)
    check(F.softmax(T(a), dim=axis), np.exp(ls), rtol=1e-10, atol=1e-300)
    check(T(a).softmax(axis), np.exp(ls), rtol=1e-10, atol=1e-300)
    check(F.log_softmax(T(a), axis), ls, rtol=1e-10)
    check(F.log_softmax(T(a), dim=axis), ls, rtol=1e-10)
    check(tg.log_softmax(T(a), axis), ls, rtol=1e-10)
    check(tg.softmax(T(a.astype(np.float32)), axis), np.exp(ls).astype(np.float32), rtol=1e-5, atol=1e-30)


def test_softmax_default_axis_is_last():
    a = rnd((3, 4), 18)
    check(F.softmax(T(a)), np.exp(_np_log_softmax(a, -1)), rtol=1e-12)
    check(F.log_softmax(T(a)), _np_log_softmax(a, -1), rtol=1e-12)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy(reduction):
    n, c = 7, 5
    a = rnd((n, c), 19, low=-4, high=4)
    labels = np.random.default_rng(19).integers(0, c, n)
    per = -_np_log_softmax(a, 1)[np.arange(n), labels]
    exp = {"mean": per.mean(), "sum": per.sum(), "none": per}[reduction]
    check(F.cross_entropy(T(a), T(labels), reduction=reduction), exp, rtol=1e-12)
    f32 = F.cross_entropy(T(a.astype(np.float32)), T(labels), reduction=reduction)
    check(f32, np.asarray(exp).astype(np.float32), rtol=1e-5)
    # higher-dimensional logits (N, C, d): class axis 1
    b = rnd((3, c, 4), 20)
    lab = np.random.default_rng(20).integers(0, c, (3, 4))
    lsb = _np_log_softmax(b, 1)
    perb = -np.take_along_axis(lsb, lab[:, None, :], 1)[:, 0, :]
    expb = {"mean": perb.mean(), "sum": perb.sum(), "none": perb}[reduction]
    check(F.cross_entropy(T(b), T(lab), reduction=reduction), expb, rtol=1e-12)
    # probability targets
    p = np.random.default_rng(21).dirichlet(np.ones(c), n)
    perp = -(_np_log_softmax(a, 1) * p).sum(1)
    expp = {"mean": perp.mean(), "sum": perp.sum(), "none": perp}[reduction]
    check(F.cross_entropy(T(a), T(p), reduction=reduction), expp, rtol=1e-12)


def test_cross_entropy_default_and_1d_and_errors():
    a = rnd((4, 3), 22)
    labels = np.array([0, 2, 1, 2])
    check(F.cross_entropy(T(a), T(labels)), (-_np_log_softmax(a, 1)[np.arange(4), labels]).mean(), rtol=1e-12)
    v = rnd((5,), 23)
    check(F.cross_entropy(T(v), T(np.array(3))), -_np_log_softmax(v, 0)[3], rtol=1e-12)
    big = np.array([[1000.0, 0.0], [0.0, -1000.0]])
    check(F.cross_entropy(T(big), T(np.array([1, 1])), reduction="none"), np.array([1000.0, 1000.0]), rtol=1e-12)
    with pytest.raises(ValueError):
        F.cross_entropy(T(a), T(labels[:3]))
    with pytest.raises(ValueError):
        F.cross_entropy(T(a), T(labels), reduction="avg")


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_mse_loss(reduction):
    a, b = rnd((3, 4), 24), rnd((3, 4), 25)
    d2 = (a - b) ** 2
    exp = {"mean": d2.mean(), "sum": d2.sum(), "none": d2}[reduction]
    check(F.mse_loss(T(a), T(b), reduction=reduction), exp, rtol=1e-12)
    if reduction == "mean":
        check(F.mse_loss(T(a), T(b)), exp, rtol=1e-12)


@pytest.mark.parametrize("shape,norm", [((4, 6), (6,)), ((2, 3, 5), (5,)), ((2, 3, 5), (3, 5)), ((3, 4), 4)])
def test_layer_norm(shape, norm):
    a = rnd(shape, 26, low=-3, high=5)
    nshape = (norm,) if isinstance(norm, int) else norm
    axes = tuple(range(len(shape) - len(nshape), len(shape)))
    mu, var = a.mean(axes, keepdims=True), a.var(axes, keepdims=True)
    y = (a - mu) / np.sqrt(var + 1e-5)
    w, b = rnd(nshape, 27), rnd(nshape, 28)
    check(F.layer_norm(T(a), norm), y, rtol=1e-10, atol=1e-12)
    check(F.layer_norm(T(a), norm, T(w), T(b)), y * w + b, rtol=1e-10, atol=1e-12)
    check(F.layer_norm(T(a), norm, weight=T(w)), y * w, rtol=1e-10, atol=1e-12)
    check(F.layer_norm(T(a), norm, bias=T(b), eps=0.1), (a - mu) / np.sqrt(var + 0.1) + b, rtol=1e-10, atol=1e-12)
    check(F.layer_norm(T(a.astype(np.float32)), norm), y.astype(np.float32), rtol=1e-4, atol=1e-5)


def test_linear():
    x, w, b = rnd((5, 3), 29), rnd((4, 3), 30), rnd((4,), 31)
    check(F.linear(T(x), T(w), T(b)), x @ w.T + b, rtol=1e-12)
    check(F.linear(T(x), T(w)), x @ w.T, rtol=1e-12)
    x3 = rnd((2, 5, 3), 32)
    check(F.linear(T(x3), T(w), T(b)), x3 @ w.T + b, rtol=1e-12)
    check(F.linear(T(x[0]), T(w), T(b)), x[0] @ w.T + b, rtol=1e-12)


def test_relu_sigmoid_tanh_functional():
    a = rnd((3, 4), 33)
    check(F.relu(T(a)), np.maximum(a, 0))
    check(F.sigmoid(T(a)), 1 / (1 + np.exp(-a)), rtol=1e-12)
    check(F.tanh(T(a)), np.tanh(a), rtol=1e-12)


@pytest.mark.parametrize("p", [0.1, 0.5, 0.8])
def test_dropout(p):
    tg.manual_seed(0)
    a = rnd((200, 50), 34, np.float32, 0.5, 1.5)
    y = val(F.dropout(T(a), p, training=True))
    assert y.dtype == np.float32 and y.shape == a.shape
    kept = y != 0
    np.testing.assert_allclose(y[kept], a[kept] / np.float32(1 - p), rtol=1e-6)
    frac = 1 - kept.mean()
    assert abs(frac - p) < 4 * math.sqrt(p * (1 - p) / a.size) + 1e-3, frac
    check(F.dropout(T(a), p, training=False), a)
    check(F.dropout(T(a), p=p, training=False), a)
    y2 = val(F.dropout(T(a), p, training=True))
    assert not np.array_equal(y2 != 0, kept)     # a fresh mask per call


def test_dropout_edges():
    a = rnd((10, 10), 35, np.float32, 0.5, 1.5)
    check(F.dropout(T(a), 0.0, training=True), a)
    check(F.dropout(T(a), 1.0, training=True), np.zeros_like(a))
    tg.manual_seed(3)
    y1 = val(F.dropout(T(a), 0.5))
    tg.manual_seed(3)
    y2 = val(F.dropout(T(a), 0.5))
    np.testing.assert_array_equal(y1, y2)
    with pytest.raises(ValueError):
        F.dropout(T(a), 1.5)


def test_float16_elementwise_and_gelu():
    a = rnd((4, 5), 36, np.float16)
    check(T(a) * 2.0, (a * np.float16(2.0)), dtype=tg.float16)
    check(F.gelu(T(a)), (a.astype(np.float64) * 0.5 * (1 + _erf(a.astype(np.float64) / math.sqrt(2))))
          .astype(np.float16), dtype=tg.float16, rtol=2e-3, atol=1e-3)
    check(T(a).exp(), np.exp(a), dtype=tg.float16, rtol=2e-3)


# ---------------------------------------------------------------- PyTorch parity fixes (differential review)

def test_float_floor_division_is_exact_and_reflected():
    # floor(1/0.1) is 10 in float32, but the exact quotient 9.99999985... floors to 9 (Python, NumPy, PyTorch)
    a, b = np.float32([1.0, -7.5, 7.0]), np.float32([0.1, 2.0, -2.0])
    check(T(a) // T(b), np.floor_divide(a, b), dtype=tg.float32)
    check(2.5 // T(b), np.floor_divide(np.float32(2.5), b), dtype=tg.float32)
    check(7 // T([2, -3, 4]), np.array([3, -3, 1]), dtype=tg.int64)
    check(T([1, 2]) // 2.0, np.array([0.0, 1.0]), dtype=tg.float32)   # int // float scalar: a float result


def test_remainder_takes_the_divisor_sign():
    check(T([7, -7, 8]) % 3, np.array([1, 2, 2]), dtype=tg.int64)
    check(T(np.float32([7.5, -7.5, 8.0])) % 3, np.float32([1.5, 1.5, 2.0]), dtype=tg.float32)
    check(10 % T([3, -4]), np.array([1, -2]), dtype=tg.int64)


def test_integer_division_by_zero_raises():
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        T([1, 2]) // T([1, 0])


def test_prod_of_small_integer_types_is_int64():
    check(T(np.int32([2, 3])).prod(), np.int64(6), dtype=tg.int64)
    check(T([True, True]).prod(), np.int64(1), dtype=tg.int64)


def test_log_softmax_of_large_equal_logits_keeps_precision():
    # shifting by the max first makes x - max exact: log_softmax = -log(2), not -log(2) + float32 noise at 1000
    out = F.log_softmax(T(np.float32([[-1000.0, -1000.0], [1000.0, 0.0]])), -1)
    np.testing.assert_allclose(out.numpy(), [[-math.log(2)] * 2, [0.0, -1000.0]], rtol=1e-7)


def test_integer_index_beside_tensor_index_selects_first():
    # PyTorch applies x[1] first, so x[1, :, idx] == x[1][:, idx] of shape (3, 2); NumPy would give (2, 3)
    a = rnd((2, 3, 4))
    idx = np.array([1, 2])
    check(T(a)[1, :, T(idx)], a[1][:, idx])
    t = T(a)
    t[1, :, T(idx)] = T(np.arange(6.0).reshape(3, 2))
    expected = a.copy()
    expected[1][:, idx] = np.arange(6.0).reshape(3, 2)
    check(t, expected)


def test_zero_dim_bool_index_adds_a_full_or_empty_axis():
    a = rnd((2, 3))
    check(T(a)[T(True)], a[None])
    assert T(a)[T(False)].shape == (0, 2, 3) and T(a)[False].shape == (0, 2, 3)
    assert T(a)[:, False].shape == (2, 0, 3)


def test_setitem_casts_the_value_to_the_tensor_dtype():
    t = tg.zeros(2, 2, dtype=tg.int64)
    t[0] = T([3.7, -1.2])
    t[T([1]), T([1])] = 2.9
    check(t, np.array([[3, -1], [0, 2]]), dtype=tg.int64)


def test_cat_skips_empty_1d_tensors():
    a = rnd((2, 3))
    check(tg.cat([T(a), tg.zeros(0, dtype=tg.float64), T(a)]), np.concatenate([a, a]))


def test_clamp_needs_a_bound_and_negating_bool_raises():
    with pytest.raises(RuntimeError, match="min.*max"):
        T([1.0]).clamp()
    with pytest.raises(RuntimeError, match="~"):
        -T([True, False])


def test_floor_divide_remainder_and_floor_are_primitives_that_compile():
    a = tg.tensor(np.array([1.0, -3.5, 7.25, 0.7], np.float32))
    b = tg.tensor(np.array([0.1, 2.0, -1.5, 0.3], np.float32))
    an, bn = a.numpy(), b.numpy()
    for backend in ("interpret", "llvm"):
        f = tg.compile(lambda a, b: (a // b, a % b, a.floor()), backend=backend)
        q, r, fl = f(a, b)
        np.testing.assert_array_equal(q.numpy(), np.floor_divide(an, bn))
        np.testing.assert_array_equal(r.numpy(), np.remainder(an, bn))
        np.testing.assert_array_equal(fl.numpy(), np.floor(an))
    x = tg.tensor([5.5, -2.25], requires_grad=True)
    y = tg.tensor([2.0, 1.5], requires_grad=True)
    (x % y).sum().backward()                      # d(x % y)/dx = 1, d/dy = -floor(x / y)
    np.testing.assert_array_equal(x.grad.numpy(), [1.0, 1.0])
    np.testing.assert_array_equal(y.grad.numpy(), [-2.0, 2.0])
