"""Factories and resampling over symbolic sizes: arange with whole-number float arguments and eye stay
symbolic (one trace with dynamic=True), interpolate compiles its sizes in with a guard (never a lost
symbolic compile); values and gradients == eager at every size of generated sequences with 0 and 1."""
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
@given(ts=st.lists(st.sampled_from([1, 2, 3, 6]), min_size=3, max_size=5))
def test_interpolate_pins_its_sizes_with_a_guard(ts):
    """nearest built its index array from a symbolic size (a NumPy object array: the symbolic compile was
    lost); now int() records the guard, and a new size retraces with 'guard S0 == ...' as its reason."""
    for mode, kw in [("nearest", {"scale_factor": 2}), ("nearest", {"size": (5,)}),
                     ("linear", {"scale_factor": 1.5}), ("linear", {"size": (4,), "align_corners": True})]:
        dynamic, _ = agree(lambda x: F.interpolate(x, mode=mode, **kw) * 2.0, [(2, 3, t) for t in [4, *ts]])
        assert all("guard" in r for r in dynamic.stats()["retrace_reasons"]), dynamic.stats()["retrace_reasons"]
