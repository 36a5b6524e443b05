"""Slice assignment, in-place updates of views, cat and a slice's gradient (unslice) in compiled
code, against NumPy float64 and the interpret backend; they fuse (ir/passes/copies.py) instead of
running host scatters."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tracegrad as tg

SETTINGS = settings(max_examples=25, deadline=None, derandomize=True)


@st.composite
def basic_index(draw):
    """(shape, index): a shape of 1-3 axes and a basic index into it (slices with steps, integers,
    None, an Ellipsis), never an empty selection."""
    shape = tuple(draw(st.lists(st.integers(1, 6), min_size=1, max_size=3)))
    items = []
    for n in shape:
        kind = draw(st.sampled_from(["all", "slice", "int"]))
        if kind == "int":
            items.append(draw(st.integers(-n, n - 1)))
        elif kind == "slice":
            a = draw(st.integers(0, n - 1))
            b = draw(st.integers(a + 1, n))
            items.append(slice(a, b, draw(st.sampled_from([1, 1, 2]))))
        else:
            items.append(slice(None))
    if draw(st.booleans()):
        items.insert(draw(st.integers(0, len(items))), None)
    if draw(st.booleans()) and items[-1] == slice(None):
        items[-1] = Ellipsis
    return shape, tuple(items)


@SETTINGS
@given(basic_index(), st.sampled_from([np.float32, np.float64]), st.booleans())
def test_slice_assignment_matches_numpy(case, dtype, scalar):
    shape, index = case
    r = np.random.default_rng(len(shape) * 7 + len(index))
    x0 = r.standard_normal(shape)
    g0 = r.standard_normal(shape)
    vshape = () if scalar else x0[index].shape
    v0 = r.standard_normal(vshape)

    def f(x, v, g):
        t = x * 2.0
        t[index] = v.tanh()
        return (t * g).sum()

    # NumPy float64: the value and both gradients
    t = 2 * x0
    t[index] = np.tanh(v0)
    want = (t * g0).sum()
    hit = np.zeros(shape, bool)
    hit[index] = True
    want_dx = np.where(hit, 0.0, 2 * g0)
    dv = g0[index] * (1 - np.tanh(v0) ** 2)
    want_dv = dv.sum() if scalar else dv
    tol = 1e-5 if dtype is np.float32 else 1e-12
    for backend in ("llvm", "interpret"):
        x = tg.tensor(x0.astype(dtype), requires_grad=True)
        v = tg.tensor(np.asarray(v0, dtype), requires_grad=True)
        loss = tg.compile(f, backend=backend)(x, v, tg.tensor(g0.astype(dtype)))
        loss.backward()
        scale = 1 + np.abs(want)
        assert abs(loss.item() - want) <= tol * scale * 10 * x0.size, backend
        np.testing.assert_allclose(x.grad.numpy(), want_dx, rtol=tol, atol=tol)
        np.testing.assert_allclose(v.grad.numpy(), want_dv, rtol=tol * 10, atol=tol * 10)


@SETTINGS
@given(basic_index())
def test_inplace_update_of_a_view_matches_numpy(case):
    shape, index = case
    r = np.random.default_rng(3 + len(shape))
    x0, g0 = r.standard_normal(shape), r.standard_normal(shape)

    def f(x, g):
        t = x * 2.0
        view = t[index]
        view.mul_(3.0)
        view += 1.0
        return (t * g).sum()

    t = 2 * x0
    hit = np.zeros(shape, bool)
    hit[index] = True
    t = np.where(hit, 3 * t + 1, t)
    want, want_dx = (t * g0).sum(), np.where(hit, 6, 2) * g0
    x = tg.tensor(x0, requires_grad=True)
    loss = tg.compile(f)(x, tg.tensor(g0))
    loss.backward()
    np.testing.assert_allclose(loss.item(), want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(x.grad.numpy(), want_dx, rtol=1e-12, atol=1e-12)


@SETTINGS
@given(st.lists(st.integers(0, 5), min_size=1, max_size=4), st.integers(1, 5), st.integers(0, 1),
       st.sampled_from([np.float32, np.float64]))
def test_cat_of_expressions_matches_numpy(sizes, other, axis, dtype):
    r = np.random.default_rng(sum(sizes) + other)
    shapes = [(s, other) if axis == 0 else (other, s) for s in sizes]
    xs0 = [r.standard_normal(s) for s in shapes]
    if sum(sizes) == 0:
        return
    out_shape = (sum(sizes), other) if axis == 0 else (other, sum(sizes))
    g0 = r.standard_normal(out_shape)

    def f(g, *xs):
        parts = [x.exp() if k % 2 else x * 2.0 for k, x in enumerate(xs)]
        return (tg.cat(parts, axis) * g).sum(axis)

    parts = [np.exp(x) if k % 2 else 2 * x for k, x in enumerate(xs0)]
    want = (np.concatenate(parts, axis) * g0).sum(axis)
    gs = np.split(g0, np.cumsum(sizes)[:-1], axis)
    want_grads = [gk * (np.exp(x) if k % 2 else 2.0) for k, (x, gk) in enumerate(zip(xs0, gs))]
    xs = [tg.tensor(x.astype(dtype), requires_grad=True) for x in xs0]
    out = tg.compile(f)(tg.tensor(g0.astype(dtype)), *xs)
    out.sum().backward()
    tol = 1e-5 if dtype is np.float32 else 1e-12
    np.testing.assert_allclose(out.detach().numpy(), want, rtol=tol, atol=tol * 10)
    for x, w in zip(xs, want_grads):
        np.testing.assert_allclose(x.grad.numpy(), w, rtol=tol, atol=tol * 10)


def test_slice_assignment_and_cat_fuse_without_host_kernels():
    """x[:, a:b] = v, cat and a slice's gradient run in fused loops: no scatter, no host copy."""
    def f(x, v, g):
        t = x * 2.0
        t[:, 3:7] = v.tanh()
        return (tg.cat([t, x.exp()], 1)[:, 2:9] * g).sum()

    x = tg.randn(5, 10, requires_grad=True)
    v = tg.randn(5, 4, requires_grad=True)
    text = tg.compile(f).ir(x, v, tg.randn(5, 7), stage="kernels")
    assert "[host]" not in text and "index_add" not in text, text


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_large_slice_assignment_and_cat_match_numpy(dtype):
    """Odd sizes past a vector width and a thread's share: the gathered pieces and the box masks
    of each element as NumPy's."""
    r = np.random.default_rng(5)
    x0, v0, g0 = r.standard_normal((67, 1031)), r.standard_normal((67, 695)), r.standard_normal((67, 1031 + 67))

    def f(x, v, g):
        t = x * 2.0
        t[:, 5:700] = v.tanh()
        return (tg.cat([t, x[:, :67].exp()], 1) * g).sum()

    t = 2 * x0
    t[:, 5:700] = np.tanh(v0)
    want = (np.concatenate([t, np.exp(x0[:, :67])], 1) * g0).sum()
    dx = np.where(np.arange(1031) % 1031 < 5, 2, np.where(np.arange(1031) < 700, 0, 2)) * g0[:, :1031]
    dx[:, :67] += np.exp(x0[:, :67]) * g0[:, 1031:]
    dv = g0[:, 5:700] * (1 - np.tanh(v0) ** 2)
    x, v = tg.tensor(x0.astype(dtype), requires_grad=True), tg.tensor(v0.astype(dtype), requires_grad=True)
    loss = tg.compile(f)(x, v, tg.tensor(g0.astype(dtype)))
    loss.backward()
    tol = 1e-4 if dtype is np.float32 else 1e-11
    np.testing.assert_allclose(loss.item(), want, rtol=tol)
    np.testing.assert_allclose(x.grad.numpy(), dx, rtol=tol, atol=tol)
    np.testing.assert_allclose(v.grad.numpy(), dv, rtol=tol, atol=tol)


@SETTINGS
@given(basic_index(), st.booleans())
def test_positions_and_boxes_against_an_arange(case, transpose):
    """inplace.positions is NumPy's arange indexed; _box finds the box of a basic index and refuses
    positions out of row-major order (a transposed view's)."""
    from tracegrad.tensor.inplace import _box, positions
    shape, index = case
    whole = np.arange(int(np.prod(shape))).reshape(shape)
    items = [slice(None) if i is Ellipsis else i for i in index]
    flat = whole[index].reshape(-1)
    assert np.array_equal(positions(shape, items), flat)
    picked = whole[index]
    if transpose and picked.ndim >= 2 and picked.shape[0] > 1 and picked.shape[-1] > 1:
        assert _box(shape, picked.T.reshape(-1)) is None
    else:
        box = _box(shape, flat)
        assert box is not None and np.array_equal(whole[tuple(slice(*b) for b in box)].reshape(-1), flat)


def test_a_cat_of_many_pieces_stays_a_host_copy_with_numpys_values():
    from tracegrad.ir.passes.copies import MAX_PIECES
    r = np.random.default_rng(9)
    xs0 = [r.standard_normal(5) for _ in range(MAX_PIECES + 1)]
    xs = [tg.tensor(x, requires_grad=True) for x in xs0]
    g0 = r.standard_normal((len(xs0), 5))

    def f(g, *xs):
        return (tg.stack([x * 2.0 for x in xs], 0) * g).sum()

    step = tg.compile(f)
    assert "ops=cat" in step.ir(tg.tensor(g0), *xs, stage="kernels")
    loss = step(tg.tensor(g0), *xs)
    loss.backward()
    np.testing.assert_allclose(loss.item(), (2 * np.stack(xs0) * g0).sum(), rtol=1e-12)
    for x, gk in zip(xs, g0):
        np.testing.assert_allclose(x.grad.numpy(), 2 * gk, rtol=1e-12)


def test_strided_pieces_fuse_with_numpys_values():
    """Even and odd columns (a rotary embedding's halves) and a strided slice assignment: selects
    on each place's coordinate (its division done in float64), no host copy, NumPy's values."""
    r = np.random.default_rng(12)
    x0, c0, g0 = r.standard_normal((37, 130)), r.standard_normal((37, 65)), r.standard_normal((37, 130))

    def f(x, c, g):
        even, odd = x[:, ::2], x[:, 1::2]
        t = tg.cat([even * c - odd, odd * c + even], 1) * 1.0
        t[3::5, 7:120:3] = 0.5
        return (t * g).sum()

    even, odd = x0[:, ::2], x0[:, 1::2]
    t = np.concatenate([even * c0 - odd, odd * c0 + even], 1)
    t[3::5, 7:120:3] = 0.5
    hit = np.zeros(t.shape, bool)
    hit[3::5, 7:120:3] = True
    gt = np.where(hit, 0, g0)
    ga, gb = gt[:, :65], gt[:, 65:]
    dx = np.zeros_like(x0)
    dx[:, ::2] = ga * c0 + gb
    dx[:, 1::2] = -ga + gb * c0
    x, c = tg.tensor(x0, requires_grad=True), tg.tensor(c0, requires_grad=True)
    step = tg.compile(f)
    text = step.ir(x, c, tg.tensor(g0), stage="kernels")
    assert "[host]" not in text, text
    loss = step(x, c, tg.tensor(g0))
    loss.backward()
    np.testing.assert_allclose(loss.item(), (t * g0).sum(), rtol=1e-12)
    np.testing.assert_allclose(x.grad.numpy(), dx, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(c.grad.numpy(), ga * even + gb * odd, rtol=1e-12, atol=1e-12)


def test_a_cheap_piece_is_read_through_its_loads_not_written():
    """cat([2x, y], 1).sum(1): the piece 2x is computed where it is read (its load of x gathered), so
    the forward is one kernel writing only the sums; exp(x) is written once and gathered. (A reduction
    over other axes than the cat's reduces each piece apart: simplify.py.)"""
    x, y = tg.randn(30, 7), tg.randn(30, 5)
    cheap = tg.compile(lambda x, y: tg.cat([x * 2.0, y], 1).sum(1)).ir(x, y, stage="kernels")
    assert "(forward): 1" in cheap, cheap
    costly = tg.compile(lambda x, y: tg.cat([x.exp(), y], 1).sum(1)).ir(x, y, stage="kernels")
    assert "(forward): 2" in costly, costly
    np.testing.assert_allclose(tg.compile(lambda x, y: tg.cat([x * 2.0, y], 1).sum(1))(x, y).numpy(),
                               np.concatenate([2 * x.numpy(), y.numpy()], 1).sum(1), rtol=1e-5, atol=1e-5)



@pytest.mark.parametrize("shape,index", [((2, 0), (0,)), ((0, 3), (slice(None), 1)), ((3, 0, 2), (1, slice(None), 0)),
                                         ((2, 3), (slice(1, 1),))])
def test_slice_assignment_into_empty_selections_is_eagers(shape, index):
    """Positions of a basic index into a tensor with an empty axis (an arange's strides of 0 there),
    written in a compiled function under no_grad as eagerly (fuzz seed 5151, program 137)."""
    from tracegrad.tensor.inplace import positions
    whole = np.arange(int(np.prod(shape))).reshape(shape)
    assert np.array_equal(positions(shape, list(index) + [slice(None)] * (len(shape) - len(index))),
                          whole[index].reshape(-1))

    def f(x):
        with tg.no_grad():
            x[index] = 7.0
        return x.sum()

    x0 = np.random.default_rng(0).standard_normal(shape)
    x, xe = tg.tensor(x0, requires_grad=True), tg.tensor(x0, requires_grad=True)
    np.testing.assert_array_equal(tg.compile(f)(x).detach().numpy(), f(xe).detach().numpy())
    np.testing.assert_array_equal(x.detach().numpy(), xe.detach().numpy())
