"""The PyTorch API a user reaches for first (issue 9): max/min with a dim returning (values, indices),
amax/amin, var/std unbiased by default, softmax over an empty axis, tg.cat([]), function forms with
PyTorch's keyword names and out=, *_like and new_* factories, norm, split/chunk, isnan/isinf/isfinite,
clamp with tensor bounds, mm/bmm/mv/dot, default dtype/device, the legacy tg.Tensor constructor.
Expected values are PyTorch's (written in); gradients are checked with tg.gradcheck in float64,
eager and compiled."""
import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tracegrad as tg

BACKENDS = ["interpret", "llvm"]
SETTINGS = settings(max_examples=10, deadline=None)
X = np.array([[1.0, 5.0, 3.0], [4.0, 2.0, 6.0]])


def f64(a, grad=True):
    return tg.tensor(np.asarray(a, dtype=np.float64), requires_grad=grad)


def compiled(f, backend):
    return tg.compile(f, backend=backend)


# ------------------------------------------------------------------ item 1: max/min, amax/amin

def test_max_min_with_dim_return_values_and_indices():
    x = tg.tensor(X)
    vals, idx = x.max(dim=1)
    np.testing.assert_array_equal(vals.numpy(), [5.0, 6.0])
    np.testing.assert_array_equal(idx.numpy(), [1, 2])
    assert idx.dtype == tg.int64
    r = x.min(0)
    np.testing.assert_array_equal(r.values.numpy(), [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(r.indices.numpy(), [0, 1, 0])
    assert r[0] is r.values and len(r) == 2
    assert repr(x.max(1)) == ("tracegrad.return_types.max(\nvalues=tensor([5., 6.], dtype=tracegrad.float64),\n"
                              "indices=tensor([1, 2]))")
    k = x.max(axis=1, keepdims=True)
    assert k.values.shape == (2, 1) and k.indices.shape == (2, 1)
    assert x.min(dim=-1, keepdim=True).indices.numpy().tolist() == [[0], [1]]
    v, i = tg.max(x, 1)
    assert v.numpy().tolist() == [5.0, 6.0] and i.numpy().tolist() == [1, 2]
    assert x.max().shape == () and x.max().item() == 6.0 and tg.min(x).item() == 1.0
    np.testing.assert_array_equal(x.max(tg.tensor([2.0, 2.0, 7.0])).numpy(), [[2, 5, 7], [4, 2, 7]])
    s = tg.tensor(3.0).max(0)                    # a 0-d tensor: itself and index 0
    assert s.values.item() == 3.0 and s.indices.item() == 0 and s.indices.shape == ()
    with pytest.raises(TypeError, match="amax"):
        x.max(dim=(0, 1))
    with pytest.raises(IndexError):
        x.max(2)
    with pytest.raises(IndexError, match="non-zero size"):
        tg.zeros(2, 0).max(1)


def test_max_dim_ties_nan_and_gradient_to_the_index():
    x = f64([[1.0, 3.0, 3.0], [2.0, 0.0, 2.0]])
    v, i = x.max(1)
    assert i.numpy().tolist() == [1, 0]                 # the first of tied maxima, as PyTorch
    v.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[0, 1, 0], [1, 0, 0]])
    x.grad = None
    x.amax(1).sum().backward()                            # amax splits the gradient among ties
    np.testing.assert_array_equal(x.grad.numpy(), [[0, 0.5, 0.5], [0.5, 0, 0.5]])
    n = tg.tensor([[1.0, float("nan"), 3.0], [2.0, 0.0, 1.0]])
    v, i = n.max(1)
    assert math.isnan(v[0].item()) and i.numpy().tolist() == [1, 0]
    v, i = n.min(1)
    assert math.isnan(v[0].item()) and i.numpy().tolist() == [1, 1]
    assert x.max(1).values.grad_fn.name() == "MaxBackward" and x.amax(1).grad_fn.name() == "AmaxBackward"


def test_amax_amin_int_and_tuple_axes():
    a = np.random.default_rng(0).standard_normal((2, 3, 4))
    x = tg.tensor(a)
    np.testing.assert_array_equal(x.amax((0, 2)).numpy(), a.max((0, 2)))
    np.testing.assert_array_equal(x.amin(dim=1, keepdim=True).numpy(), a.min(1, keepdims=True))
    np.testing.assert_array_equal(tg.amax(x, (1, -1)).numpy(), a.max((1, 2)))
    assert x.amax().item() == a.max() and x.amax(()).item() == a.max()
    assert tg.gradcheck(lambda t: t.amax((0, 2)) * t.amin(1).sum(), (f64(a),))


@pytest.mark.parametrize("backend", BACKENDS)
def test_max_min_dim_compile(backend):
    def f(x):
        v, i = x.max(1)
        m = x.min(dim=0, keepdim=True)
        return v * 2 + m.values.sum() + x.amax((0, 1)), i, m

    x = f64(np.random.default_rng(1).standard_normal((3, 4)))
    cf = compiled(f, backend)
    out, ref = cf(x), f(x)
    np.testing.assert_allclose(out[0].detach().numpy(), ref[0].detach().numpy(), rtol=1e-12)
    np.testing.assert_array_equal(out[1].numpy(), ref[1].numpy())
    assert type(out[2]) is tg.return_types.min and out[2].indices.dtype == tg.int64
    np.testing.assert_array_equal(out[2].indices.numpy(), ref[2].indices.numpy())
    assert tg.gradcheck(lambda t: compiled(lambda u: u.max(1).values * u.min(0).values.sum(), backend)(t), (x,))


# ------------------------------------------------------------------ item 2: var / std

def test_var_std_are_unbiased_by_default():
    x = tg.tensor([1.0, 2.0, 3.0, 4.0])
    assert x.var().item() == pytest.approx(1.6666666269302368)      # torch.tensor([1., 2., 3., 4.]).var()
    assert x.std().item() == pytest.approx(1.2909944057464600)
    assert x.var(unbiased=False).item() == pytest.approx(1.25)
    assert x.var(correction=0).item() == pytest.approx(1.25)
    assert x.var(correction=2).item() == pytest.approx(2.5)
    assert tg.var(x, 0, keepdim=True).shape == (1,)
    assert tg.std(x, dim=0, unbiased=False).item() == pytest.approx(math.sqrt(1.25))
    m = tg.tensor(X)
    np.testing.assert_allclose(m.var(1).numpy(), np.var(X, 1, ddof=1))
    np.testing.assert_allclose(m.std(dim=0, keepdim=True).numpy(), np.std(X, 0, ddof=1, keepdims=True))
    with pytest.raises(TypeError):
        m.var(0, False)                         # everything after the axis is keyword-only
    with pytest.raises(TypeError):
        m.std(1, True)
    with pytest.raises(ValueError, match="either unbiased= or correction="):
        m.var(unbiased=False, correction=1)
    assert math.isnan(tg.tensor([2.0]).var().item())               # N - 1 = 0: nan, as PyTorch
    assert tg.tensor([1.0, 2.0]).var(correction=3).item() == math.inf
    ln = tg.nn.functional.layer_norm(tg.tensor([[1.0, 2.0, 3.0, 4.0]]), 4)
    np.testing.assert_allclose(ln.numpy(), [(np.arange(1, 5) - 2.5) / np.sqrt(1.25 + 1e-5)], rtol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_var_std_correction_compile_and_gradcheck(backend):
    def f(x):
        return x.var(1) + x.std(1, correction=0) * x.var(dim=(0, 1), correction=2)

    x = f64(np.random.default_rng(2).standard_normal((3, 5)))
    np.testing.assert_allclose(compiled(f, backend)(x).detach().numpy(), f(x).detach().numpy(), rtol=1e-12)
    assert tg.gradcheck(f, (x,))
    assert tg.gradcheck(compiled(f, backend), (x,))


# ------------------------------------------------------------------ items 8 and 10

def test_softmax_over_an_empty_axis_is_empty():
    x = tg.zeros(2, 0, requires_grad=True)
    assert x.softmax(1).shape == (2, 0) and x.log_softmax(dim=-1).shape == (2, 0)
    assert tg.nn.functional.softmax(tg.zeros(0, 3), dim=0).shape == (0, 3)
    assert tg.nn.functional.log_softmax(tg.zeros(0, 3), dim=1).shape == (0, 3)
    x.softmax(1).sum().backward()
    assert x.grad.shape == (2, 0)
    lse = tg.zeros(3, 0).logsumexp(1)
    assert lse.shape == (3,) and (lse.numpy() == -np.inf).all()       # log of an empty sum
    out = compiled(lambda t: t.softmax(1), "interpret")(tg.zeros(4, 0))
    assert out.shape == (4, 0)


def test_cat_and_stack_of_nothing_raise_runtime_and_value_errors():
    for fn in (tg.cat, tg.stack):
        with pytest.raises(RuntimeError, match="non-empty"):
            fn([])
        with pytest.raises(ValueError):
            fn(())
    with pytest.raises(TypeError):
        tg.cat([tg.ones(2), [1.0]])


# ------------------------------------------------------------------ item 14: function forms, out=

def test_function_forms_take_pytorchs_keyword_names():
    a, b = tg.tensor([[1.0, 2.0], [3.0, 4.0]]), tg.tensor([[0.5, -1.0], [2.0, 1.0]])
    np.testing.assert_array_equal(tg.add(a, b, alpha=2).numpy(), a.numpy() + 2 * b.numpy())
    np.testing.assert_array_equal(tg.sub(input=a, other=b).numpy(), a.numpy() - b.numpy())
    np.testing.assert_array_equal(tg.mul(a, 3).numpy(), a.numpy() * 3)
    np.testing.assert_array_equal(tg.div(a, b).numpy(), (a.numpy() / b.numpy()).astype(np.float32))
    np.testing.assert_array_equal(tg.div(tg.tensor([7, -7]), 2, rounding_mode="floor").numpy(), [3, -4])
    np.testing.assert_array_equal(tg.div(tg.tensor([7, -7]), 2, rounding_mode="trunc").numpy(), [3, -3])
    np.testing.assert_array_equal(tg.div(tg.tensor([7.5, -7.5]), 2, rounding_mode="trunc").numpy(), [3, -3])
    np.testing.assert_array_equal(tg.pow(a, exponent=2).numpy(), a.numpy() ** 2)
    np.testing.assert_array_equal(tg.matmul(input=a, other=b).numpy(), a.numpy() @ b.numpy())
    np.testing.assert_allclose(tg.exp(input=a).numpy(), np.exp(a.numpy()), rtol=1e-6)
    np.testing.assert_array_equal(tg.sum(a, dim=1, keepdim=True).numpy(), [[3.0], [7.0]])
    np.testing.assert_array_equal(tg.mean(a, 0).numpy(), [2.0, 3.0])
    np.testing.assert_array_equal(tg.maximum(a, b).numpy(), np.maximum(a.numpy(), b.numpy()))
    np.testing.assert_array_equal(tg.clamp(a, min=1.5, max=3.5).numpy(), [[1.5, 2.0], [3.0, 3.5]])
    np.testing.assert_array_equal(tg.where(a > 2, a, b).numpy(), [[0.5, -1.0], [3.0, 4.0]])
    assert tg.eq(a, a).all().item() and tg.gt(a, b).numpy().tolist() == [[True, True], [True, True]]
    np.testing.assert_array_equal(tg.transpose(a, 0, 1).numpy(), a.numpy().T)
    assert tg.numel(a) == 4 and tg.is_tensor(a) and not tg.is_tensor(1.0)
    with pytest.raises(TypeError, match="argument 'input' must be Tensor"):
        tg.exp(1.0)
    with pytest.raises(ValueError, match="rounding_mode"):
        tg.div(a, b, rounding_mode="round")


def test_out_writes_into_the_given_tensor():
    a, b = tg.tensor([1.0, 2.0]), tg.tensor([3.0, 4.0])
    out = tg.empty(2)
    r = tg.add(a, b, out=out)
    assert r is out and out.numpy().tolist() == [4.0, 6.0] and out._version == 1
    ptr = out.data_ptr()
    tg.mul(a, b, out=out)
    assert out.numpy().tolist() == [3.0, 8.0] and out.data_ptr() == ptr
    wide = tg.zeros(0)
    tg.matmul(tg.ones(2, 3), tg.ones(3, 2), out=wide)           # an empty out is resized silently
    assert wide.shape == (2, 2) and (wide.numpy() == 3).all()
    with pytest.warns(UserWarning, match="was resized"):
        tg.exp(a, out=tg.zeros(5))
    vals, idx = tg.zeros(2), tg.zeros(2, dtype=tg.int64)
    r = tg.max(tg.tensor(X), 1, out=(vals, idx))
    assert r.values is vals and vals.numpy().tolist() == [5, 6] and idx.numpy().tolist() == [1, 2]
    with pytest.raises(RuntimeError, match="can't be cast to the desired output type"):
        tg.add(a, b, out=tg.zeros(2, dtype=tg.int64))
    with pytest.raises(RuntimeError, match="don't support automatic differentiation"):
        tg.add(a.requires_grad_(), b, out=tg.zeros(2))
    with tg.no_grad():
        tg.add(a, b, out=out)
    assert out.numpy().tolist() == [4.0, 6.0]


# ------------------------------------------------------------------ item 14: factories

def test_like_and_new_factories():
    tg.manual_seed(0)
    x = tg.ones(2, 3, dtype=tg.float64)
    for fn in (tg.randn_like, tg.rand_like, tg.zeros_like, tg.ones_like, tg.empty_like):
        y = fn(x)
        assert y.shape == (2, 3) and y.dtype == tg.float64 and not y.requires_grad
    r = tg.rand_like(x).numpy()
    assert ((r >= 0) & (r < 1)).all() and r.std() > 0
    assert tg.randn_like(x, dtype=tg.float32).dtype == tg.float32
    assert tg.zeros_like(x, requires_grad=True).requires_grad
    n = x.new_ones(4)
    assert n.shape == (4,) and n.dtype == tg.float64 and (n.numpy() == 1).all()
    assert x.new_zeros((2, 2)).numpy().tolist() == [[0, 0], [0, 0]]
    t = x.new_tensor([1, 2])
    assert t.dtype == tg.float64 and t.numpy().tolist() == [1.0, 2.0]
    assert x.new_full((2,), 7.0).numpy().tolist() == [7.0, 7.0] and x.new_empty(3).shape == (3,)
    assert x.new_ones(2, dtype=tg.int64).dtype == tg.int64


def test_legacy_tensor_constructor():
    t = tg.Tensor([1, 2, 3])
    assert isinstance(t, tg.Tensor) and t.dtype == tg.float32 and t.numpy().tolist() == [1.0, 2.0, 3.0]
    assert tg.Tensor(2, 3).shape == (2, 3) and tg.Tensor(2, 3).dtype == tg.float32
    assert tg.Tensor().shape == (0,)
    assert tg.Tensor(np.array([1.5, 2.5])).dtype == tg.float32
    assert tg.Tensor((2, 3)).numpy().tolist() == [2.0, 3.0]              # a tuple is data, as in PyTorch
    assert type(tg.tensor([1.0]) + 1) is tg.Tensor


def test_default_dtype_and_device():
    assert tg.get_default_dtype() == tg.float32
    try:
        tg.set_default_dtype(tg.float64)
        assert tg.tensor([1.5]).dtype == tg.float64 and tg.zeros(2).dtype == tg.float64
        assert tg.randn(2).dtype == tg.float64 and tg.Tensor([1]).dtype == tg.float64
        assert (tg.tensor([1, 2]) * 0.5).dtype == tg.float64 and tg.tensor([1, 2]).dtype == tg.int64
        assert tg.nn.Linear(2, 2).weight.dtype == tg.float64
        with pytest.raises(TypeError, match="floating-point"):
            tg.set_default_dtype(tg.int64)
    finally:
        tg.set_default_dtype(tg.float32)
    assert tg.zeros(1).dtype == tg.float32
    assert tg.get_default_device() == "cpu"
    try:
        tg.set_default_device("cpu")
        assert tg.zeros(2).device == "cpu"
        if not tg.cuda.is_available():
            tg.set_default_device("cuda")
            with pytest.raises(RuntimeError, match="(?i)cuda"):
                tg.zeros(2)
    finally:
        tg.set_default_device(None)
    assert tg.ones(1).device == "cpu"


def test_float64_data_is_not_rounded_through_float32():
    assert tg.tensor([0.1], dtype=tg.float64).item() == 0.1


# ------------------------------------------------------------------ item 14: norm, split, chunk, ...

def test_norm_values_and_gradient_at_zero():
    v = tg.tensor([3.0, -4.0])
    assert v.norm().item() == 5.0 and tg.norm(v, 1).item() == 7.0
    assert v.norm(float("inf")).item() == 4.0 and v.norm(-math.inf).item() == 3.0
    assert v.norm(0).item() == 2.0 and v.norm(3).item() == pytest.approx(91 ** (1 / 3))
    m = tg.tensor(X)
    np.testing.assert_allclose(m.norm(dim=1).numpy(), np.linalg.norm(X, axis=1))
    assert m.norm(p="fro", dim=(0, 1), keepdim=True).shape == (1, 1)
    z = f64([0.0, 0.0], True)
    z.norm().backward()                              # PyTorch: 0, not nan
    assert z.grad.numpy().tolist() == [0.0, 0.0]
    a = f64(np.random.default_rng(3).standard_normal((3, 4)))
    for p in ("fro", 1, 3, 1.5, math.inf):
        assert tg.gradcheck(lambda t: t.norm(p, dim=1), (a,))
    assert tg.gradcheck(compiled(lambda t: t.norm() + t.norm(1, 0).sum(), "llvm"), (a,))
    with pytest.raises(RuntimeError, match="floating point"):
        tg.tensor([1, 2]).norm()


def test_split_and_chunk():
    x = tg.arange(10).reshape(5, 2)
    parts = x.split(2)
    assert [p.shape for p in parts] == [(2, 2), (2, 2), (1, 2)]
    assert [p.shape for p in tg.split(x, [1, 4])] == [(1, 2), (4, 2)]
    assert [p.shape for p in x.split(1, dim=1)] == [(5, 1), (5, 1)]
    assert [p.shape for p in x.chunk(3)] == [(2, 2), (2, 2), (1, 2)]
    assert [p.shape for p in tg.arange(6).chunk(4)] == [(2,), (2,), (2,)]      # fewer pieces, as PyTorch
    assert [p.shape for p in tg.zeros(0).chunk(2)] == [(0,), (0,)]
    assert parts[2].numpy().tolist() == [[8, 9]]
    with pytest.raises(RuntimeError, match=r"split_with_sizes expects split_sizes to sum exactly to 5"):
        x.split([2, 2])
    with pytest.raises(RuntimeError, match="chunk expects `chunks` to be greater than 0"):
        x.chunk(0)
    w = f64(np.arange(6.0).reshape(3, 2))
    a, b = w.split([1, 2])
    assert a.grad_fn.name() == "SplitWithSizesBackward"
    (a.sum() * 2 + (b * b).sum()).backward()
    np.testing.assert_array_equal(w.grad.numpy(), [[2, 2], [4, 6], [8, 10]])
    assert tg.gradcheck(lambda t: tuple(c * (i + 1) for i, c in enumerate(t.chunk(2, 1))), (w,))
    f = compiled(lambda t: [c.sum() for c in t.split(2)], "llvm")
    assert [c.item() for c in f(w)] == [6.0, 9.0]


def test_isnan_isinf_isfinite():
    v = [1.0, float("nan"), float("inf"), -float("inf"), 0.0]
    x = tg.tensor(v)
    assert x.isnan().numpy().tolist() == [False, True, False, False, False]
    assert tg.isinf(x).numpy().tolist() == [False, False, True, True, False]
    assert x.isfinite().numpy().tolist() == [True, False, False, False, True]
    assert tg.isnan(x).dtype == tg.bool
    i = tg.tensor([1, 2])
    assert i.isnan().numpy().tolist() == [False, False] and i.isfinite().all().item()
    for backend in BACKENDS:
        f = compiled(lambda t: (t.isnan(), t.isinf(), t.isfinite()), backend)
        got = f(x)
        assert [g.numpy().tolist() for g in got] == [x.isnan().numpy().tolist(), x.isinf().numpy().tolist(),
                                                     x.isfinite().numpy().tolist()]


@SETTINGS
@given(seed=st.integers(0, 2**16))
def test_clamp_with_tensor_bounds(seed):
    rng = np.random.default_rng(seed)
    a, lo, hi = rng.uniform(-2, 2, (3, 4)), rng.uniform(-1, 0, (4,)), rng.uniform(0, 1, (3, 1))
    got = tg.clamp(tg.tensor(a), min=tg.tensor(lo), max=tg.tensor(hi)).numpy()
    np.testing.assert_array_equal(got, np.minimum(np.maximum(a, lo), hi))
    assert tg.gradcheck(lambda x, l, h: x.clamp(l, h), (f64(a), f64(lo), f64(hi)))


def test_clamp_tensor_bound_gradients_and_compile():
    x = f64([-2.0, 0.5, 3.0])
    lo, hi = f64([-1.0, -1.0, -1.0]), f64([1.0, 1.0, 1.0])
    x.clamp(min=lo, max=hi).sum().backward()
    assert x.grad.numpy().tolist() == [0, 1, 0]
    assert lo.grad.numpy().tolist() == [1, 0, 0] and hi.grad.numpy().tolist() == [0, 0, 1]
    f = compiled(lambda t, l: t.clamp(min=l) * 2, "llvm")
    assert f(x.detach(), lo.detach()).numpy().tolist() == [-2.0, 1.0, 6.0]
    assert tg.clamp(tg.tensor([1, 5, 9]), tg.tensor([2, 2, 2]), tg.tensor([6, 6, 6])).numpy().tolist() == [2, 5, 6]


def test_mm_bmm_mv_dot():
    a, b = tg.tensor(X), tg.tensor(X.T)
    np.testing.assert_array_equal(a.mm(b).numpy(), X @ X.T)
    np.testing.assert_array_equal(tg.mm(a, b).numpy(), X @ X.T)
    assert a.mm(b).grad_fn is None and a.requires_grad_().mm(b).grad_fn.name() == "MmBackward"
    with pytest.raises(RuntimeError, match="mm\\(\\): self must be a 2-D tensor"):
        tg.ones(3).mm(b)
    bb = tg.ones(2, 3, 4)
    assert tg.bmm(bb, tg.ones(2, 4, 5)).shape == (2, 3, 5)
    with pytest.raises(RuntimeError, match="same batch size"):
        bb.bmm(tg.ones(1, 4, 5))
    assert tg.mv(tg.tensor(X), tg.tensor([1.0, 0.0, 1.0], dtype=tg.tensor(X).dtype)).numpy().tolist() == [4.0, 10.0]
    assert tg.dot(tg.tensor([1.0, 2.0]), tg.tensor([3.0, 4.0])).item() == 11.0
    with pytest.raises(RuntimeError, match="inconsistent tensor size"):
        tg.dot(tg.ones(2), tg.ones(3))
    p, q = f64(X), f64(X.T)
    assert tg.gradcheck(lambda u, v: u.mm(v), (p, q))
    assert tg.gradcheck(compiled(lambda u, v: tg.mm(u, v).sum(), "llvm"), (p, q))


# ------------------------------------------------------------------ item 14: cumsum and round (primitives)

def test_cumsum_values_dtypes_and_gradient():
    x = tg.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    np.testing.assert_array_equal(x.cumsum(1).numpy(), [[1, 3, 6], [4, 9, 15]])
    np.testing.assert_array_equal(tg.cumsum(x, dim=0).numpy(), [[1, 2, 3], [5, 7, 9]])
    np.testing.assert_array_equal(x.cumsum(-1, dtype=tg.float64).numpy(), [[1, 3, 6], [4, 9, 15]])
    assert x.cumsum(0, dtype=tg.float64).dtype == tg.float64
    b = tg.tensor([True, False, True]).cumsum(0)
    assert b.dtype == tg.int64 and b.numpy().tolist() == [1, 1, 2]             # as PyTorch
    assert tg.tensor([1, 2], dtype=tg.int32).cumsum(0).dtype == tg.int64
    assert tg.tensor(2.5).cumsum(0).item() == 2.5
    with pytest.raises(TypeError, match="dim"):
        x.cumsum()
    w = f64(X)
    (w.cumsum(1) * tg.tensor([[1.0, 2.0, 3.0], [1.0, 1.0, 1.0]], dtype=tg.float64)).sum().backward()
    np.testing.assert_array_equal(w.grad.numpy(), [[6, 5, 3], [3, 2, 1]])     # the running sum from the end
    assert w.cumsum(1).grad_fn.name() == "CumsumBackward"
    a = f64(np.random.default_rng(4).standard_normal((3, 4)))
    assert tg.gradcheck(lambda t: t.cumsum(0) * t.cumsum(-1), (a,))
    g, = tg.grad(a.cumsum(1).pow(2).sum(), a, create_graph=True)              # higher order
    assert tg.gradcheck(lambda t: tg.grad(t.cumsum(1).pow(2).sum(), t, create_graph=True)[0], (a,))
    out, tan = tg.jvp(lambda t: t.cumsum(1), (a.detach(),), (tg.ones_like(a.detach()),))
    np.testing.assert_array_equal(tan.numpy(), np.cumsum(np.ones((3, 4)), 1))


@pytest.mark.parametrize("backend", BACKENDS)
def test_cumsum_compiles(backend):
    def f(t):
        return (t.cumsum(1).exp() * t).sum() + t.cumsum(0)[-1].sum()

    a = f64(np.random.default_rng(5).standard_normal((3, 4)) / 2)
    cf = compiled(f, backend)
    assert cf(a).item() == pytest.approx(f(a).item(), rel=1e-12)
    assert "cumsum" in cf.ir(a, stage="forward") and "cumsum" in cf.ir(a, stage="backward")
    assert tg.gradcheck(cf, (a,))


def test_round_half_to_even_decimals_and_zero_gradient():
    x = tg.tensor([0.5, 1.5, 2.5, -0.5, -1.5, 2.675, -2.2])
    np.testing.assert_array_equal(x.round().numpy(), [0.0, 2.0, 2.0, -0.0, -2.0, 3.0, -2.0])
    np.testing.assert_allclose(tg.round(tg.tensor([1.2345, 123.456]), decimals=2).numpy(), [1.23, 123.46],
                               rtol=1e-6)
    assert tg.tensor([1234.5]).round(decimals=-2).item() == 1200.0
    assert tg.tensor([3, -4]).round().numpy().tolist() == [3, -4]
    w = f64([0.3, 1.7])
    (w.round() * w).sum().backward()
    assert w.grad.numpy().tolist() == [0.0, 2.0]             # d(round(w) * w) = round(w): round's own is 0
    for backend in BACKENDS:
        got = compiled(lambda t: (t * 10).round() / 10, backend)(tg.tensor([0.25, 0.35, -1.05]))
        np.testing.assert_array_equal(got.numpy(), (tg.tensor([0.25, 0.35, -1.05]) * 10).round().numpy() / 10)
