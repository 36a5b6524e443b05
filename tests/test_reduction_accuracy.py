"""Compiled float sums are at least as accurate as NumPy's pairwise sums (backends/cpu/reductions.py: blocked
partial sums joined in float64; float64 block sums joined pairwise), whatever the length, the
memory order (transposed views) or the split across threads. The exceptions: float64 sums over
leading axes into an output array add in order (NumPy does too, unless the axis is contiguous), and
so do float64 rows shorter than one block (BLOCK elements) when LLVM vectorizes across rows: the
sequential bound applies to them. A float32 sum over leading axes adds OUTER_BLOCK rows in float32
before they join its float64 array: the sequential bound of that many terms applies (a column sum
of 15 rows was 2.0 eps of the magnitudes off, NumPy's pairwise sum of the same column 1.2)."""
import math
import os
import re

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import tracegrad as tg
from tracegrad.backends.cpu.llvm import OUTER_BLOCK
from tracegrad.backends.cpu.reductions import BLOCK

EPS = {np.float32: float(np.finfo(np.float32).eps), np.float64: float(np.finfo(np.float64).eps)}


def _exact(a, axis=None):
    """The sum of a's elements (already in their dtype) exactly rounded to float64, and the sum of
    their magnitudes (the scale of any summation's rounding error)."""
    a = np.asarray(a, np.float64)
    if axis is None:
        return math.fsum(a.ravel()), float(np.abs(a).sum())
    return np.apply_along_axis(math.fsum, axis, a), np.abs(a).sum(axis=axis)


def _as_accurate_as_numpy(got, numpy_value, exact, dtype, terms=None, f32_terms=None):
    """Compiled error within NumPy's, or within two machine epsilons of the terms' magnitudes
    (rounding). `terms`: a float64 sum into an output array (over leading axes) adds its `terms`
    values in order, as NumPy does for such axes: the sequential bound (terms - 1) * eps applies.
    `f32_terms`: the same for a float32 sum that adds that many values in float32 before a float64
    join."""
    exact, scale = exact
    err = lambda v: float(np.max(np.abs(np.asarray(v, np.float64) - exact) / scale))  # noqa: E731
    ours, theirs = err(got), err(numpy_value)
    in_order = terms if dtype == np.float64 else f32_terms
    bound = max(theirs, 2 * EPS[dtype], (in_order - 1) * EPS[dtype] if in_order else 0)
    assert ours <= bound, f"compiled error {ours:.3g}, NumPy's {theirs:.3g} (of the magnitudes)"


SQ = tg.compile(lambda a: (a * a).sum())
ROWS = tg.compile(lambda a: a.sum(axis=1))
COLS = tg.compile(lambda a: a.sum(axis=0))
MEAN_ROWS = tg.compile(lambda a: a.mean(axis=1))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_big_sums_of_squares_flat_and_through_a_transposed_view(dtype):
    rng = np.random.default_rng(0)
    a = (rng.standard_normal(1 << 22) + 0.25).astype(dtype)          # 4M values
    sq = a * a                                                      # the products, rounded as compiled code does
    _as_accurate_as_numpy(SQ(tg.from_numpy(a)).item(), sq.sum(), _exact(sq), dtype)
    m = (rng.standard_normal((1024, 1536)) + 0.25).astype(dtype)
    t = tg.from_numpy(m).permute(1, 0)                              # walked in storage order
    _as_accurate_as_numpy(SQ(t).item(), (m.T * m.T).sum(), _exact(m * m), dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_row_and_column_sums(dtype):
    rng = np.random.default_rng(1)
    rows = (rng.standard_normal((16, 1 << 16)) + 0.25).astype(dtype)
    _as_accurate_as_numpy(ROWS(tg.from_numpy(rows)).numpy(), rows.sum(axis=1), _exact(rows, 1), dtype)
    cols = (rng.standard_normal((1 << 15, 8)) + 0.25).astype(dtype)
    _as_accurate_as_numpy(COLS(tg.from_numpy(cols)).numpy(), cols.sum(axis=0), _exact(cols, 0), dtype,
                          terms=cols.shape[0])
    t = tg.from_numpy(cols).permute(1, 0)                           # rows of a transposed view
    _as_accurate_as_numpy(ROWS(t).numpy(), cols.T.sum(axis=1), _exact(cols, 0), dtype)
    mean = MEAN_ROWS(t).numpy()
    _as_accurate_as_numpy(mean, cols.T.mean(axis=1), tuple(e / cols.shape[0] for e in _exact(cols, 0)), dtype)


@settings(max_examples=int(os.environ.get("TG_ACCURACY_EXAMPLES", 25)), deadline=None)
@given(n=st.integers(1, 5000), m=st.integers(1, 40), seed=st.integers(0, 2 ** 32 - 1),
       dtype=st.sampled_from([np.float32, np.float64]), transpose=st.booleans())
@example(n=3062, m=15, seed=1005394, dtype=np.float32, transpose=True)    # 15 rows added in float32
def test_generated_sums(n, m, seed, dtype, transpose):
    a = (np.random.default_rng(seed).standard_normal((n, m)) + 0.5).astype(dtype)
    x = tg.from_numpy(a).permute(1, 0) if transpose else tg.from_numpy(a)
    v = a.T if transpose else a
    _as_accurate_as_numpy(SQ(x).item(), (v * v).sum(), _exact(a * a), dtype)
    _as_accurate_as_numpy(ROWS(x).numpy(), v.sum(axis=1), _exact(v, 1), dtype,
                          terms=v.shape[1] if v.shape[1] < BLOCK else None)
    _as_accurate_as_numpy(COLS(x).numpy(), v.sum(axis=0), _exact(v, 0), dtype, terms=v.shape[0],
                          f32_terms=min(v.shape[0], OUTER_BLOCK))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_rows_blocks_stay_a_loop(dtype):
    """A row of many blocks walks them in a loop LLVM keeps rolled (ROLLED on the block loop's back edge):
    unrolled whole, W3's layer-norm backward was 27 KB of straight code per 1024-element row (8 blocks of
    its 4 row sums), 10% slower than rolled. The sums stay as accurate as NumPy's."""
    from tracegrad.backends.cpu.loops import ROLLED
    a = np.random.default_rng(7).standard_normal((6, 9 * BLOCK + 5)).astype(dtype) + 0.5
    x = tg.from_numpy(a)
    text = ROWS.ir(x, stage="llvm")
    blocks = re.search(rf"(%v\d+) = sdiv i64 %v\d+, {BLOCK}\n", text).group(1)     # the row's count of blocks
    head = re.search(rf"\n(L\d+):\n[^\n]*\n[^\n]*icmp slt i64 %v\d+, {blocks}\n", text).group(1)
    assert f"br label %{head}, {ROLLED}" in text
    _as_accurate_as_numpy(ROWS(x).numpy(), a.sum(axis=1), _exact(a, axis=1), dtype)
