"""The IR's algebraic simplifications are exact in IEEE arithmetic: compiled code (interpret and
llvm) gives eager's values bit for bit, signed zeros and NaN included, for additions and
subtractions of zeros (x + 0.0 is +0.0 for x = -0.0, so only x + (-0.0) and x - 0.0 may become x),
products by one, divisions by one and powers. The fuzzer found `zeros_like(a) + a` folded to `a`,
so b / (zeros_like(a) + a) gave -inf where eager gives +inf."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tracegrad as tg

POOL = [0.0, -0.0, 1.0, -2.5, np.inf, -np.inf, np.nan, 1e-310]
EXPRS = {
    "zeros_like+x": lambda x: tg.zeros_like(x) + x,
    "x+zeros_like": lambda x: x + tg.zeros_like(x),
    "x+0.0": lambda x: x + 0.0,
    "0.0+x": lambda x: 0.0 + x,
    "x+(-0.0)": lambda x: x + (-0.0),
    "x-0.0": lambda x: x - 0.0,
    "x-(-0.0)": lambda x: x - (-0.0),
    "x-zeros_like": lambda x: x - tg.zeros_like(x),
    "zeros_like-x": lambda x: tg.zeros_like(x) - x,
    "x*1": lambda x: x * 1.0,
    "x/1": lambda x: x / 1.0,
    "x**1": lambda x: x ** 1.0,
    "1/(zeros+x)": lambda x: 1.0 / (tg.zeros_like(x) + x),
    "1/(x-0)": lambda x: 1.0 / (x - 0.0),
    "1/(x+(-0.0))": lambda x: 1.0 / (x + (-0.0)),
}


def _bits(a):
    """Values compared exactly: NaN as NaN, zeros with their sign."""
    a = np.asarray(a, np.float64)
    return np.where(np.isnan(a), np.nan, a).tolist(), np.signbit(a).tolist()


@pytest.mark.parametrize("backend", ["interpret", "llvm"])
@pytest.mark.parametrize("name", sorted(EXPRS))
@settings(max_examples=5, deadline=None)
@given(values=st.lists(st.sampled_from(POOL), min_size=1, max_size=9),
       dtype=st.sampled_from(["float32", "float64"]))
def test_simplified_expressions_are_exact(name, backend, values, dtype):
    fn = EXPRS[name]
    x = tg.tensor(np.array(values, dtype))
    want, got = fn(x).numpy(), tg.compile(fn, backend=backend)(x).numpy()
    w, g = _bits(want), _bits(got)
    np.testing.assert_array_equal(g[0], w[0], err_msg=f"{name} on {values}")
    assert g[1] == w[1], f"{name} on {values}: signs of zeros differ: {backend} {got}, eager {want}"


@pytest.mark.parametrize("fn,op", [(lambda x: x + (-0.0), None), (lambda x: x - 0.0, None),
                                   (lambda x: x + 0.0, "add"), (lambda x: x - (-0.0), "sub")])
def test_which_zeros_are_dropped(fn, op):
    """x + (-0.0) and x - 0.0 leave no add/sub in the forward graph; x + 0.0 and x - (-0.0) keep theirs."""
    x = tg.tensor(np.array([1.0, -0.0]))
    text = tg.compile(fn).ir(x, stage="forward")
    ops = {line.split("=")[1].split("(")[0].strip() for line in text.splitlines() if " = " in line}
    assert (op in ops) if op else not ops & {"add", "sub"}, text
