"""A map over the pieces of a cat, an unslice (a slice's gradient) or a pad, written box by box
(ir/boxes.py, backends/cpu/boxes.py): generated programs of ranks 1-4 against eager, the interpret
backend and central differences (tg.gradcheck), static and with symbolic sizes."""
from unittest import mock

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import tracegrad as tg
import tracegrad.nn.functional as F
from tracegrad.backends.cpu import llvm

SETTINGS = settings(max_examples=30, deadline=None, derandomize=True)
PIECES = {"x": lambda x: x, "neg": lambda x: -x, "exp": lambda x: x.exp(), "affine": lambda x: x * 2.0 + 1.0}
CONSUMERS = {"none": lambda y, w: y * 1.0, "tanh": lambda y, w: y.tanh(), "mulw": lambda y, w: y * w,
             "tanh_w": lambda y, w: (y + w).tanh() * y,
             "sum": lambda y, w: (y.tanh() * w).sum() * y,                   # a column walk to a scalar
             "sum0": lambda y, w: (y * w).sum(0, keepdim=True) + y}          # ... to a row of columns


def lowerings(fn, *args, **compile_kw):
    """The lowering in words of each loop kernel built while compiling fn(*args) for the llvm backend."""
    got = []
    kernel = llvm.ModuleBuilder.kernel

    def spy(self, k, slots, name, strategy):
        out = kernel(self, k, slots, name, strategy)
        got.append(self.lowerings[name])
        return out
    with mock.patch.object(llvm.ModuleBuilder, "kernel", spy):
        tg.compile(fn, **compile_kw)(*args)
    return got


def with_loss(fn):
    """fn(*inputs) and (fn(*inputs) * g).sum() of (*inputs, g)."""
    def loss(*ts):
        out = fn(*ts[:-1])
        return out, (out * ts[-1]).sum()
    return loss


def results(fn, arrays, backend=None, run=None):
    """(outputs, gradients of (out * g).sum() for every input but the last) of fn: eager when backend is
    None; `run`: with_loss(fn) already compiled."""
    ts = [tg.tensor(a, requires_grad=True) for a in arrays[:-1]] + [tg.tensor(arrays[-1])]
    run = run or (with_loss(fn) if backend is None else tg.compile(with_loss(fn), backend=backend))
    out, total = run(*ts)
    total.backward()
    return out.detach().numpy(), [t.grad.numpy() if t.grad is not None else np.zeros(t.shape) for t in ts[:-1]]


def agree(fn, arrays, dtype, backends=("llvm", "interpret")):
    want, wgrads = results(fn, arrays, None)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-10)
    for b in backends:
        got, grads = results(fn, arrays, b)
        np.testing.assert_allclose(got, want, **tol, err_msg=b)
        for g, w in zip(grads, wgrads):
            np.testing.assert_allclose(g, w, **tol, err_msg=b)


@st.composite
def cat_case(draw):
    """(fn, arrays): a cat of 1-4 elementwise pieces (sizes 0-3 along the axis) of rank 1-4 under an
    elementwise consumer that may broadcast a weight, then the weight and the cotangent."""
    rank = draw(st.integers(1, 4))
    shape = draw(st.lists(st.integers(1, 3), min_size=rank, max_size=rank))
    axis = draw(st.integers(0, rank - 1))
    sizes = draw(st.lists(st.integers(0, 3), min_size=1, max_size=4))
    kinds = [draw(st.sampled_from(sorted(PIECES))) for _ in sizes]
    consumer = draw(st.sampled_from(sorted(CONSUMERS)))
    out_shape = list(shape)
    out_shape[axis] = sum(sizes)
    wshape = [n if draw(st.booleans()) else 1 for n in out_shape][draw(st.integers(0, rank - 1)):]
    r = np.random.default_rng(sum(sizes) * 31 + rank)
    arrays = [r.standard_normal(shape[:axis] + [s] + shape[axis + 1:]) * 0.5 for s in sizes]
    arrays += [r.standard_normal(wshape), r.standard_normal(out_shape)]

    def fn(*ts):
        y = tg.cat([PIECES[k](t) for k, t in zip(kinds, ts[:-1])], axis)
        return CONSUMERS[consumer](y, ts[-1])
    return fn, arrays


@SETTINGS
@given(cat_case(), st.sampled_from([np.float32, np.float64]))
def test_cat_under_elementwise_consumers(case, dtype):
    fn, arrays = case
    agree(fn, [a.astype(dtype) for a in arrays], dtype)


@st.composite
def pad_case(draw):
    """(fn, arrays): a constant pad (widths -1..2 per side, maybe a value) of an elementwise expression."""
    rank = draw(st.integers(1, 4))
    shape = draw(st.lists(st.integers(1, 4), min_size=rank, max_size=rank))
    axes = draw(st.integers(1, rank))
    pads = []
    for n in shape[::-1][:axes]:
        lo, hi = draw(st.integers(-1, 2)), draw(st.integers(-1, 2))
        pads += [max(lo, 1 - n) if lo < 0 else lo, max(hi, 1 - n - min(lo, 0)) if hi < 0 else hi]
    value = draw(st.sampled_from([0.0, 0.0, -1.5]))
    consumer = draw(st.sampled_from(sorted(CONSUMERS)))
    padded = list(shape)
    for i in range(axes):
        padded[rank - 1 - i] += pads[2 * i] + pads[2 * i + 1]
    r = np.random.default_rng(rank * 7 + sum(pads))
    arrays = [r.standard_normal(shape) * 0.5, r.standard_normal(padded[-1:]), r.standard_normal(padded)]

    def fn(x, w):
        return CONSUMERS[consumer](F.pad(x.exp(), pads, value=value), w)
    return fn, arrays


@SETTINGS
@given(pad_case(), st.sampled_from([np.float32, np.float64]))
def test_pad_under_elementwise_consumers(case, dtype):
    fn, arrays = case
    agree(fn, [a.astype(dtype) for a in arrays], dtype)


@st.composite
def slice_case(draw):
    """(fn, arrays): a slice (start, stop, step per axis) read by an elementwise expression beside the
    whole input: its gradient is an unslice added to the other term's."""
    rank = draw(st.integers(1, 4))
    shape = draw(st.lists(st.integers(1, 5), min_size=rank, max_size=rank))
    index = []
    for n in shape:
        a = draw(st.integers(0, n - 1))
        b = draw(st.integers(a + 1, n))
        index.append(slice(a, b, draw(st.sampled_from([1, 1, 2]))))
    index = tuple(index)
    r = np.random.default_rng(rank * 5 + sum(shape))
    sliced = np.zeros(shape)[index].shape
    arrays = [r.standard_normal(shape), r.standard_normal(sliced), r.standard_normal(shape)]

    def fn(x, w):
        return x.tanh() + (x[index].exp() * w).sum()
    return fn, arrays


@SETTINGS
@given(slice_case(), st.sampled_from([np.float32, np.float64]))
def test_slice_gradients_are_unslices(case, dtype):
    fn, arrays = case
    agree(fn, [a.astype(dtype) for a in arrays], dtype)


def rotate(x, cos, sin):
    """Rotary embedding as Llama writes it: x * cos + cat(-x2, x1) * sin."""
    half = x.shape[-1] // 2
    return x * cos + tg.cat([-x[..., half:], x[..., :half]], -1) * sin


def test_rotary_cat_tanh_and_pad_are_written_box_by_box():
    r = np.random.default_rng(0)
    x, c, s = (tg.tensor(r.standard_normal(shape).astype(np.float32)) for shape in ((4, 6, 16), (16,), (16,)))
    assert any("box by box" in how for how in lowerings(rotate, x, c, s))
    assert any("box by box" in how for how in lowerings(lambda a, b: tg.cat([a, b * 2], -1).tanh(), x, x))
    assert any("box by box" in how for how in lowerings(lambda a: F.pad(a * 2, (1, 1, 1, 1)), x))
    # the values: eager and compiled, float32
    for fn, args in ((rotate, (x, c, s)), (lambda a, b: tg.cat([a, b * 2], -1).tanh(), (x, x)),
                     (lambda a: F.pad(a * 2, (1, 1, 1, 1), value=0.5), (x,))):
        np.testing.assert_allclose(tg.compile(fn)(*args).numpy(), fn(*args).numpy(), rtol=1e-6, atol=1e-6)


def test_column_walks_over_pieces_are_written_box_by_box():
    """Reductions over leading or all axes of a cat or a pad accumulate box by box (natural order)."""
    r = np.random.default_rng(3)
    a, b = (tg.tensor(r.standard_normal((5, 7, 9)).astype(np.float32)) for _ in range(2))
    fns = [lambda a, b: (tg.cat([a.exp(), -b, a[:, :2]], 1) * 0.5).sum(),
           lambda a, b: tg.cat([a.exp(), -b], 2).tanh().sum(0),
           lambda a, b: (F.pad(a.exp(), (3, 1, 0, 2), value=-2.0) * 1.5).sum((0, 1))]
    for fn in fns:
        assert any("column accumulation, natural order, box by box" in how for how in lowerings(fn, a, b))
        want = fn(tg.tensor(a.numpy().astype(np.float64)), tg.tensor(b.numpy().astype(np.float64))).numpy()
        np.testing.assert_allclose(tg.compile(fn)(a, b).numpy(), want, rtol=1e-5, atol=1e-4)


def test_gradcheck_float64_through_cat_pad_and_slice():
    r = np.random.default_rng(1)
    x = tg.tensor(r.standard_normal((3, 4, 6)), requires_grad=True)
    c = tg.tensor(r.standard_normal(6), requires_grad=True)
    s = tg.tensor(r.standard_normal(6), requires_grad=True)
    assert tg.gradcheck(tg.compile(lambda x, c, s: rotate(x, c, s).tanh()), (x, c, s))
    assert tg.gradcheck(tg.compile(lambda x: F.pad(x.exp(), (2, 0, 1, 3), value=0.25) * 3.0), (x,))
    assert tg.gradcheck(tg.compile(lambda x: tg.cat([x[:, 1:], x * x, x[:, :1]], 1).sin()), (x,))


def test_symbolic_piece_bounds():
    """dynamic=True: the pieces' sizes are symbols, the boxes' bounds read at the call."""
    def fn(a, b):
        return tg.cat([a.exp(), -b, a], -1).tanh() + F.pad(b, (1, 2)).sum(-1, keepdim=True)
    f = tg.compile(fn, dynamic=True)
    r = np.random.default_rng(2)
    for n, m in ((3, 5), (4, 2), (6, 7), (2, 3)):
        a = tg.tensor(r.standard_normal((n + 1, n)).astype(np.float32))
        b = tg.tensor(r.standard_normal((n + 1, m)).astype(np.float32))
        np.testing.assert_allclose(f(a, b).numpy(), fn(a, b).numpy(), rtol=1e-5, atol=1e-5)
    def three(a, b):
        return tg.cat([a, b.exp(), a * 2], -1)
    run = tg.compile(with_loss(three), dynamic=True)
    for n in (5, 3, 9):
        arrays = [r.standard_normal((2, n)), r.standard_normal((2, 3)), r.standard_normal((2, 2 * n + 3))]
        want, wgrads = results(three, arrays)
        got, grads = results(three, arrays, run=run)
        np.testing.assert_allclose(got, want, rtol=1e-10)
        for g, w in zip(grads, wgrads):
            np.testing.assert_allclose(g, w, rtol=1e-10)


def test_symbolic_bounds_out_of_their_traced_order_run_the_selects():
    """A bound that is a size of another input (arange(n) < m): traced with m < n, its boxes assume that
    order; a call with m > n fails the check at the call and runs the general loop."""
    def fn(x, y):
        return tg.where(tg.arange(x.shape[1]) < y.shape[0], x.exp(), -x) * 2
    f = tg.compile(fn, dynamic=True)
    r = np.random.default_rng(4)
    x0, y0 = tg.tensor(r.standard_normal((3, 6)).astype(np.float32)), tg.zeros(3)
    assert any("box by box" in how for how in lowerings(fn, x0, y0, dynamic=True))
    for n, m in ((6, 3), (7, 2), (5, 9), (4, 0), (8, 8)):
        x = tg.tensor(r.standard_normal((3, n)).astype(np.float32))
        y = tg.zeros(m)
        np.testing.assert_allclose(f(x, y).numpy(), fn(x, y).numpy(), rtol=1e-6, atol=1e-6)


def test_threads_split_rows_across_box_bounds(monkeypatch):
    """Every kernel split over threads (parallel_min_work=1): each chunk of rows [lo, hi) clips the boxes
    along axis 0, cat and pad along axis 0 and 1, maps and column sums."""
    monkeypatch.setenv("TRACEGRAD_THRESHOLDS", "parallel_min_work=1")
    r = np.random.default_rng(5)
    a, b = (tg.tensor(r.standard_normal((37, 19))) for _ in range(2))
    fns = [lambda a, b: tg.cat([a.tanh(), -b, a[:5]], 0) * 2.0,
           lambda a, b: tg.cat([a, b * 3], 1).tanh(),
           lambda a, b: F.pad(a * b, (2, 1, 3, 4), value=1.5),
           lambda a, b: (tg.cat([a * 2.0, -b], 0) * 0.5).sum(0),
           lambda a, b: (F.pad(a * b, (2, 1, 3, 4)) + 1.0).sum()]
    for fn in fns:
        assert any("box by box" in how for how in lowerings(fn, a, b))
        np.testing.assert_allclose(tg.compile(fn)(a, b).numpy(), fn(a, b).numpy(), rtol=1e-12, atol=1e-12)


def test_streamed_outputs_stream_from_each_interval(monkeypatch):
    """An output whose stores stream (stream.py; every output here): each interval of a row runs its
    elements up to an aligned vector alone, then stores whole aligned vectors, which stream."""
    monkeypatch.setenv("TRACEGRAD_THRESHOLDS", "stream_min_bytes=1")
    r = np.random.default_rng(6)
    a = tg.tensor(r.standard_normal((97, 203)).astype(np.float32))
    b = tg.tensor(r.standard_normal((97, 101)).astype(np.float32))

    def fn(a, b):
        return tg.cat([a, b * 2], 1).tanh()
    assert any("box by box, streamed stores" in how for how in lowerings(fn, a, b))
    f = tg.compile(fn)
    np.testing.assert_allclose(f(a, b).numpy(), fn(a, b).numpy(), rtol=1e-6, atol=1e-6)
    assert "!nontemporal" in f.ir(a, b, stage="llvm", optimized=True)
