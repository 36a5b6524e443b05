"""copy_ and fill_ from a tensor that requires grad: the source gets the gradient of what was written,
summed over the axes it was broadcast along, whatever its shape (the same shape as the target
included: the source itself is the new value), leaf or not, eager and compiled; the target's old
value gets none."""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import tracegrad as tg


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(1, 3), min_size=1, max_size=3), st.data(), st.sampled_from(["copy_", "fill_"]),
       st.booleans(), st.booleans())
def test_the_source_gets_the_written_values_gradient(shape, data, method, leaf, compiled):
    shape = tuple(shape)
    if method == "fill_":
        src_shape = ()
    else:
        src_shape = tuple(data.draw(st.sampled_from([1, n])) for n in shape[data.draw(st.integers(0, len(shape))):])
    rng = np.random.default_rng(len(shape) * 7 + len(src_shape))
    av, bv, wv = rng.standard_normal(shape), rng.standard_normal(src_shape), rng.standard_normal(shape)

    def f(a, b):
        src = b if leaf else b * 1.0
        v = a * 2.0
        getattr(v, method)(src)
        return (v * tg.tensor(wv)).sum()
    a, b = tg.tensor(av, requires_grad=True), tg.tensor(bv, requires_grad=True)
    (tg.compile(f) if compiled else f)(a, b).backward()
    want = wv.sum(axis=tuple(range(len(shape) - len(src_shape))))
    want = want.sum(axis=tuple(d for d, n in enumerate(src_shape) if n == 1), keepdims=True).reshape(src_shape)
    np.testing.assert_allclose(b.grad.numpy(), want, rtol=1e-12)
    assert a.grad is None or not a.grad.numpy().any()
