"""Views of cuda tensors with empty and size-1 axes, under numba's simulator, against the cpu: an
index or slice of an empty array has the offset it would have on a non-empty one (x[-5] of a
(17, 0) array starts at element 12 of no memory), which no device view may be built from.
Eager and compiled (backend "cuda"), values and gradients."""
import os

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

import tracegrad as tg

EXAMPLES = int(os.environ.get("TRACEGRAD_HYPOTHESIS_EXAMPLES", "10"))


@st.composite
def cases(draw):
    """(shape, integer index into axis 0 (negative allowed), slices of axis 1 and of the last axis)."""
    shape = tuple(draw(st.lists(st.integers(0, 3), min_size=2, max_size=3)))
    shape = (max(shape[0], 1),) + shape[1:]

    def slices(n):
        return slice(draw(st.integers(-n - 2, n + 2)), draw(st.integers(-n - 2, n + 2)), draw(st.sampled_from([1, 2])))
    return shape, draw(st.integers(-shape[0], shape[0] - 1)), slices(shape[1]), slices(shape[-1])


def program(i, s, t):
    def f(x):
        v = x[i][s][..., t]
        return v.exp() * 2, v.sum(), (v * v).sum(dim=0)
    return f


@settings(max_examples=EXAMPLES, deadline=None)
@given(case=cases(), compiled=st.booleans())
@example(case=((17, 0), -5, slice(None), slice(None)), compiled=False)     # the fuzzer's x[-5] of a (17, 0) array
@example(case=((2, 3, 3), -1, slice(3, None), slice(3, None)), compiled=False)   # x[1, 3:, 3:]: 21 elements into 18
@example(case=((2, 3, 3), -1, slice(3, None), slice(3, None)), compiled=True)
def test_empty_and_unit_views_match_the_cpu(case, compiled):
    shape, i, s, t = case
    xa = np.random.default_rng(0).standard_normal(shape)
    got = {}
    for dev in ("cpu", "cuda"):
        x = tg.tensor(xa, device=dev, requires_grad=True)
        f = program(i, s, t)
        outs = (tg.compile(f) if compiled and dev == "cuda" else f)(x)
        (g,) = tg.grad([o.sum() for o in outs], [x])
        got[dev] = [o.detach().cpu().numpy() for o in outs] + [g.cpu().numpy()]
    for c, want in zip(got["cuda"], got["cpu"]):
        assert c.shape == want.shape
        np.testing.assert_allclose(c, want, rtol=1e-12, atol=1e-12)
