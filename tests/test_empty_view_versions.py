"""Views of empty tensors are views, as in PyTorch: they share their base's version counter, so an
in-place update of the base after a view of it was saved for backward raises PyTorch's "modified by
an inplace operation" error in eager code as in compiled code (the fuzzer found `a @ c` on empty
vectors, then `a.mul_(2)` under no_grad: compiled raised, eager silently did not)."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tracegrad as tg

VIEWS = {
    "reshape": lambda t: t.reshape(1, *t.shape),
    "unsqueeze": lambda t: t.unsqueeze(0),
    "permute": lambda t: t.permute(*reversed(range(t.ndim))),
    "expand": lambda t: t.unsqueeze(0).expand(2, *t.shape),
    "slice": lambda t: t[1:],
    "view": lambda t: t.view(-1) if t.numel() else t.view(0),
    "flatten": lambda t: t.flatten(),
    "transpose": lambda t: t.transpose(0, -1),
}


@settings(max_examples=20, deadline=None)
@given(shape=st.lists(st.integers(0, 3), min_size=1, max_size=3).filter(lambda s: 0 in s),
       name=st.sampled_from(sorted(VIEWS)))
def test_views_of_empty_tensors_share_the_version_counter(shape, name):
    a = tg.tensor(np.zeros(shape))
    v = VIEWS[name](a)
    before = v._version
    a.mul_(2.0)
    assert v._version == a._version == before + 1
    if name != "expand":                            # (writes through an expand are refused)
        v.add_(1.0)                                 # and the other way round
        assert a._version == v._version == before + 2


@pytest.mark.parametrize("backend", [None, "interpret", "llvm"])
@pytest.mark.parametrize("n", [0, 3])
def test_inplace_update_of_a_saved_empty_input_raises_everywhere(backend, n):
    def f(x, y):
        v = x @ y
        with tg.no_grad():
            x.mul_(2.0)
        return tg.maximum(v, y)
    a, c = (tg.tensor(np.ones(n), requires_grad=True) for _ in range(2))
    fn = f if backend is None else tg.compile(f, backend=backend)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        fn(a, c).sum().backward()
