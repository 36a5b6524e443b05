"""argmax/argmin on cuda (simulator) against NumPy: any axis or all, keepdims, strided inputs, ties
(first occurrence), NaN (the first NaN), negative numbers, int/float/bool dtypes; x.max(dim) /
x.min(dim) values, indices and gradients against the cpu."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tracegrad as tg
from tracegrad.backends.cuda.eager import argreduce

DTYPES = [tg.float32, tg.float64, tg.int64, tg.int32, tg.float16]


def _values(draw, shape, dtype):
    # few distinct values (ties), negatives, and NaN in float inputs
    pool = [-3, -1, 0, 2, 5] + ([np.nan] if dtype.is_floating_point else [])
    flat = draw(st.lists(st.sampled_from(pool), min_size=int(np.prod(shape)), max_size=int(np.prod(shape))))
    return np.array(flat, dtype=np.float64).reshape(shape).astype(dtype.np)


@st.composite
def cases(draw):
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=0, max_size=3)))
    dtype = draw(st.sampled_from(DTYPES))
    a = _values(draw, shape, dtype)
    axis = draw(st.sampled_from([None] + list(range(-len(shape), len(shape)))))
    transpose = draw(st.booleans()) and len(shape) >= 2
    return a, dtype, axis, draw(st.booleans()), transpose, draw(st.sampled_from(["argmax", "argmin"]))


@settings(max_examples=25, deadline=None)
@given(cases())
def test_argreduce_matches_numpy(case):
    a, dtype, axis, keepdims, transpose, name = case
    x = tg.tensor(a, dtype=dtype)
    c = x.cuda()
    if transpose:                          # a strided (non-contiguous) input
        x, c = x.mT, c.mT
    got = getattr(c, name)(axis, keepdims=keepdims)
    want = getattr(x, name)(axis, keepdims=keepdims)
    ref = getattr(np, name)(x.numpy(), axis=axis, keepdims=keepdims)
    assert got.device == "cuda:0" and got.dtype is tg.int64 and got.shape == want.shape
    np.testing.assert_array_equal(got.cpu().numpy(), ref)


def test_ties_nan_and_sliced_rows():
    a = np.array([[1.0, 5.0, 5.0, np.nan, np.nan, -2.0],
                  [-7.0, -7.0, 3.0, 3.0, -7.0, 0.0],
                  [np.nan, 1.0, 2.0, 3.0, 4.0, np.nan]], np.float32)
    c = tg.tensor(a).cuda()
    np.testing.assert_array_equal(c.argmax(1).cpu().numpy(), [3, 2, 0])
    np.testing.assert_array_equal(c.argmin(1).cpu().numpy(), [3, 0, 0])
    np.testing.assert_array_equal(c[1:, 1::2].argmin(1).cpu().numpy(), np.argmin(a[1:, 1::2], 1))
    assert int(c.argmax().cpu().numpy()) == 3 and int(c[1].argmin().cpu().numpy()) == 0


def test_whole_tensor_over_many_chunks(monkeypatch):
    monkeypatch.setattr(argreduce, "PARTS", 6)    # chunks of several elements, a short last one
    a = np.arange(53, dtype=np.float64) % 11      # ties across chunks: the first occurrence wins
    c = tg.tensor(a).cuda()
    assert int(c.argmax().cpu().numpy()) == 10 and int(c.argmin().cpu().numpy()) == 0
    assert int(tg.tensor(-a).cuda()[::2].argmin().cpu().numpy()) == np.argmin(-a[::2])
    a[40], a[50] = np.nan, np.nan
    assert int(tg.tensor(a).cuda().argmax().cpu().numpy()) == 40


def test_bool_argmax():
    a = np.array([[False, True, True], [False, False, False]])
    np.testing.assert_array_equal(tg.tensor(a).cuda().argmax(1).cpu().numpy(), [1, 0])


@pytest.mark.parametrize("kind,dim", [("max", 1), ("min", 0), ("max", -1)])
def test_max_min_dim_values_indices_grad(kind, dim):
    a = np.array([[1.0, 3.0, 3.0], [-2.0, -5.0, -5.0]])
    x = tg.tensor(a, requires_grad=True)
    c = tg.tensor(a).cuda().requires_grad_()
    rx, rc = getattr(x, kind)(dim), getattr(c, kind)(dim)
    np.testing.assert_array_equal(rc.values.detach().cpu().numpy(), rx.values.detach().numpy())
    np.testing.assert_array_equal(rc.indices.cpu().numpy(), rx.indices.numpy())
    w = np.array([2.0, -1.0, 0.5])[: rx.values.shape[0]]
    (rx.values * tg.tensor(w)).sum().backward()
    (rc.values * tg.tensor(w).cuda()).sum().backward()
    np.testing.assert_array_equal(c.grad.cpu().numpy(), x.grad.numpy())


def test_accuracy_line():
    logits = tg.tensor([[0.1, 2.0, -1.0], [3.0, 3.0, 0.0], [-1.0, -2.0, -0.5]]).cuda()
    y = tg.tensor([1, 1, 2]).cuda()
    acc = (logits.argmax(1) == y).float().mean()
    assert acc.device == "cuda:0" and float(acc.cpu().numpy()) == pytest.approx(2 / 3)
