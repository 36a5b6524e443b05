"""Compiled LLVM kernels keep IEEE semantics where NaN and +-inf are concerned: generated expressions
through std, var, softmax, log_softmax, layer_norm, division by row sums and pow
(x ** 0.5 is sqrt(x), as NumPy and PyTorch compute it), over inputs holding
0, -0, NaN, +-inf, subnormals and zero-spread rows, give eager's values and gradients (the oracle:
NumPy's arithmetic), with NaN and inf at the same places. Guards fast-math rewrites that turn a NaN
into a number (a float sum with `nsz` folded acc + (x - x) to acc; a hoisted reciprocal of a
subnormal row sum made x / s inf and 0 / s NaN).

TRACEGRAD_IEEE_EXAMPLES raises the hypothesis example count (default 6, for CI)."""
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tracegrad as tg
import tracegrad.nn.functional as F

EXAMPLES = int(os.environ.get("TRACEGRAD_IEEE_EXAMPLES", "6"))
TINY = {"float64": 1e-310, "float32": 1e-40}       # subnormal: 1 / TINY overflows


def _masked(x, y):
    """The fuzzer's repro: a mask from a comparison scales log_softmax, then std of zero-spread rows."""
    ls = F.log_softmax(x, 0)
    return ((~(ls == y)).to(ls.dtype) * ls + y).std(1, correction=0, keepdims=True)


EXPRS = {
    "std_rows": lambda x, y: (x + y).std(1, correction=0, keepdims=True),
    "std_cols": lambda x, y: (x * y).std(0),
    "var_rows": lambda x, y: (x - y).var(1, keepdims=True) * y[None],
    "softmax": lambda x, y: F.softmax(x, -1) * y,
    "log_softmax": lambda x, y: F.log_softmax(x + y, -1),
    "masked_log_softmax_std": _masked,
    "layer_norm": lambda x, y: F.layer_norm(x, (x.shape[1],), eps=0.0) * y,
    "div_row_sum": lambda x, y: x / (x * y).sum(1, keepdims=True),
    "div_row_max": lambda x, y: y[None] / x.amax(1, keepdims=True).abs(),     # max(0, -0): either zero
    "div": lambda x, y: (x - y) / (x + y),
    "pow": lambda x, y: x.abs() ** y + x ** 0.5 + x ** 3.0,
    "square_sum": lambda x, y: ((x - x.mean(1, keepdims=True)) ** 2).sum(1) / y.sum(),
}


def _pool(dtype):
    return [0.0, -0.0, 1.0, -1.0, 2.5, -3.0, 0.5, np.nan, np.inf, -np.inf, TINY[dtype]]


@st.composite
def _case(draw, dtype):
    rows, cols = draw(st.integers(1, 4)), draw(st.integers(1, 5))
    # subnormals never share a case with normal finite values: whether -1 + 0.5 + 0.5 + tiny is tiny
    # or 0 depends on the order of the additions (a rounding question, not an IEEE-special one)
    tiny = draw(st.booleans())
    pool = [v for v in _pool(dtype) if not np.isfinite(v) or v == 0 or (v == TINY[dtype]) == tiny]
    x = np.array(draw(st.lists(st.sampled_from(pool), min_size=rows * cols, max_size=rows * cols)))
    x = x.reshape(rows, cols)
    for r in draw(st.sets(st.integers(0, rows - 1), max_size=rows)):       # zero-spread rows
        x[r] = x[r, 0]
    y = np.array(draw(st.lists(st.sampled_from(pool), min_size=cols, max_size=cols)))
    return x.astype(dtype), y.astype(dtype)


def _run(fn, arrays, backend):
    ts = [tg.tensor(a, requires_grad=True) for a in arrays]
    out = (fn if backend is None else tg.compile(fn, backend=backend))(*ts)
    out.sum().backward()
    return [out.detach().numpy()] + [t.grad.numpy() for t in ts]


def _assert_same_ieee(got, want, what):
    """NaN, +inf and -inf at the same places; finite values close (fused sums reassociate)."""
    got, want = np.asarray(got), np.asarray(want)
    for name, mask in [("NaN", np.isnan), ("+inf", np.isposinf), ("-inf", np.isneginf)]:
        assert np.array_equal(mask(got), mask(want)), f"{what}: {name} positions differ\nllvm  {got}\neager {want}"
    fin = np.isfinite(want)
    tol = 1e-9 if want.dtype == np.float64 else 2e-4
    np.testing.assert_allclose(got[fin], want[fin], rtol=tol, atol=tol, err_msg=what)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("name", sorted(EXPRS))
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_llvm_keeps_nan_and_inf_as_eager(name, dtype, data):
    arrays = data.draw(_case(dtype))
    with np.errstate(all="ignore"):
        want = _run(EXPRS[name], arrays, None)
        got = _run(EXPRS[name], arrays, "llvm")
    for what, g, w in zip(["value", "grad x", "grad y"], got, want):
        _assert_same_ieee(g, w, f"{name} {dtype} {what} for x={arrays[0]!r} y={arrays[1]!r}")


def test_fuzz_repro_std_gradient_at_zero_spread_is_nan():
    """graph-llvm-value-grad-s839687062-n1551: a size-1 std axis, so every row has zero spread; the
    gradient of y sums std's 0/0 terms over the rows: NaN, as PyTorch gives (llvm gave 0)."""
    x = np.array([[0.3], [-1.2]])
    y = np.array([0.7])
    got, want = _run(_masked, [x, y], "llvm"), _run(_masked, [x, y], None)
    assert np.isnan(want[2]).all()
    for g, w in zip(got, want):
        _assert_same_ieee(g, w, "repro")


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_division_by_subnormal_row_sum(dtype):
    """x / s for a row sum s = TINY: 1 / s overflows, so a hoisted plain reciprocal gives inf and NaN."""
    x = np.array([[TINY[dtype], 0.0, -TINY[dtype], TINY[dtype]]], dtype)
    got = tg.compile(lambda t: t / t.sum(1, keepdims=True))(tg.tensor(x)).numpy()
    np.testing.assert_array_equal(got, x / x.sum(1, keepdims=True))
