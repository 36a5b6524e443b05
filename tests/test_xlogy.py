"""tg.xlogy / Tensor.xlogy / xlogy_ (torch.xlogy): a primitive declared in one place (ops/elementwise.py:
its lowering, derivatives and surface). Oracles: torch 2.13's values and gradients written as literals,
NumPy float64, tg.gradcheck (central differences in float64) eager and compiled, compiled == eager."""
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tracegrad as tg

NAN, INF = math.nan, math.inf
# torch.xlogy at its edges: x = +-0 gives 0 (also for y <= 0), y = NaN gives NaN, log(0) = -inf
X = [0.0, -0.0, 1.0, 2.0, 0.0, 0.0, 3.0]
Y = [2.0, 2.0, NAN, 0.0, 0.0, -1.0, -1.0]
TORCH_VALUE = [0.0, 0.0, NAN, -INF, 0.0, 0.0, NAN]
TORCH_GRAD_X = [0.6931471805599453, 0.6931471805599453, NAN, -INF, 0.0, 0.0, NAN]   # of xlogy(x, y).sum()
TORCH_GRAD_Y = [0.0, -0.0, NAN, INF, NAN, -0.0, -3.0]


@pytest.mark.parametrize("compiled", [False, True])
def test_edges_and_gradients_as_torch(compiled):
    x = tg.tensor(X, dtype=tg.float64, requires_grad=True)
    y = tg.tensor(Y, dtype=tg.float64, requires_grad=True)
    fn = tg.compile(tg.xlogy) if compiled else tg.xlogy
    z = fn(x, y)
    np.testing.assert_array_equal(z.detach().numpy(), TORCH_VALUE)
    assert not np.signbit(z.detach().numpy()[:2]).any()               # 0, not -0, at x = -0
    z.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), TORCH_GRAD_X, rtol=1e-15)
    np.testing.assert_array_equal(y.grad.numpy(), TORCH_GRAD_Y)


def test_surface_promotion_out_and_in_place():
    assert tg.xlogy(tg.tensor([1, 2]), tg.tensor([3, 4])).dtype == tg.float32     # integers: default float
    np.testing.assert_allclose(tg.xlogy(2, tg.tensor([3.0])).numpy(), [2.1972246], rtol=1e-6)
    assert tg.tensor([1, 2]).xlogy(2.5).dtype == tg.float32
    out = tg.empty(2)
    assert tg.xlogy(tg.tensor([1.0, 0.0]), 3.0, out=out) is out
    t = tg.tensor([1.0, 0.0])
    assert t.xlogy_(3.0) is t
    np.testing.assert_allclose(t.numpy(), [math.log(3.0), 0.0], rtol=1e-6)
    with pytest.raises(TypeError, match="xlogy"):
        tg.xlogy(tg.tensor([1.0]))


def _arrays(shape_x, shape_y, dtype, seed):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-2, 2, shape_x)
    x[rng.random(shape_x) < 0.2] = 0.0                       # x = 0 picks the branch
    y = rng.uniform(-1, 3, shape_y)
    y[rng.random(shape_y) < 0.1] = NAN
    return x.astype(dtype), y.astype(dtype)


@settings(max_examples=25, deadline=None)
@given(st.sampled_from([((3, 4), (3, 4)), ((5, 1), (1, 6)), ((2, 3, 4), (4,)), ((), (7,))]),
       st.sampled_from(["float32", "float64"]), st.integers(0, 2 ** 16))
def test_compiled_matches_eager_and_numpy(shapes, dtype, seed):
    """Fused with its neighbours (the lowering through LLVM), broadcasting, both float dtypes."""
    x, y = _arrays(*shapes, dtype, seed)
    with np.errstate(all="ignore"):
        want = np.where(np.isnan(y), y, np.where(x == 0, 0.0, x.astype(np.float64) * np.log(y.astype(np.float64))))
    f = tg.compile(lambda a, b: tg.xlogy(a * 1.0, b) + 1.0)
    got, eager = f(tg.tensor(x), tg.tensor(y)), tg.xlogy(tg.tensor(x), tg.tensor(y)) + 1.0
    tol = 2e-6 if dtype == "float32" else 1e-13
    np.testing.assert_allclose(eager.numpy(), want + 1.0, rtol=tol, atol=tol)
    np.testing.assert_allclose(got.numpy(), eager.numpy(), rtol=tol, atol=tol)
    assert "[host]" not in f.ir(tg.tensor(x), tg.tensor(y), stage="kernels")


def test_gradcheck_eager_compiled_and_second_order():
    rng = np.random.default_rng(3)
    x = tg.tensor(rng.uniform(-2, 2, (3, 4)), requires_grad=True)
    y = tg.tensor(rng.uniform(0.5, 3, (4,)), requires_grad=True)
    assert tg.gradcheck(tg.xlogy, (x, y))
    assert tg.gradcheck(tg.compile(lambda a, b: a.xlogy(b) * b), (x, y))
    assert tg.gradcheck(lambda a, b: tg.grad(tg.xlogy(a, b).sum(), (a, b), create_graph=True)[1], (x, y))


def test_named_operands_as_pytorch():
    x, y = tg.tensor([1.0, 2.0]), tg.tensor([3.0, 4.0])
    want = np.log([3.0, 4.0]) * [1.0, 2.0]
    np.testing.assert_allclose(tg.xlogy(input=x, other=y).numpy(), want, rtol=1e-6)
    np.testing.assert_allclose(x.xlogy(other=y).numpy(), want, rtol=1e-6)
    with pytest.raises(TypeError, match="xlogy"):
        tg.xlogy(x, y, bogus=1)
