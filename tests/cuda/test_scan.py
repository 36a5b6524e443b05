"""prod, prod_others (prod's gradient) and cumsum on cuda (simulator) against NumPy and the cpu:
generated shapes (odd, empty, unit axes), strided inputs, any axes, keepdims, reverse, NaN/inf/zeros,
float32/float64/float16/int32/int64/bool; values and gradients, eager and compiled (backend "cuda");
rows cut into several chunks (scan.MIN_CHUNK lowered) and not."""
import os

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import tracegrad as tg
from tracegrad.backends.cuda.eager import scan

EXAMPLES = int(os.environ.get("TRACEGRAD_HYPOTHESIS_EXAMPLES", "10"))
DTYPES = [tg.float32, tg.float64, tg.float16, tg.int32, tg.int64, tg.bool]
TOL = {tg.float16: 2e-2, tg.float32: 1e-5, tg.float64: 1e-12}


def _values(draw, shape, dtype):
    n = int(np.prod(shape))
    if dtype is tg.bool:
        return np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), bool).reshape(shape)
    pool = [-2, -1, 0, 1, 2, 3] if not dtype.is_floating_point else \
        [-1.5, -1.0, -0.75, 0.0, 0.5, 1.25, 2.0, np.nan, np.inf, -np.inf]
    flat = draw(st.lists(st.sampled_from(pool), min_size=n, max_size=n))
    return np.array(flat, np.float64).reshape(shape).astype(dtype.np)


@st.composite
def cases(draw):
    shape = tuple(draw(st.lists(st.sampled_from([0, 1, 2, 3, 5]), min_size=0, max_size=3)))
    dtype = draw(st.sampled_from(DTYPES))
    a = _values(draw, shape, dtype)
    transpose = draw(st.booleans()) and len(shape) >= 2
    op = draw(st.sampled_from(["prod", "cumsum", "cumsum_rev", "prod_others"]))
    nd = len(shape)
    if op == "prod":
        axis = draw(st.sampled_from([None] + list(range(-nd, nd)) + ([(0, nd - 1)] if nd >= 2 else [])))
    elif op == "prod_others":
        axis = tuple(sorted(draw(st.sets(st.integers(0, nd - 1), max_size=nd)))) if nd else ()
    else:
        axis = draw(st.integers(-nd, nd - 1)) if nd else 0
    return a, dtype, transpose, op, axis, draw(st.booleans()), draw(st.sampled_from([1, 2, 16]))


def _run(x, op, axis, keepdims):
    if op == "prod":
        return x.prod(axis, keepdims=keepdims)
    if op == "cumsum":
        return x.cumsum(axis)
    from tracegrad.core import bind
    if op == "cumsum_rev":
        return bind("cumsum", x, axis=axis % max(x.ndim, 1), reverse=True)
    return bind("prod_others", x, axis=axis)


@settings(max_examples=EXAMPLES * 4, deadline=None)
@given(cases())
@example((np.array([[2.0, 0.0, 3.0], [np.inf, 0.0, 1.0]], np.float32), tg.float32, False, "prod_others", (1,), False,
          1))
@example((np.arange(40, dtype=np.float64).reshape(2, 20) % 7 - 3, tg.float64, True, "cumsum_rev", 0, False, 2))
def test_eager_matches_the_cpu(case):
    a, dtype, transpose, op, axis, keepdims, chunk = case
    old, scan.MIN_CHUNK = scan.MIN_CHUNK, chunk
    try:
        x, c = tg.tensor(a, dtype=dtype), tg.tensor(a, dtype=dtype, device="cuda")
        if transpose:                          # a strided (non-contiguous) input
            x, c = x.mT, c.mT
        want, got = _run(x, op, axis, keepdims), _run(c, op, axis, keepdims)
    finally:
        scan.MIN_CHUNK = old
    assert got.device == "cuda:0" and got.dtype is want.dtype and got.shape == want.shape
    w, g = want.numpy(), got.cpu().numpy()
    if dtype in TOL:
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=TOL[dtype],
                                   atol=TOL[dtype] * a.size)
    else:
        np.testing.assert_array_equal(g, w)


def test_cumsum_values_and_accuracy_against_numpy():
    a = np.random.default_rng(1).standard_normal((3, 97)).astype(np.float32)
    for axis in (0, 1, -1):
        got = tg.tensor(a, device="cuda").cumsum(axis).cpu().numpy()
        np.testing.assert_allclose(got, np.cumsum(a.astype(np.float64), axis), rtol=1e-6, atol=1e-5)
    c = tg.tensor(np.array([1, np.nan, 2, np.inf, -np.inf, 3]), device="cuda").cumsum(0).cpu().numpy()
    np.testing.assert_array_equal(c, np.cumsum([1, np.nan, 2, np.inf, -np.inf, 3]))
    i = tg.tensor(np.arange(-5, 30, dtype=np.int32), device="cuda").cumsum(0)
    assert i.dtype is tg.int64
    np.testing.assert_array_equal(i.cpu().numpy(), np.cumsum(np.arange(-5, 30)))


def test_prod_zeros_nan_inf_and_empty():
    a = np.array([[2.0, 0.0, np.inf], [np.nan, 1.0, 2.0], [-1.0, -2.0, 3.0]])
    c = tg.tensor(a, device="cuda")
    np.testing.assert_array_equal(c.prod(1).cpu().numpy(), np.prod(a, 1))
    np.testing.assert_array_equal(c.prod(0).cpu().numpy(), np.prod(a, 0))
    e = tg.zeros(3, 0, device="cuda")
    np.testing.assert_array_equal(e.prod(1).cpu().numpy(), np.ones(3))
    assert e.prod(0).shape == (0,) and e.cumsum(1).shape == (3, 0)


def test_prod_others_is_the_product_of_the_others():
    from tracegrad.core import bind
    a = np.array([[2.0, 0.0, 3.0, 5.0], [0.0, 0.0, 4.0, 1.0], [1.5, -2.0, 3.0, 2.0]])
    got = bind("prod_others", tg.tensor(a, device="cuda"), axis=(1,)).cpu().numpy()
    want = np.array([[np.prod(np.delete(r, j)) for j in range(4)] for r in a])
    np.testing.assert_array_equal(got, want)


GRADS = [
    lambda x: x.prod(1).sum(),
    lambda x: (x.prod(0) * tg.tensor([1.0, -2.0, 0.5], device=x.device)).sum(),
    lambda x: x.prod(),
    lambda x: (x.cumsum(1) ** 2).sum(),
    lambda x: (x.mT.cumsum(0) * x.mT).sum(),
    lambda x: x[:, ::2].cumsum(0).prod(1).sum(),
]


@pytest.mark.parametrize("f", GRADS)
@pytest.mark.parametrize("compiled", [False, True])
def test_gradients_match_the_cpu(f, compiled):
    a = np.array([[0.5, -1.25, 2.0], [1.5, 0.0, -0.75], [2.0, 1.0, 0.25], [-1.0, 3.0, 1.0]])
    got = {}
    for dev in ("cpu", "cuda"):
        x = tg.tensor(a, device=dev, requires_grad=True)
        y = (tg.compile(f) if compiled and dev == "cuda" else f)(x)
        (g,) = tg.grad(y, [x])
        got[dev] = (y.detach().cpu().numpy(), g.cpu().numpy())
    for c, w in zip(got["cuda"], got["cpu"]):
        np.testing.assert_allclose(c, w, rtol=1e-12, atol=1e-12)


def test_second_derivative_of_prod():
    a = np.array([[0.5, -1.25, 2.0], [1.5, 3.0, -0.75]])
    out = {}
    for dev in ("cpu", "cuda"):
        x = tg.tensor(a, device=dev, requires_grad=True)
        (g,) = tg.grad(x.prod(1).sum(), [x], create_graph=True)
        (h,) = tg.grad((g * g).sum(), [x])
        out[dev] = h.cpu().numpy()
    np.testing.assert_allclose(out["cuda"], out["cpu"], rtol=1e-12)


def test_compiled_on_cuda_runs_the_scan_on_the_device():
    f = tg.compile(lambda x: x.cumsum(1).prod(0))
    x = tg.tensor(np.linspace(-1, 1, 12).reshape(3, 4), device="cuda")
    with tg.cuda.memory.count_transfers() as c:
        y = f(x)
    assert c.count == 0 and y.device == "cuda:0"
    np.testing.assert_allclose(y.cpu().numpy(), np.cumsum(x.cpu().numpy(), 1).prod(0), rtol=1e-12)
