"""cat and constant padding over generated cases: any axis (first, last, negative), 1-4 pieces of
sizes 0-3 (empty and single-element pieces), 1-3 axes, float64, fixed and symbolic sizes
(dynamic=True); values against NumPy and the interpret backend, gradients against NumPy and
tg.gradcheck, eager against compiled. Each piece is an expression (2x, exp(x), x) that its lowering
may fuse (ir/passes/copies.py)."""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import tracegrad as tg
import tracegrad.nn.functional as F

SETTINGS = settings(max_examples=20, deadline=None, derandomize=True)
TOL = dict(rtol=1e-12, atol=1e-12)


@st.composite
def cat_case(draw):
    """(piece shapes, axis as given, possibly negative): the pieces agree off the axis; at least
    one element in the result."""
    ndim = draw(st.integers(1, 3))
    other = draw(st.lists(st.integers(1, 3), min_size=ndim, max_size=ndim))
    axis = draw(st.integers(0, ndim - 1))
    sizes = draw(st.lists(st.integers(0, 3), min_size=1, max_size=4).filter(lambda s: sum(s) > 0))
    shapes = [tuple(s if d == axis else n for d, n in enumerate(other)) for s in sizes]
    return shapes, axis - ndim if draw(st.booleans()) else axis


def _piece(k, x, exp):
    return x * 2.0 if k % 3 == 0 else exp(x) if k % 3 == 1 else x


def _cat_loss(axis):
    def f(g, *xs):
        return (tg.cat([_piece(k, x, lambda v: v.exp()) for k, x in enumerate(xs)], axis) * g).sum()
    return f


def _numpy_cat(xs0, g0, axis):
    """(loss, gradients): NumPy float64; the backward of cat is a split of g along the axis."""
    parts = [_piece(k, x, np.exp) for k, x in enumerate(xs0)]
    loss = (np.concatenate(parts, axis) * g0).sum()
    gs = np.split(g0, np.cumsum([x.shape[axis] for x in xs0])[:-1], axis)
    grads = [gk * (2.0 if k % 3 == 0 else np.exp(x) if k % 3 == 1 else 1.0)
             for k, (x, gk) in enumerate(zip(xs0, gs))]
    return loss, grads


def _run(fn, g0, xs0):
    xs = [tg.tensor(x, requires_grad=True) for x in xs0]
    loss = fn(tg.tensor(g0), *xs)
    loss.backward()
    return loss.item(), [x.grad.numpy() for x in xs]


@SETTINGS
@given(cat_case(), st.booleans())
def test_cat_matches_numpy_eager_compiled_and_interpreted(case, dynamic):
    shapes, axis = case
    r = np.random.default_rng(sum(map(sum, shapes)) + 7 * (axis + 3))
    xs0 = [r.standard_normal(s) for s in shapes]
    g0 = r.standard_normal(np.concatenate(xs0, axis).shape)
    want, want_grads = _numpy_cat(xs0, g0, axis)
    f = _cat_loss(axis)
    runs = {"eager": f, "llvm": tg.compile(f, dynamic=dynamic),
            "interpret": tg.compile(f, backend="interpret", dynamic=dynamic)}
    for name, fn in runs.items():
        loss, grads = _run(fn, g0, xs0)
        np.testing.assert_allclose(loss, want, **TOL, err_msg=name)
        for got, w in zip(grads, want_grads):
            np.testing.assert_allclose(got, w, **TOL, err_msg=name)


@SETTINGS
@given(cat_case())
def test_compiled_cat_passes_gradcheck(case):
    shapes, axis = case
    r = np.random.default_rng(len(shapes) + 3 * (axis + 3))
    xs = [tg.tensor(r.standard_normal(s), requires_grad=True) for s in shapes]
    w = tg.tensor(r.standard_normal(np.concatenate([x.detach().numpy() for x in xs], axis).shape))
    f = tg.compile(lambda *xs: tg.cat([_piece(k, x, lambda v: v.exp()) for k, x in enumerate(xs)], axis) * w)
    assert tg.gradcheck(f, tuple(xs))


@st.composite
def pad_case(draw):
    """(shape, pad amounts in F.pad's order: last axis first, (before, after) each; 0-2 each)."""
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)))
    axes = draw(st.integers(1, len(shape)))
    return shape, tuple(draw(st.integers(0, 2)) for _ in range(2 * axes))


@SETTINGS
@given(pad_case(), st.sampled_from([0.0, -1.5]), st.booleans())
def test_constant_pad_of_an_expression_matches_numpy(case, value, dynamic):
    shape, amounts = case
    r = np.random.default_rng(len(shape) + sum(amounts))
    x0 = r.standard_normal(shape)
    widths = [(0, 0)] * (len(shape) - len(amounts) // 2) + \
        [(amounts[2 * i], amounts[2 * i + 1]) for i in reversed(range(len(amounts) // 2))]
    g0 = r.standard_normal(np.pad(x0, widths).shape)
    want = (np.pad(np.exp(x0), widths, constant_values=value) * g0).sum()
    inner = tuple(slice(a, a + n) for (a, _), n in zip(widths, shape))
    want_grad = g0[inner] * np.exp(x0)

    def f(g, x):
        return (F.pad(x.exp(), amounts, value=value) * g).sum()

    for name, fn in {"eager": f, "llvm": tg.compile(f, dynamic=dynamic),
                     "interpret": tg.compile(f, backend="interpret", dynamic=dynamic)}.items():
        loss, (grad,) = _run(fn, g0, [x0])
        np.testing.assert_allclose(loss, want, **TOL, err_msg=name)
        np.testing.assert_allclose(grad, want_grad, **TOL, err_msg=name)


@SETTINGS
@given(cat_case(), st.sampled_from(["sum", "amax", "amin"]), st.integers(0, 7), st.booleans(), st.booleans())
def test_reductions_of_a_cat_match_numpy(case, op, mask, keepdims, dynamic):
    """sum/amax/amin of a cat over any axes (the cat's own among them or not: a reduction along kept
    axes becomes the cat of the pieces' reductions), values and gradients as NumPy's and eager."""
    shapes, axis = case
    ndim = len(shapes[0])
    dims = tuple(d for d in range(ndim) if mask >> d & 1) or (axis % ndim,)
    r = np.random.default_rng(len(shapes) + mask + 11 * (axis + 3))
    xs0 = [r.standard_normal(s) for s in shapes]
    if op != "sum" and any(np.concatenate(xs0, axis).shape[d] == 0 for d in dims):
        return                                       # max/min of nothing raises, as PyTorch's
    whole = np.concatenate([_piece(k, x, np.exp) for k, x in enumerate(xs0)], axis)
    red = getattr(np, op)(whole, dims, keepdims=keepdims)
    g0 = r.standard_normal(red.shape)
    want = (red * g0).sum()

    def f(g, *xs):
        c = tg.cat([_piece(k, x, lambda v: v.exp()) for k, x in enumerate(xs)], axis)
        return (getattr(c, op)(dims, keepdims=keepdims) * g).sum()

    results = {name: _run(fn, g0, xs0) for name, fn in
               {"eager": f, "llvm": tg.compile(f, dynamic=dynamic)}.items()}
    np.testing.assert_allclose(results["eager"][0], want, **TOL)
    for name, (loss, grads) in results.items():
        np.testing.assert_allclose(loss, want, **TOL, err_msg=name)
        for got, w in zip(grads, results["eager"][1]):
            np.testing.assert_allclose(got, w, **TOL, err_msg=name)


def test_a_reduction_of_a_cat_along_a_kept_axis_reads_each_piece_by_plain_loads():
    """cat([2a, exp(b), c], 1).sum(0): one kernel sums the three pieces (no gather, no select, the
    pieces not written), then the small sums are placed."""
    a, b, c = tg.randn(64, 32), tg.randn(64, 32), tg.randn(64, 32)
    f = tg.compile(lambda a, b, c: tg.cat([a * 2.0, b.exp(), c], 1).sum(0))
    text = f.ir(a, b, c, stage="kernels")
    first = text.splitlines()[1]
    assert "space=64x32" in first and "gather" not in first and "where" not in first, text
    assert "f32[64,32]" not in text, text
    np.testing.assert_allclose(f(a, b, c).numpy(), np.concatenate(
        [2 * a.numpy(), np.exp(b.numpy()), c.numpy()], 1).sum(0), rtol=1e-5, atol=1e-5)
