"""Host implementations that take a faster route than NumPy's one call: running sums along outer
axes slice by slice (ops/reductions.py), the scatter-add of picked rows in rounds of distinct rows
(ops/indexing.py). Each gives NumPy's bits (cumsum, np.add.at), eager and compiled."""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import tracegrad as tg
from tracegrad.ops import indexing, reductions


@settings(max_examples=30, deadline=None, derandomize=True)
@given(st.lists(st.integers(1, 6), min_size=1, max_size=4), st.data(),
       st.sampled_from([np.float32, np.float64, np.int32, np.int64]), st.booleans(), st.sampled_from([1, 4, 128]))
def test_slicewise_running_sums_are_numpys(shape, data, dtype, reverse, threshold):
    axis = data.draw(st.integers(0, len(shape) - 1))
    x = (np.random.default_rng(len(shape) + axis).standard_normal(shape) * 5).astype(dtype)
    old = reductions.SLICEWISE_CUMSUM
    reductions.SLICEWISE_CUMSUM = threshold
    try:
        got = reductions._cumsum_impl(x, axis, reverse)
    finally:
        reductions.SLICEWISE_CUMSUM = old
    wide = x.astype(np.int64) if x.dtype.kind in "iu" else x
    want = np.flip(np.cumsum(np.flip(wide, axis), axis=axis), axis) if reverse else np.cumsum(wide, axis=axis)
    assert got.dtype == want.dtype and np.array_equal(got, want)


def test_compiled_cumsum_along_an_outer_axis_matches_numpy_float64():
    r = np.random.default_rng(2)
    x0, g0 = r.standard_normal((300, 5, 131)), r.standard_normal((300, 5, 131))
    x = tg.tensor(x0.astype(np.float32), requires_grad=True)
    loss = tg.compile(lambda x, g: (x.cumsum(0) * g).sum())(x, tg.tensor(g0.astype(np.float32)))
    loss.backward()
    want = (np.cumsum(x0, 0) * g0).sum()
    want_dx = np.flip(np.cumsum(np.flip(g0, 0), 0), 0)
    np.testing.assert_allclose(loss.item(), want, rtol=1e-4)
    np.testing.assert_allclose(x.grad.numpy(), want_dx, rtol=1e-4, atol=1e-4)


@settings(max_examples=30, deadline=None, derandomize=True)
@given(st.integers(1, 40), st.integers(1, 5), st.integers(1, 60), st.sampled_from([0, 1, 4]),
       st.sampled_from([np.float32, np.float64, np.int64]))
def test_scatter_add_of_rows_in_rounds_is_np_add_at(n, m, k, rounds, dtype):
    r = np.random.default_rng(n * 100 + k)
    idx = r.integers(-n, n, (k, 2))
    g = (r.standard_normal((k, 2, m)) * 4).astype(dtype)
    old = indexing.ROUNDS
    indexing.ROUNDS = rounds
    try:
        got = indexing._index_add_impl(g, idx, shape=(n, m), axes=(0,))
    finally:
        indexing.ROUNDS = old
    want = np.zeros((n, m), dtype)
    np.add.at(want, (idx,), g)
    assert np.array_equal(got, want)


def test_compiled_embedding_gradient_matches_numpy_float64():
    r = np.random.default_rng(4)
    W0, idx0, g0 = r.standard_normal((50, 7)), r.integers(0, 50, (30, 3)), r.standard_normal((30, 3, 7))
    W = tg.tensor(W0.astype(np.float32), requires_grad=True)
    loss = tg.compile(lambda W, i, g: (tg.nn.functional.embedding(i, W) * g).sum())(
        W, tg.tensor(idx0), tg.tensor(g0.astype(np.float32)))
    loss.backward()
    want = np.zeros_like(W0)
    np.add.at(want, idx0, g0)
    np.testing.assert_allclose(loss.item(), (W0[idx0] * g0).sum(), rtol=1e-4)
    np.testing.assert_allclose(W.grad.numpy(), want, rtol=1e-5, atol=1e-5)
