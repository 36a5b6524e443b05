"""Factories and resampling over symbolic sizes: arange with whole-number or binary-fraction arguments, eye
and interpolate with an exact output size stay symbolic (one trace with dynamic=True); a decimal step or
factor compiles the size in with a guard that says why (never a lost symbolic compile); values and
gradients == eager at every size of generated sequences with 0 and 1."""
import warnings

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tracegrad as tg
import tracegrad.nn.functional as F

SETTINGS = settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck))
SIZES = st.lists(st.sampled_from([0, 1, 2, 3, 6]), min_size=3, max_size=5)


def _run(f, a):
    x = tg.tensor(a, requires_grad=True)
    try:
        y = f(x)
        (y * 1.5).sum().backward()
    except (IndexError, RuntimeError, ValueError) as e:
        return type(e)
    return y.dtype, y.detach().numpy(), x.grad.numpy()


def agree(fn, shapes):
    """(the dynamic=True compile, the default compile) after both == eager at each shape."""
    compiled = [tg.compile(fn, dynamic=True), tg.compile(fn)]
    rng = np.random.default_rng(0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)        # a lost symbolic compile warns
        for s in shapes:
            a = rng.standard_normal(s)
            want = _run(fn, a)
            for f in compiled:
                got = _run(f, a)
                if isinstance(want, type):
                    assert got is want, (s, got)
                    continue
                assert got[0] == want[0], (s, got[0], want[0])
                np.testing.assert_allclose(got[1], want[1], rtol=1e-12, err_msg=str(s))
                np.testing.assert_allclose(got[2], want[2], rtol=1e-12, err_msg=str(s))
    for f in compiled:
        assert f.stats()["symbolic_failures"] == []
    return compiled


@SETTINGS
@given(ts=SIZES)
def test_arange_with_float_arguments_stays_symbolic(ts):
    fns = [lambda x: x * tg.arange(0.0, x.shape[1], dtype=tg.float64),
           lambda x: x * tg.arange(x.shape[1] - 1, -1.0, -1.0, dtype=tg.float64),
           lambda x: x * tg.eye(x.shape[1], dtype=tg.float64)[:1]]
    for fn in fns:
        dynamic, _ = agree(fn, [(2, t) for t in [4, *ts]])
        assert dynamic.stats()["traces"] == 1, dynamic.stats()["retrace_reasons"]


@SETTINGS
@given(ts=SIZES)
def test_arange_with_a_binary_fraction_stays_symbolic(ts):
    """arange(0, T, 0.5), arange(T, 0, -0.25), arange(0.5, 2T), arange(-1.5, T - 3, 0.5): the length
    ceil((end - start) / step) is an exact expression of T (no pin, one trace: the sign of T - 3's range
    length may add a guard), the values eager's float64 start + i * step."""
    fns = [lambda x: x * tg.arange(0, x.shape[1], 0.5, dtype=tg.float64)[::2],
           lambda x: x * tg.arange(x.shape[1], 0, -0.25, dtype=tg.float64)[::4],
           lambda x: x * tg.arange(0.5, 2 * x.shape[1], dtype=tg.float64)[::2],
           lambda x: (x.sum() * tg.arange(-1.5, x.shape[1] - 3, 0.5, dtype=tg.float64)).sum()]
    for k, fn in enumerate(fns):
        dynamic, _ = agree(fn, [(2, t) for t in [4, *ts]])
        reasons = dynamic.stats()["retrace_reasons"]
        assert dynamic.stats()["traces"] == 1 or k == 3 and all("T >= 3" in r or "T < 3" in r for r in reasons), \
            reasons


def test_arange_with_a_decimal_step_pins_its_length_and_says_why():
    """arange(0, T, 0.7): eager's float quotient T / 0.7 follows no expression of T (torch.arange(0, 21, 0.7)
    has 31 values, not 30), so the length is compiled in, with a guard that names arange."""
    dynamic, _ = agree(lambda x: (x.sum() * tg.arange(0, x.shape[1], 0.7, dtype=tg.float64)).sum(),
                       [(2, 4), (2, 21), (2, 4)])
    assert dynamic.stats()["traces"] == 2
    assert "arange(0, T, 0.7)" in dynamic.stats()["retrace_reasons"][0], dynamic.stats()["retrace_reasons"]
    assert tg.arange(0, 21, 0.7).shape == (31,)


INTERPOLATIONS = [("nearest", {"scale_factor": 2}), ("nearest", {"size": (5,)}), ("nearest", {"scale_factor": 1.25}),
                  ("nearest", {"scale_factor": 0.5}), ("nearest-exact", {"scale_factor": 1.5}),
                  ("nearest-exact", {"size": (3,)}), ("linear", {"scale_factor": 1.5}),
                  ("linear", {"size": (4,), "align_corners": True}), ("linear", {"scale_factor": 2, "align_corners": True}),
                  ("linear", {"scale_factor": 0.75, "recompute_scale_factor": True})]


@SETTINGS
@given(ts=SIZES)
def test_interpolate_stays_symbolic_where_the_output_size_is_exact(ts):
    """An output size given, or floor(n * f) for a factor m / 2^k (2, 1.25, 0.5, 1.5, 0.75): the spatial size
    stays a symbol, the indices and weights are computed at the call as eager computes them (equal to
    1e-12 in float64, PyTorch's shortcuts out == n, out == 2n included); one trace with dynamic=True. Size 0
    (and an output size of 0) raise as eager does, a guard failure, not a wrong result."""
    for mode, kw in INTERPOLATIONS:
        dynamic, _ = agree(lambda x: F.interpolate(x, mode=mode, **kw) * 2.0, [(2, 3, t) for t in [4, *ts]])
        refused = sum(t == 0 or t == 1 and kw.get("scale_factor", 1) < 1 for t in ts)     # eager raised there
        reasons = dynamic.stats()["retrace_reasons"]
        assert dynamic.stats()["traces"] <= 1 + refused and all(r.startswith("guard") for r in reasons), (kw, reasons)


def test_bilinear_over_two_symbolic_sizes_one_trace():
    """Two spatial symbols: no guard orders them (the positivity checks are one guard each)."""
    dynamic, _ = agree(lambda x: F.interpolate(x, scale_factor=2, mode="bilinear") * 2.0,
                       [(1, 2, 4, 5), (1, 2, 6, 3), (1, 2, 1, 7), (1, 2, 2, 1)])
    assert dynamic.stats()["traces"] == 1, dynamic.stats()["retrace_reasons"]


def test_interpolate_with_a_decimal_factor_pins_the_size_and_says_why():
    dynamic, _ = agree(lambda x: F.interpolate(x, scale_factor=0.3) * 2.0, [(2, 3, 10), (2, 3, 7), (2, 3, 10)])
    assert dynamic.stats()["traces"] == 2
    assert "interpolate's scale_factor 0.3" in dynamic.stats()["retrace_reasons"][0]
