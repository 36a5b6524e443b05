"""Row kernels of the form reduce-max, then sum of exp(x - g(max)), then maps (softmax, log_softmax,
logsumexp, cross-entropy rows) walk each row once for both reductions (Schedule.online, read from
`stage="kernels"`), and compiled == interpret == NumPy on odd sizes, rows with NaN, +-inf and all
-inf, rows longer than one online block and than the scratch buffer, float32 and float64.

TRACEGRAD_ONLINE_EXAMPLES raises the hypothesis example count (default 20, for CI)."""
import os
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tracegrad as tg
import tracegrad.nn.functional as F
from tracegrad import scalar as S
from tracegrad.backends.cpu.machine import FIELDS
from tracegrad.ir.kernels import Const, Kernel, Load, Op, Phase
from tracegrad.ir.walks import online_pairs

EXAMPLES = int(os.environ.get("TRACEGRAD_ONLINE_EXAMPLES", "20"))
INF, NAN = np.inf, np.nan


def kernel_lines(fn, *arrays):
    ts = [tg.tensor(a) for a in arrays]
    return [line for line in tg.compile(fn).ir(*ts, stage="kernels").splitlines() if re.match(r"\s+k\d+ ", line)]


def np_softmax(x, axis=-1):
    e = np.exp(x - x.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


def np_log_softmax(x, axis=-1):
    m = x.max(axis, keepdims=True)
    d = x - np.where(np.abs(m) == INF, 0.0, m)
    return d - np.log(np.exp(d).sum(axis, keepdims=True))


def np_logsumexp(x, axis=-1):
    m = x.max(axis, keepdims=True)
    m = np.where(np.abs(m) == INF, 0.0, m)
    return np.squeeze(np.log(np.exp(x - m).sum(axis, keepdims=True)) + m, axis)


ROWS = {"softmax": (lambda t: tg.softmax(t, -1), np_softmax),
        "log_softmax": (lambda t: tg.log_softmax(t, -1), np_log_softmax),
        "logsumexp": (lambda t: tg.logsumexp(t, -1), np_logsumexp),
        "softmax_of_expr": (lambda t: tg.softmax(t * 0.5 + 1.0, -1), lambda x: np_softmax(x * 0.5 + 1.0))}


@pytest.mark.parametrize("name", sorted(ROWS))
def test_row_kernel_walks_max_and_sum_in_one_pass(name):
    x = np.random.default_rng(0).standard_normal((37, 301)).astype(np.float32)
    lines = kernel_lines(ROWS[name][0], x)
    assert lines[0].split()[1] == "[loop]" and lines[0].endswith("online=p0+p1"), lines


def test_cross_entropy_rows_are_online():
    x = np.random.default_rng(0).standard_normal((9, 13)).astype(np.float32)
    y = np.arange(9) % 13
    (first, *_) = kernel_lines(lambda x, y: F.cross_entropy(x, y), x, y)
    assert "ops=max+" in first and first.endswith("online=p0+p1"), first


def test_other_row_reductions_are_not_online():
    x = np.random.default_rng(0).standard_normal((9, 40)).astype(np.float32)
    for fn in (lambda t: (t - t.amax(-1, keepdims=True)).exp().mul(2.0).sum(-1),   # not a sum of exp(. - m)
               lambda t: t.amax(-1, keepdims=True) + t.sum(-1, keepdims=True),     # the sum does not read m
               lambda t: (t - t.mean(-1, keepdims=True)).exp().sum(-1)):            # a mean, not a max
        assert all("online" not in line for line in kernel_lines(fn, x))


def test_the_rule_reads_only_the_kernel_ir():
    """online_pairs() on a hand-made kernel: the max's value must be read only inside exp(a - g(m))."""
    class V:
        def __init__(self, shape):
            self.shape, self.dtype = shape, tg.float32
    x, m, s = V((4, 8)), V((4, 1)), V((4, 1))
    a, b = S.a, S.b

    def op(lower, *args):
        return Op("op", args, tg.float32, lower, "cheap")
    ld_x, ld_m = Load(x, (8, 1)), Load(m, (1, 0))
    mx = Phase("reduce", [(m, ld_x)], "max", (1,), S.maximum(a, b))
    good = Phase("reduce", [(s, op(S.exp(a), op(a - b, ld_x, ld_m)))], "sum", (1,), a + b)
    bad = Phase("reduce", [(s, op(S.exp(a), op(a - b, op(a * b, ld_x, ld_m), ld_m)))], "sum", (1,), a + b)
    const = Phase("reduce", [(s, op(S.exp(a), op(a - b, ld_x, Const(1.0, tg.float32))))], "sum", (1,), a + b)
    assert online_pairs(Kernel("loop", (4, 8), 1, [mx, good])) == [(0, 1)]
    assert online_pairs(Kernel("loop", (4, 8), 1, [mx, bad])) == []
    assert online_pairs(Kernel("loop", (4, 8), 1, [mx, const])) == []


# ------------------------------------------------------------------ compiled == interpret == NumPy

def _special_rows(x, rng):
    """Overwrite some rows with the cases a running maximum must get right."""
    n = x.shape[-1]
    cases = [lambda r: r.fill(-INF),                                     # all -inf
             lambda r: r.__setitem__(rng.integers(n), INF),              # one +inf
             lambda r: r.__setitem__(rng.integers(n), NAN),              # one NaN
             lambda r: r.__setitem__(slice(0, n // 2), -INF),            # -inf, then finite values
             lambda r: r.__setitem__(slice(None), np.linspace(-200, 200, n)),   # growing max: rescaled sums
             lambda r: r.__setitem__(slice(None), np.linspace(200, -200, n))]
    rows = x.reshape(-1, n)
    for i in range(min(len(rows), len(cases))):
        if rng.random() < 0.7:
            cases[i](rows[i])


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=st.integers(1, 9), cols=st.sampled_from([1, 2, 7, 33, 127, 129, 300, FIELDS["online_block"].default + 37, 8193]),
       lead=st.sampled_from([(), (3,)]), name=st.sampled_from(sorted(ROWS)),
       dtype=st.sampled_from([np.float32, np.float64]), seed=st.integers(0, 2 ** 16))
def test_compiled_matches_interpret_and_numpy(rows, cols, lead, name, dtype, seed):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(lead + (rows, cols)) * rng.choice([1.0, 30.0])).astype(dtype)
    _special_rows(x, rng)
    fn, ref = ROWS[name]
    with np.errstate(all="ignore"):
        want = ref(x.astype(np.float64))
    got = tg.compile(fn)(tg.tensor(x)).numpy()
    oracle = tg.compile(fn, backend="interpret")(tg.tensor(x)).numpy()
    tol = 2e-5 if dtype == np.float32 else 1e-12
    assert got.dtype == x.dtype
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    np.testing.assert_allclose(got, oracle, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_logsumexp_over_two_trailing_axes_and_gradients(dtype):
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((5, 6, 151)) * 20).astype(dtype)
    x[1, 2] = INF
    x[2] = -INF
    f = tg.compile(lambda t: tg.logsumexp(t, axis=(1, 2)))
    assert kernel_lines(lambda t: tg.logsumexp(t, axis=(1, 2)), x)[0].endswith("online=p0+p1")
    with np.errstate(all="ignore"):
        m = x.astype(np.float64).max((1, 2), keepdims=True)
        m = np.where(np.abs(m) == INF, 0.0, m)
        want = (np.log(np.exp(x - m).sum((1, 2), keepdims=True)) + m).reshape(5)
    np.testing.assert_allclose(f(tg.tensor(x)).numpy(), want, rtol=1e-5 if dtype == np.float32 else 1e-12)
    xs = tg.tensor(rng.standard_normal((4, 300)), requires_grad=True)            # float64: gradcheck
    assert tg.gradcheck(tg.compile(lambda t: tg.log_softmax(t, -1).square().sum()), (xs,))
