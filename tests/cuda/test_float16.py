"""float16 cuda tensors (simulator) against the cpu (NumPy's float16 loops: computed in float32, each
result rounded to float16 once): every elementwise primitive of the table whose lowering covers
float32, on generated shapes (broadcast, strided), values (NaN, inf, overflow past 65504, float16
subnormals); casts to and from float16 rounded once (float64 -> float16 directly, not through
float32); reductions; compiled programs (backend "cuda") == eager cpu; gradients."""
import inspect
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tracegrad as tg
from tracegrad.core import bind
from tracegrad.ops import PRIMS

EXAMPLES = int(os.environ.get("TRACEGRAD_HYPOTHESIS_EXAMPLES", "10"))
# the table's elementwise primitives a float16 operand may take (cast: its own tests, below)
OPS = sorted(n for n, p in PRIMS.items() if p.kind == "elementwise" and "float32" in p.dtypes and n != "cast")
POOL = [0.0, -0.0, 1.0, -2.5, 0.1, 3.14159, 1e-6, 6e-8, 60000.0, -65504.0, 300.0, np.nan, np.inf, -np.inf]


def _arity(name):
    if name == "where":
        return 3
    try:
        params = inspect.signature(PRIMS[name].impl).parameters.values()
    except ValueError:
        return PRIMS[name].impl.nin
    return sum(p.kind == p.POSITIONAL_ONLY or p.default is p.empty for p in params
               if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)) - (name == "round")


def _close_in_float16(got, want, ulps):
    got, want = got.astype(np.float64), want.astype(np.float64)
    same = (got == want) | (np.isnan(got) & np.isnan(want))
    near = np.abs(got - want) <= ulps * np.spacing(np.abs(want).astype(np.float16)).astype(np.float64)
    assert np.all(same | near), (got, want)


@st.composite
def cases(draw):
    name = draw(st.sampled_from(OPS))
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=2)))
    arrays = []
    for k in range(_arity(name)):
        s = shape if k == 0 or draw(st.booleans()) else shape[-1:]       # broadcast operands
        vals = draw(st.lists(st.sampled_from(POOL), min_size=int(np.prod(s)), max_size=int(np.prod(s))))
        a = np.array(vals).reshape(s).astype(np.float16)
        arrays.append(a > 0 if name == "where" and k == 0 else a)
    return name, arrays, draw(st.booleans())


@settings(max_examples=EXAMPLES * 4, deadline=None)
@given(cases())
def test_every_elementwise_primitive_matches_numpy_float16(case):
    name, arrays, transpose = case
    prep = (lambda a: a.mT) if transpose and all(a.ndim == 2 for a in arrays) else (lambda a: a)
    with np.errstate(all="ignore"):
        want = bind(name, *[prep(tg.tensor(a)) for a in arrays])
    got = bind(name, *[prep(tg.tensor(a, device="cuda")) for a in arrays])
    assert got.dtype is want.dtype and got.shape == want.shape and got.device == "cuda:0"
    g, w = got.cpu().numpy(), want.numpy()
    if w.dtype == np.float16:     # the math library's float32 results may differ in the last bit
        _close_in_float16(g, w, 0 if PRIMS[name].cost == "cheap" else 1)
    else:
        np.testing.assert_array_equal(g, w)


def test_casts_round_once():
    # float64 values just above a float16 tie: through float32 they would round to the tie (then even)
    ties = np.array([1 + 2.0 ** -11 + 2.0 ** -40, 2048 + 1 + 2.0 ** -30, 65519.99, 65520.0, 3e-8, -1e5])
    got = tg.tensor(ties, device="cuda").half().cpu().numpy()
    np.testing.assert_array_equal(got, ties.astype(np.float16))
    f32 = np.array([0.1, 1 / 3, 1e-7, 7e4, np.nan, -np.inf], np.float32)
    np.testing.assert_array_equal(tg.tensor(f32, device="cuda").half().cpu().numpy(), f32.astype(np.float16))
    h = np.array([0.1, -2.5, 65504, 6e-8, np.inf], np.float16)
    c = tg.tensor(h, device="cuda")
    for dtype in (tg.float32, tg.float64):
        np.testing.assert_array_equal(c.to(dtype).cpu().numpy(), h.astype(dtype.np))
    np.testing.assert_array_equal(c[:4].to(tg.int32).cpu().numpy(), h[:4].astype(np.int32))
    np.testing.assert_array_equal(c.bool().cpu().numpy(), h.astype(bool))
    np.testing.assert_array_equal(tg.tensor([3, -70000], device="cuda").half().cpu().numpy(),
                                  np.array([3, -70000]).astype(np.float16))


@pytest.mark.parametrize("name", ["sum", "amax", "amin", "mean", "prod", "cumsum"])
def test_reductions(name):
    a = np.random.default_rng(2).standard_normal((3, 37)) * 4
    a = (1 + a / 40 if name == "prod" else a).astype(np.float16)       # products within float16's range
    for axis in (0, 1):
        want = getattr(tg.tensor(a), name)(axis)
        got = getattr(tg.tensor(a, device="cuda"), name)(axis)
        assert got.dtype is tg.float16
        ref = getattr(np, {"amax": "max", "amin": "min"}.get(name, name))(a.astype(np.float64), axis)
        np.testing.assert_allclose(got.cpu().numpy().astype(np.float64), ref, rtol=4e-3, atol=4e-3 * a.shape[axis])
        np.testing.assert_allclose(got.cpu().numpy().astype(np.float64), want.numpy().astype(np.float64),
                                   rtol=1e-2, atol=1e-2 * a.shape[axis])


PROGRAMS = [
    lambda x, y: x * y + 1,
    lambda x, y: (x.float() * y.float()).exp().half() - x,
    lambda x, y: (x.tanh() * y).sum(1),
    lambda x, y: tg.where(x > y, x, y.mT.mT) * 0.5,
    lambda x, y: (x.double().sigmoid() * 3).half().amax(0),
]


@pytest.mark.parametrize("f", PROGRAMS)
def test_compiled_on_cuda_matches_eager_cpu(f):
    rng = np.random.default_rng(3)
    a, b = (rng.standard_normal((2, 6)) * 2).astype(np.float16), (rng.standard_normal((2, 6))).astype(np.float16)
    want = f(tg.tensor(a), tg.tensor(b))
    got = tg.compile(f)(tg.tensor(a, device="cuda"), tg.tensor(b, device="cuda"))
    assert got.dtype is want.dtype and got.device == "cuda:0"
    _close_in_float16(got.cpu().numpy(), want.numpy(), 1)


def test_gradients_of_float16_match_the_cpu():
    a = np.array([[0.5, -1.25, 2.0], [1.5, 0.25, -0.75]], np.float16)

    def f(x):
        return ((x * x).exp() * 0.5 + x.sigmoid()).sum()
    out = {}
    for dev in ("cpu", "cuda"):
        x = tg.tensor(a, device=dev, requires_grad=True)
        f(x).backward()
        out[dev] = x.grad.cpu().numpy()
        assert x.grad.dtype is tg.float16
    _close_in_float16(out["cuda"], out["cpu"], 1)


def test_matmul_and_indexing_gradient_in_float16():
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((2, 3, 5)).astype(np.float16), rng.standard_normal((5, 4)).astype(np.float16)
    got = (tg.tensor(a, device="cuda") @ tg.tensor(b, device="cuda")).cpu().numpy()
    assert got.dtype == np.float16
    _close_in_float16(got, (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float16), 1)
    idx = np.array([0, 2, 2, 4, 0, 0])
    out = {}
    for dev in ("cpu", "cuda"):
        x = tg.tensor(a[0], device=dev, requires_grad=True)
        (x[:, idx] * tg.tensor(np.arange(6, dtype=np.float16), device=dev)).sum().backward()
        out[dev] = x.grad.cpu().numpy()
    assert out["cuda"].dtype == np.float16
    np.testing.assert_array_equal(out["cuda"], out["cpu"])
