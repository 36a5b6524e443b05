"""floor, round (half to even), // and % on cuda (simulator) against the cpu (NumPy's rules): signs,
halves, NaN/inf, signed zeros, int/float/bool dtypes, broadcasting and strided operands, integer
division by zero."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tracegrad as tg

FLOATS = [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, -0.3, 0.3, 2.7, -2.7, 0.0, -0.0, 7.0, -7.0, 3e4, -3.25,
          np.inf, -np.inf, np.nan]


def same(c, x):
    assert c.device == "cuda:0" and c.dtype is x.dtype and c.shape == x.shape
    got, want = c.cpu().numpy(), x.numpy()
    np.testing.assert_array_equal(got, want)
    if want.dtype.kind == "f":          # signed zeros too (a NaN's sign carries no meaning)
        ok = ~np.isnan(want)
        np.testing.assert_array_equal(np.signbit(got)[ok], np.signbit(want)[ok])


@pytest.mark.parametrize("dtype", [tg.float32, tg.float64, tg.float16])
def test_floor_round_floats(dtype):
    x = tg.tensor(np.array(FLOATS), dtype=dtype)
    same(x.cuda().floor(), x.floor())
    same(x.cuda().round(), x.round())
    same(x.cuda()[::2].round(), x[::2].round())


@pytest.mark.parametrize("dtype", [tg.int32, tg.int64, tg.bool])
def test_floor_round_ints_unchanged(dtype):
    x = tg.tensor(np.array([[3, -4, 0], [1, 1, -9]]).astype(dtype.np), dtype=dtype)
    same(x.cuda().T.floor(), x.T.floor())
    same(x.cuda().round(), x.round())


@st.composite
def division(draw):
    dtype = draw(st.sampled_from([tg.float32, tg.float64, tg.int32, tg.int64]))
    pool = [-7, -3, -1, 1, 2, 5, 9] + ([0, 0.5, -2.5, np.inf, np.nan] if dtype.is_floating_point else [])
    a = np.array(draw(st.lists(st.sampled_from(pool), min_size=6, max_size=6)), np.float64).reshape(2, 3)
    b = np.array(draw(st.lists(st.sampled_from(pool), min_size=3, max_size=3)), np.float64)
    if not dtype.is_floating_point:
        b[b == 0] = 1
    return a.astype(dtype.np), b.astype(dtype.np), dtype


@settings(max_examples=8, deadline=None)
@given(division())
def test_floordiv_remainder_match_cpu(case):
    a, b, dtype = case
    x, y = tg.tensor(a, dtype=dtype), tg.tensor(b, dtype=dtype)
    xc, yc = x.cuda(), y.cuda()
    same(xc // yc, x // y)                 # broadcast (2, 3) with (3,)
    same(xc % yc, x % y)
    same(xc.T % yc[None, :2], x.T % y[None, :2])     # strided
    same(xc // 2, x // 2)
    same(xc % -3, x % -3)


def test_float_zero_divisor_and_bool():
    x = tg.tensor([1.0, -1.0, 0.0, 5.5])
    same(x.cuda() // 0.0, x // 0.0)
    same(x.cuda() % 0.0, x % 0.0)
    a, b = tg.tensor([True, False, True]), tg.tensor([True, True, True])
    same(a.cuda() % b.cuda(), a % b)


def test_integer_zero_divisor_raises():
    a, b = tg.tensor([4, 5]).cuda(), tg.tensor([1, 0]).cuda()
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        a // b
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        a % b


def test_remainder_gradient_on_cuda():
    a = np.array([5.5, -3.25, 7.0])
    x, xc = tg.tensor(a, requires_grad=True), tg.tensor(a).cuda().requires_grad_()
    y, yc = tg.tensor([2.0, 2.0, -3.0], requires_grad=True), tg.tensor([2.0, 2.0, -3.0]).cuda().requires_grad_()
    (x % y).sum().backward()
    (xc % yc).sum().backward()
    np.testing.assert_array_equal(xc.grad.cpu().numpy(), x.grad.numpy())
    np.testing.assert_array_equal(yc.grad.cpu().numpy(), y.grad.numpy())
