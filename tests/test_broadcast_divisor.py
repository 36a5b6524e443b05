"""A float division whose divisor is broadcast along its result (a softmax's row sum, a layer norm's
std: fusion's BROADCAST_DIV, decided by the graph's shapes) lowers on the CPU to a multiply by the
divisor's reciprocal, computed once per row; any other division stays a division. Values against
NumPy on odd sizes (rows of 1, 7, 1000, 1024, 4097), float32 and float64; subnormal, zero, infinite
and NaN divisors give what a / b gives."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tracegrad as tg
import tracegrad.nn.functional as F
from tracegrad.ir.divisors import broadcast_divisor
from tracegrad.ir.kernels import Const, Load

LENGTHS = [1, 7, 1000, 1024, 4097]


def _softmax(x):
    e = np.exp(x - x.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


def _layer_norm(x, eps=1e-5):
    d = x - x.mean(1, keepdims=True)
    return d / np.sqrt((d * d).mean(1, keepdims=True) + eps)


def _rtol(dtype):
    return 2e-6 if dtype == "float32" else 1e-13


@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_softmax_and_layer_norm_rows_match_numpy(n, dtype):
    a = np.random.default_rng(n).standard_normal((5, n)).astype(dtype)
    x = tg.tensor(a)
    got = tg.compile(lambda x: F.softmax(x, 1))(x).numpy()
    np.testing.assert_allclose(got, _softmax(a.astype(np.float64)), rtol=_rtol(dtype), atol=1e-7 if dtype == "float32" else 0)
    assert got.dtype == a.dtype
    got = tg.compile(lambda x: F.layer_norm(x, (n,)))(x).numpy()
    np.testing.assert_allclose(got, _layer_norm(a.astype(np.float64)), rtol=1e-4 if dtype == "float32" else 1e-10,
                               atol=1e-5 if dtype == "float32" else 1e-12)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_row_divisor_is_a_reciprocal_multiply_in_the_llvm_text(dtype):
    x = tg.tensor(np.ones((4, 64), dtype))
    by_row = tg.compile(lambda x: x / x.sum(1, keepdims=True)).ir(x, stage="llvm")
    ty = "float" if dtype == "float32" else "double"
    # the row's reciprocal: 1 / (s * scale), then two multiplies per element
    assert f"fdiv {ty} 0x3FF0000000000000," in by_row
    for other in (lambda x: x / (x + 1.0),                   # same shapes
                  lambda x: x / x.sum(0, keepdims=True),       # a divisor per column: it varies along rows
                  lambda x: x.T / x.T.sum(1, keepdims=True)):  # the same, seen transposed
        text = tg.compile(other).ir(x, stage="llvm")
        assert f"fdiv {ty} 0x3FF0000000000000," not in text and f"fdiv {ty} %" in text


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_special_divisors_give_what_division_gives(dtype):
    info = np.finfo(dtype)
    d = np.array([[info.smallest_subnormal], [info.tiny / 8], [0.0], [-0.0], [np.inf], [np.nan], [3.0], [-7.5],
                  [info.max], [-info.max / 3], [2.0 ** (info.maxexp - 2)]], dtype)
    a = np.tile(np.array([1.0, -2.5, 0.0, np.inf, info.tiny, 3.0], dtype), (len(d), 1))
    got = tg.compile(lambda a, d: a / d)(tg.tensor(a), tg.tensor(d)).numpy()
    with np.errstate(all="ignore"):
        want = a / d
    finite = np.isfinite(want)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    assert np.array_equal(got[~finite & ~np.isnan(want)], want[~finite & ~np.isnan(want)])
    np.testing.assert_allclose(got[finite], want[finite], rtol=4 * info.eps, atol=0)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=st.integers(1, 9), n=st.sampled_from(LENGTHS), dtype=st.sampled_from(["float32", "float64"]),
       seed=st.integers(0, 2**31 - 1), kind=st.sampled_from(["sum", "norm", "max", "scalar"]))
def test_generated_row_normalizations_match_numpy(rows, n, dtype, seed, kind):
    a = np.random.default_rng(seed).standard_normal((rows, n)).astype(dtype)
    fns = {"sum": (lambda x: x / x.abs().sum(1, keepdims=True), lambda x: x / np.abs(x).sum(1, keepdims=True)),
           "norm": (lambda x: (x * 2.0) / x.norm(dim=1, keepdim=True), lambda x: x * 2 / np.sqrt((x * x).sum(1, keepdims=True))),
           "max": (lambda x: x.exp() / (x.amax(1, keepdims=True) + 10.0), lambda x: np.exp(x) / (x.max(1, keepdims=True) + 10)),
           "scalar": (lambda x: x / x.sum(), lambda x: x / x.sum())}
    ours, numpy = fns[kind]
    got = tg.compile(ours)(tg.tensor(a)).numpy()
    want = numpy(a.astype(np.float64))
    scale = np.abs(want).max()
    np.testing.assert_allclose(got, want, rtol=1e-5 if dtype == "float32" else 1e-12,
                               atol=(1e-6 if dtype == "float32" else 1e-13) * scale)


def test_the_rule_follows_the_dividends_memory_order():
    def ld(*strides):
        return Load(_Buf(), strides)
    rows, cols = ld(8, 1), ld(1, 4)                    # (4, 8) read row-major, and transposed
    assert broadcast_divisor((4, 8), (4, 1), rows) and broadcast_divisor((4, 8), (), rows)
    assert not broadcast_divisor((4, 8), (1, 8), rows) and not broadcast_divisor((4, 8), (8,), rows)
    assert broadcast_divisor((4, 8), (1, 8), cols) and not broadcast_divisor((4, 8), (4, 1), cols)
    assert not broadcast_divisor((4, 8), (4, 8), rows) and not broadcast_divisor((1,), (), ld(1))
    assert broadcast_divisor((4, 8), (4, 1), Const(2.0, tg.float32))     # no loads: the last axis


class _Buf:
    dtype = tg.float32


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_divisors_of_the_top_binade_keep_their_bits(dtype):
    """A divisor whose reciprocal would be subnormal (|b| >= 2**(maxexp - 2)) is scaled down first: a / b
    within two roundings of the quotient, as for any normal divisor."""
    info = np.finfo(dtype)
    rng = np.random.default_rng(5)
    d = (rng.uniform(1, 3.9, (16, 1)) * 2.0 ** (info.maxexp - 2)).astype(dtype)
    a = (rng.standard_normal((16, 33)) * 2.0 ** (info.maxexp - 3)).astype(dtype)
    got = tg.compile(lambda a, d: a / d)(tg.tensor(a), tg.tensor(d)).numpy()
    np.testing.assert_allclose(got, a / d, rtol=2 * info.eps, atol=0)
