"""Reductions across a unit-stride kept axis (sums over a transposed view's rows = over the columns of
memory) made of independent reductions only walk memory in order, whole rows, and threads split the
rows, each chunk with its own vectors of partial results (Schedule.rows): `loops=` lists the
reduced axes first and `threads=` the axis the threads split, read from `stage="kernels"`. Kernels
with a map phase or a reduction reading another keep tiles of the kept axis (a softmax of such a
view is a column walk: test_transposed_normalizations.py). Values against NumPy in
float64 and the interpret backend on odd sizes, float32 / float64 / int64, transposed, permuted and
sliced inputs, every kernel split into chunks or none; gradients against central differences.

TRACEGRAD_ACROSS_EXAMPLES raises the hypothesis example count (default 20, for CI)."""
import os
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tracegrad as tg
from tracegrad.backends.cpu import machine

EXAMPLES = int(os.environ.get("TRACEGRAD_ACROSS_EXAMPLES", "20"))


def _lines(fn, *args):
    return [ln for ln in tg.compile(fn).ir(*args, stage="kernels").splitlines() if re.match(r"\s+k\d+ ", ln)]


def _t(shape, dtype=np.float32, seed=0):
    return tg.tensor(np.random.default_rng(seed).standard_normal(shape).astype(dtype))


def test_column_sums_of_a_transposed_view_walk_whole_rows():
    x, w = _t((1031, 37)), _t(37, seed=1)
    (line,) = _lines(lambda x, w: (x.T.sum(1), (x.T * w[:, None]).amax(1)), x, w)
    assert "loops=d1,d0 reduce=across d0 threads=d1" in line, line


def test_permuted_view_reduced_axes_in_memory_order():
    x = _t((5, 7, 3))           # z = x.permute(2, 0, 1): kept axis d0 is x's unit-stride one
    (line,) = _lines(lambda x: x.permute(2, 0, 1).sum((1, 2)), x)
    assert "loops=d1,d2,d0 reduce=across d0 threads=d1" in line, line


@pytest.mark.parametrize("fn,shape", [
    (lambda x: ((x.T - x.T.mean(1, keepdims=True)) ** 2).sum(1), (301, 17)),   # reads the mean
    (lambda x: x.T.sum(1), (3, 9000)),                                        # a long kept axis
])
def test_maps_dependent_reductions_and_long_kept_axes_keep_tiles(fn, shape):
    lines = _lines(fn, _t(shape))
    assert any("reduce=across" in ln for ln in lines) and not any("threads=" in ln for ln in lines), lines


PROGRAMS = {
    # fn(x, w) on z = a view of x whose unit-stride axis is z's axis 0; numpy oracle
    "sum": (lambda z, w: z.sum(1), lambda z, w: z.sum(1)),
    "mean_keepdims": (lambda z, w: z.mean(1, keepdims=True), lambda z, w: z.mean(1, keepdims=True)),
    "max_min": (lambda z, w: (z.amax(1), (z * w).amin(1)), lambda z, w: (z.max(1), (z * w).min(1))),
    "two_sums": (lambda z, w: ((z * w).sum(1), (z * z - w).sum(1)), lambda z, w: ((z * w).sum(1), (z * z - w).sum(1))),
}


def _view(a, layout):
    """(array holding x, z = its view with the unit-stride axis first as a function of the tensor)."""
    if layout == "transposed":
        return a, lambda x: x.T
    if layout == "sliced":
        big = np.zeros((a.shape[0] + 3, 2 * a.shape[1]), a.dtype)
        big[3:, 1::2] = a
        return big[3:, 1::2], lambda x: x.T
    return a.reshape(a.shape[0], 1, a.shape[1]), lambda x: x.permute(2, 0, 1).reshape((x.shape[2], x.shape[0]))


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=st.sampled_from([1, 2, 129, 1031, 4097]), cols=st.sampled_from([1, 3, 33, 511]),
       name=st.sampled_from(sorted(PROGRAMS)), dtype=st.sampled_from([np.float32, np.float64, np.int64]),
       layout=st.sampled_from(["transposed", "sliced", "permuted"]), split=st.booleans(),
       seed=st.integers(0, 2 ** 16))
def test_compiled_matches_numpy_and_interpret(rows, cols, name, dtype, layout, split, seed):
    fn, oracle = PROGRAMS[name]
    if dtype == np.int64 and name == "mean_keepdims":
        return
    rng = np.random.default_rng(seed)
    a = rng.integers(-1000, 1000, (rows, cols)) if dtype == np.int64 else rng.standard_normal((rows, cols))
    held, view = _view(a.astype(dtype), layout)
    w0 = (rng.integers(-9, 9, rows) if dtype == np.int64 else rng.standard_normal(rows)).astype(dtype)
    args = (tg.tensor(held), tg.tensor(w0))

    def g(x, w):
        return fn(view(x), w)
    with machine.override(**({"parallel_min_work": 1} if split else {})):
        got = tg.compile(g)(*args)
    got = [t.numpy() for t in (got if isinstance(got, tuple) else (got,))]
    ref = tg.compile(g, backend="interpret")(*args)
    ref = [t.numpy() for t in (ref if isinstance(ref, tuple) else (ref,))]
    wide = np.int64 if dtype == np.int64 else np.float64
    want = oracle(a.T.astype(wide), w0.astype(wide))
    want = list(want) if isinstance(want, tuple) else [want]
    for o, r, wv in zip(got, ref, want):
        if dtype == np.int64:
            np.testing.assert_array_equal(o, wv)
            np.testing.assert_array_equal(o, r)
        else:
            tol = 1e-5 if dtype == np.float32 else 1e-12
            scale = max(np.abs(wv).max(), 1.0) if wv.size else 1.0
            np.testing.assert_allclose(o, wv, rtol=tol, atol=tol * scale)
            np.testing.assert_allclose(o, r, rtol=tol, atol=tol * scale)


def test_column_centering_gradients_match_central_differences():
    """W7's function at a small size: the mean over the transposed view's rows and the backward's
    two sums by rows, their gradients against float64 central differences."""
    rng = np.random.default_rng(7)
    x = tg.tensor(rng.standard_normal((29, 13)) + 0.25, requires_grad=True)
    w = tg.tensor(rng.standard_normal(13), requires_grad=True)

    def loss(x, w):
        z = x.T
        y = (z - z.mean(axis=1, keepdims=True)) * w[:, None]
        return (y * y).sum() / 29
    f = tg.compile(loss)
    assert any("threads=" in ln for ln in _lines(loss, x, w)), _lines(loss, x, w)
    assert tg.gradcheck(f, (x, w))
