"""Eager elementwise and reduction kernels (tracegrad/backends/cuda/eager/pointwise.py) against each primitive's
own NumPy implementation: every lowered elementwise primitive for every dtype its lowering covers
(walking the table, as tests/test_table.py does), on transposed, broadcast and strided device
arrays of odd sizes; reductions over any axes of permuted views. Runs under numba's simulator."""
import os

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from numba import cuda

import tracegrad as tg
from tracegrad import core, scalar
from tracegrad.backends.cuda import memory
from tracegrad.backends.cuda.eager import pointwise
from tracegrad.ops import PRIMS

EXAMPLES = int(os.environ.get("TRACEGRAD_HYPOTHESIS_EXAMPLES", "6"))

ELEMENTWISE = sorted(n for n, p in PRIMS.items() if p.lower and p.kind == "elementwise")


SPECIAL = {"float": [-np.inf, -2.5, -1.0, -0.0, 0.0, 0.5, 1.0, 3.0, np.inf, np.nan],
           "int": [-7, -3, -1, 0, 0, 1, 2, 3, 5, 9], "bool": [True, False] * 5}


def sample(dtype, shape, rng):
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if dtype.startswith("int"):
        return rng.integers(-4, 5, shape).astype(dtype)
    return rng.uniform(0.25, 2.0, shape).astype(dtype)


def transposed(a):
    """A device view of `a` whose memory is column-major (a transposed copy viewed back)."""
    base = cuda.to_device(np.ascontiguousarray(a.T))
    return memory.view(base, a.shape, (1, a.shape[0]))


def strided(a):
    """A device view of `a` inside a larger buffer: a storage offset and every other column."""
    big = np.zeros((a.shape[0] + 1, 2 * a.shape[1] + 1), a.dtype)
    big[1:, 1::2] = a
    return memory.view(cuda.to_device(big), a.shape, (big.shape[1], 2), offset=big.shape[1] + 1)


def broadcast(col):
    """A device view repeating column `col` (n x 1) over n columns (stride 0)."""
    return memory.view(cuda.to_device(np.ascontiguousarray(col[:, 0])), (len(col), len(col)), (1, 0))


def arity(p):
    return scalar.arity(p.lower)


@pytest.mark.parametrize("dtype", core.ALL)
def test_each_lowered_elementwise_primitive_matches_numpy(dtype):
    """Every lowered elementwise primitive on dtype, on zeros, negatives, infinities and NaN (each
    value against every other: a 10 x 10 outer product; signed zeros as NumPy's), its operands a
    transposed view, a strided view with an offset and a broadcast (stride 0) view."""
    kind = "float" if dtype.startswith("float") else "int" if dtype.startswith("int") else "bool"
    vals = np.array(SPECIAL[kind], dtype)
    grid_a, grid_b = np.meshgrid(vals, vals, indexing="ij")
    ran = 0
    for name in ELEMENTWISE:
        p = PRIMS[name]
        if dtype not in p.dtypes:
            continue
        host = [grid_a, grid_b, grid_a[:, :1].repeat(len(vals), 1)][:arity(p)]
        if name == "where":
            host[0] = grid_a != grid_b[::-1]
        attrs = {"dtype": tg.int32 if dtype == "float64" else tg.float64} if name == "cast" else {}
        try:
            shape, out = p.rule([a.shape for a in host], [tg.dtypes.from_numpy(a.dtype) for a in host], **attrs)
        except TypeError:
            continue
        if name == "cast" and kind == "float":      # float -> int of inf or nan is undefined (C and NumPy)
            host = [np.nan_to_num(h, nan=0.0, posinf=7.0, neginf=-7.0) for h in host]
        dev = [layout(h) for layout, h in zip((transposed, strided, broadcast), host)]
        with np.errstate(all="ignore"):
            want = p.impl(*host, **attrs)
        got = pointwise.run(p, dev, attrs, shape, out).copy_to_host()
        assert got.dtype == want.dtype, name
        tol = 2e-6 if want.dtype == np.float32 else 1e-12
        np.testing.assert_allclose(got, want, rtol=tol, atol=0, equal_nan=True, err_msg=f"{name} on {dtype}")
        if want.dtype.kind == "f":
            np.testing.assert_array_equal(np.signbit(got[want == 0]), np.signbit(want[want == 0]), name)
        ran += 1
    assert ran >= 5, f"only {ran} primitives lower {dtype}"


@settings(max_examples=EXAMPLES, deadline=None)
@given(shape=st.lists(st.integers(1, 5), min_size=1, max_size=3), data=st.data())
def test_reductions_over_any_axes_of_permuted_views(shape, data):
    nd = len(shape)
    perm = tuple(data.draw(st.permutations(range(nd))))
    axes = tuple(sorted(data.draw(st.sets(st.integers(0, nd - 1), min_size=1))))
    keepdims = data.draw(st.booleans())
    name = data.draw(st.sampled_from(["sum", "max", "min"]))
    dtype = data.draw(st.sampled_from(["float32", "float64", "int32", "int64"]))
    p = PRIMS[name]
    base = sample(dtype, tuple(shape), np.random.default_rng(nd))
    x = base.transpose(perm)
    dev = memory.view(cuda.to_device(base), x.shape, [memory.strides_of(cuda.to_device(base))[d] for d in perm])
    shape_out, out = p.rule([x.shape], [tg.dtypes.from_numpy(x.dtype)], axis=axes, keepdims=keepdims)
    got = pointwise.run(p, [dev], {"axis": axes, "keepdims": keepdims}, shape_out, out).copy_to_host()
    want = p.impl(x, axis=axes, keepdims=keepdims)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-6)


def test_sum_of_bools_counts_in_int64():
    x = np.random.default_rng(1).random((4, 7)) < 0.5
    p = PRIMS["sum"]
    shape, out = p.rule([x.shape], [tg.bool], axis=(1,), keepdims=False)
    got = pointwise.run(p, [cuda.to_device(x)], {"axis": (1,), "keepdims": False}, shape, out).copy_to_host()
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, x.sum(1))


def test_primitives_the_lowering_does_not_cover_name_op_dtype_and_device():
    a = cuda.to_device(np.arange(1, 7, dtype=np.int32))
    with pytest.raises(RuntimeError, match=r'"div" is not implemented on cuda for int32'):
        pointwise.run(PRIMS["div"], [a, a], {}, (6,), tg.int32)
    with pytest.raises(RuntimeError, match=r'"floordiv" is not implemented on cuda'):
        pointwise.run(PRIMS["floordiv"], [a, a], {}, (6,), tg.int32)



def test_reductions_split_across_blocks(monkeypatch):
    """A reduction with too few tiles to fill the GPU splits its reduced elements over blocks and
    joins the partials in a second launch (forced here on small shapes)."""
    from tracegrad.backends.cuda import plan
    from tracegrad.backends.cuda.emit import eager
    monkeypatch.setattr(plan, "MIN_SLICE", 1)
    monkeypatch.setattr(plan, "FILL_BLOCKS", 4)
    monkeypatch.setattr(plan, "EAGER_THREADS", 32)
    joins, join = [], eager.reduction_join
    monkeypatch.setattr(eager, "reduction_join", lambda *a: joins.append(a) or join(*a))
    x = np.random.default_rng(2).standard_normal((70, 3)).astype(np.float32)
    dev = cuda.to_device(x)
    for name, axes, want in [("sum", (0, 1), x.astype(np.float64).sum()), ("max", (0,), x.max(0)),
                             ("sum", (0,), x.astype(np.float64).sum(0))]:
        p = PRIMS[name]
        shape, out = p.rule([x.shape], [tg.float32], axis=axes, keepdims=False)
        got = pointwise.run(p, [dev], {"axis": axes, "keepdims": False}, shape, out).copy_to_host()
        np.testing.assert_allclose(got, want, rtol=1e-6, err_msg=name)
    assert len(joins) == 3


def test_zero_dimensional_and_empty_arrays():
    a, b = np.array(2.5, np.float32), np.array(-1.5, np.float32)
    p = PRIMS["mul"]
    got = pointwise.run(p, [cuda.to_device(a), cuda.to_device(b)], {}, (), tg.float32).copy_to_host()
    assert got.shape == () and got == a * b
    e = np.zeros((0, 3), np.float64)
    s = PRIMS["sum"]
    got = pointwise.run(s, [cuda.to_device(e)], {"axis": (0,), "keepdims": False}, (3,), tg.float64)
    np.testing.assert_array_equal(got.copy_to_host(), np.zeros(3))
    got = pointwise.run(s, [cuda.to_device(a)], {"axis": (), "keepdims": False}, (), tg.float32)
    assert got.copy_to_host() == a
