"""backends/cuda/run.overlapping: which arrays may share memory, found by sorting extents, is what comparing
every pair with np.may_share_memory says (views with steps, negative strides, empty, 0-d, apart)."""
import numpy as np
from hypothesis import given, settings, strategies as st

from tracegrad.backends.cuda.run import overlapping


@st.composite
def _arrays(draw):
    bases = [np.zeros(draw(st.integers(1, 40)), np.float32) for _ in range(draw(st.integers(1, 3)))]
    out = []
    for _ in range(draw(st.integers(0, 10))):
        b = bases[draw(st.integers(0, len(bases) - 1))]
        lo, hi = sorted(draw(st.lists(st.integers(0, len(b)), min_size=2, max_size=2)))
        step = draw(st.sampled_from([1, 2, 3, -1, -2]))
        a = b[lo:hi:step] if step > 0 else b[lo:hi][::step]
        if draw(st.booleans()) and a.size % 2 == 0 and a.size:
            a = a.reshape(2, -1)[:, ::-1] if draw(st.booleans()) else a.reshape(2, -1).T
        i = draw(st.integers(0, len(b) - 1))
        out.append(a if draw(st.integers(0, 5)) else b[i:i + 1].reshape(()))     # or a 0-d view
    return out


@settings(max_examples=200, deadline=None)
@given(_arrays())
def test_overlapping_is_may_share_memory_of_every_pair(arrays):
    pairs = {k: [j for j in range(len(arrays)) if j != k and np.may_share_memory(arrays[k], arrays[j])]
             for k in range(len(arrays))}
    assert overlapping(arrays) == {k: js for k, js in pairs.items() if js}
