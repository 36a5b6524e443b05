"""Eager in-place updates written straight into the tensor's memory (tensor/direct.py) and gradient
accumulation into an existing .grad: the same values, versions, views and errors as the general path
(compute out of place, then copy), bit for bit; NumPy as the oracle; no full-size temporary
(tracemalloc sees NumPy's allocations); .grad keeps its identity across backward calls, as
PyTorch's AccumulateGrad adds in place when .grad exists and create_graph is off."""
import contextlib
import os
import tracemalloc
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tracegrad as tg
from tracegrad.tensor import direct, inplace as inplace_mod

from threads import run_threads

EXAMPLES = int(os.environ.get("TRACEGRAD_HYPOTHESIS_EXAMPLES", "120"))
N = 1 << 18          # elements of the "large" tensors: 1 MiB in float32, four blocks

OPS = {
    "add": lambda t, o: t.add_(o),
    "add_alpha": lambda t, o: t.add_(o, alpha=3),
    "add_falpha": lambda t, o: t.add_(o, alpha=-0.25),
    "sub": lambda t, o: t.sub_(o),
    "sub_alpha": lambda t, o: t.sub_(o, alpha=2),
    "mul": lambda t, o: t.mul_(o),
    "div": lambda t, o: t.div_(o),
    "pow": lambda t, o: t.pow_(o),
    "clamp": lambda t, o: t.clamp_(-1, 2.5 if t.dtype.is_floating_point else 2),
    "clamp_min": lambda t, o: t.clamp_(min=o),
    "clamp_max": lambda t, o: t.clamp_(max=0),
    "clamp_both": lambda t, o: t.clamp_(-1, o),
    "relu": lambda t, o: t.relu_(),
    "neg": lambda t, o: t.neg_(),
    "exp": lambda t, o: t.exp_(),
    "fill": lambda t, o: t.fill_(o),
    "fill_number": lambda t, o: t.fill_(1.5),
    "zero": lambda t, o: t.zero_(),
    "copy": lambda t, o: t.copy_(o),
    "iadd": lambda t, o: t.__iadd__(o),
}
DTYPES = {"float32": np.float32, "float64": np.float64, "int32": np.int32, "int64": np.int64, "bool": np.bool_}


@contextlib.contextmanager
def general_path():
    """Every in-place op takes the general path (compute out of place, then copy)."""
    with mock.patch.object(inplace_mod, "write_direct", lambda *a: False):
        yield


def _state(dtype, shape, layout, values):
    """(base tensor, destination tensor): the destination is the base, its transpose, or a strided
    slice of it."""
    n = int(np.prod(shape))
    arr = np.resize(np.asarray(values, dtype=np.float64), max(n, 1))[:n].reshape(shape).astype(DTYPES[dtype])
    if layout == "slice" and len(shape) >= 1:
        wide = np.zeros(shape[:-1] + (2 * shape[-1],), DTYPES[dtype])
        wide[..., ::2] = arr
        base = tg.tensor(wide)
        return base, base[..., ::2]
    base = tg.tensor(arr)
    if layout == "transposed" and len(shape) == 2:
        return base, base.T
    return base, base


def _operand(kind, dtype, t, values):
    if kind == "int":
        return int(values[0])
    if kind == "float":
        return float(values[0]) + 0.5
    if kind == "bool":
        return bool(values[0])
    if kind == "self":
        return t
    if kind == "self_T":
        return t.T
    shape = {"same": t.shape, "row": t.shape[-1:], "scalar_tensor": ()}.get(kind, t.shape)
    arr = np.resize(np.asarray(values[::-1], np.float64), max(int(np.prod(shape)), 1))[:int(np.prod(shape))]
    odt = np.float64 if kind == "other_dtype" else DTYPES[dtype]
    return tg.tensor(arr.reshape(shape).astype(odt))


def _run(op, dtype, shape, layout, kind, values, grad):
    """What the op does on fresh state: (outcome, history, base bytes, destination bytes, versions).
    `grad`: "off" (nothing requires grad), "operand" (a float operand tensor requires grad: autograd
    records the update), "no_grad" (the same under tg.no_grad())."""
    base, t = _state(dtype, shape, layout, values)
    o = _operand(kind, dtype, t, values)
    if grad != "off" and isinstance(o, tg.Tensor) and o is not t and o.dtype.is_floating_point:
        o = o.detach().requires_grad_()
    ver = base._version
    try:
        with tg.no_grad() if grad == "no_grad" else contextlib.nullcontext():
            r = OPS[op](t, o)
        outcome = ("ok", r is t)
    except Exception as e:          # the same error either way
        outcome = (type(e).__name__, str(e))
    history = (t.requires_grad, t.grad_fn and t.grad_fn.name())
    return (outcome, history, base.detach().numpy().tobytes(), t.detach().numpy().tobytes(), base._version - ver,
            t._version - ver)


@settings(max_examples=EXAMPLES, deadline=None)
@given(op=st.sampled_from(sorted(OPS)), dtype=st.sampled_from(sorted(DTYPES)),
       shape=st.sampled_from([(), (5,), (3, 3), (2, 3, 4), (0, 3)]),
       layout=st.sampled_from(["plain", "transposed", "slice"]),
       kind=st.sampled_from(["same", "row", "scalar_tensor", "int", "float", "bool", "self", "self_T",
                             "other_dtype"]),
       values=st.lists(st.integers(-3, 3), min_size=1, max_size=8), block=st.sampled_from([1 << 16, 4, 1]),
       grad=st.sampled_from(["off", "off", "operand", "no_grad"]))
def test_direct_writes_what_the_general_path_writes(op, dtype, shape, layout, kind, values, block, grad):
    """Every in-place op on generated dtypes, shapes, layouts (views of a base) and operands (numbers,
    broadcast tensors, the destination itself or its transpose, another dtype): the same outcome and
    history, the same bytes in the destination and its base, the same version bumps. `block` cuts updates
    of several steps into pieces of so many elements; an operand that requires grad makes autograd
    record the update (the general path), unless under no_grad."""
    if kind == "self_T" and len(shape) != 2:
        kind = "self"
    with mock.patch.object(direct, "BLOCK", block):
        got = _run(op, dtype, shape, layout, kind, values, grad)
    with general_path():
        want = _run(op, dtype, shape, layout, kind, values, grad)
    assert got == want


@pytest.mark.parametrize("bounds", [lambda t: (-1, t), lambda t: (-1, t.T), lambda t: (t.T, 0.5), lambda t: (t, t.T)])
@pytest.mark.parametrize("block", [1 << 16, 2])
def test_clamp_bounds_over_the_destination(bounds, block):
    """clamp_ reads an upper bound over the destination's memory before its lower bound's step writes
    the destination, as the general path (where, then where on the first result) does."""
    a = np.array([[-3.0, 0.5, 2.0], [-0.5, 1.5, -2.0], [0.0, 3.0, -1.0]])
    t = tg.tensor(a)
    with mock.patch.object(direct, "BLOCK", block):
        t.clamp_(*bounds(t))
    lo, hi = bounds(tg.tensor(a))
    lo, hi = (b.numpy() if isinstance(b, tg.Tensor) else b for b in (lo, hi))
    want = np.where(a < lo, lo, a)
    np.testing.assert_array_equal(t.numpy(), np.where(want > hi, hi, want))


@settings(max_examples=40, deadline=None)
@given(rows=st.integers(1, 6), cols=st.integers(1, 9), alpha=st.sampled_from([1, 2, -0.5]),
       seed=st.integers(0, 2**16), block=st.sampled_from([1 << 16, 5]))
def test_optimizer_updates_against_numpy(rows, cols, alpha, seed, block):
    """SGD-with-momentum and Adam-style updates of float32 tensors (mul_, add_ with alpha, sub_,
    div_, clamp_) against the same formulas in NumPy."""
    rng = np.random.default_rng(seed)
    p0, g0, m0 = (rng.standard_normal((rows, cols)).astype(np.float32) for _ in range(3))
    p, g, m = tg.tensor(p0), tg.tensor(g0), tg.tensor(m0)
    with mock.patch.object(direct, "BLOCK", block):
        m.mul_(0.9).add_(g, alpha=alpha)
        p.sub_(m, alpha=0.1)
        p.div_(tg.tensor(np.float32(2.0)))
        p.clamp_(-0.5, 0.5)
    f = np.float32
    m1 = m0 * f(0.9) + (g0 * f(alpha) if alpha != 1 else g0)
    p1 = np.clip((p0 - m1 * f(0.1)) / f(2.0), f(-0.5), f(0.5))
    np.testing.assert_array_equal(m.numpy(), m1)
    np.testing.assert_array_equal(p.numpy(), p1)
    assert m._version == 2 and p._version == 3


def _peak(fn):
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("block", [1 << 16, 2])
def test_an_element_of_the_destination_is_read_before_it_is_written(block):
    """An operand viewing one element of the destination (0-d) is read before any block is written;
    clamp_'s upper bound before its lower bound's step writes."""
    a = np.array([[-3.0, 5.0], [3.0, 4.0], [6.0, -2.0]])
    for update, want in [(lambda t: t.add_(t[0, 0], alpha=2), a - 6.0),
                         (lambda t: t.clamp_(0, t[0, 0]), np.full_like(a, -3.0))]:
        t = tg.tensor(a)
        with mock.patch.object(direct, "BLOCK", block):
            update(t)
        np.testing.assert_array_equal(t.numpy(), want)


@pytest.mark.parametrize("op", ["add", "add_alpha", "sub_alpha", "mul", "div", "clamp", "exp", "pow",
                                "fill_number", "relu", "neg"])
def test_no_full_size_temporary(op):
    """A large in-place update allocates at most one block of scratch (NumPy reports its arrays to
    tracemalloc); the general path allocates the whole value (copy_ of a tensor of the same dtype
    and shape never did)."""
    t, o = tg.ones(N), tg.full((N,), 2.0)
    size = t.numel() * 4
    assert _peak(lambda: OPS[op](t, o)) <= size // 2
    with general_path():
        assert _peak(lambda: OPS[op](t, o)) >= size


def test_autograd_rules_unchanged():
    """In-place on a leaf that requires grad raises; under no_grad (an optimizer step) it is written
    in place; an update whose value autograd records keeps its history."""
    x = tg.ones(4, requires_grad=True)
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad"):
        x.add_(1)
    with pytest.raises(RuntimeError, match="a view of a leaf Variable"):
        x[1:].mul_(2)
    data = x._data
    with tg.no_grad():
        x.sub_(tg.full((4,), 0.5), alpha=2)
    assert x._data is data and x._version == 1 and x.grad_fn is None and x.requires_grad
    np.testing.assert_array_equal(x.detach().numpy(), [0.0] * 4)
    y = x * 3
    y.add_(tg.ones(4))
    y.mul_(2.0)                   # records MulBackward: d/dx 2 (3x + 1) = 6
    assert y.grad_fn is not None
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [6.0] * 4)


def test_views_of_the_destination_follow():
    base = tg.zeros(3, 4)
    row, col = base[1], base[:, 2]
    row.add_(tg.arange(4.0))
    col.mul_(10.0)
    assert base._version == row._version == col._version == 2
    want = np.zeros((3, 4))
    want[1] = np.arange(4.0)
    want[:, 2] *= 10
    np.testing.assert_array_equal(base.numpy(), want)
    np.testing.assert_array_equal(row.numpy(), want[1])
    np.testing.assert_array_equal((col + 0).numpy(), want[:, 2])


def test_compiled_in_place_is_functionalized():
    """Inside tg.compile the update is traced (written back to the argument), as before."""
    @tg.compile
    def step(p, g):
        with tg.no_grad():
            p.sub_(g, alpha=0.5)
            p.clamp_(max=1.0)
        return p.sum()

    p0 = np.array([1.0, 2.0, 3.0], np.float32)
    p, g = tg.tensor(p0), tg.tensor(np.array([2.0, 0.0, 4.0], np.float32))
    for _ in range(2):
        step(p, g)
    q = tg.tensor(p0)
    for _ in range(2):
        q.sub_(g, alpha=0.5).clamp_(max=1.0)
    np.testing.assert_array_equal(p.numpy(), q.numpy())


# ------------------------------------------------------------ gradient accumulation

def _losses():
    """(name, loss(x, c)) pairs whose gradient to x is c: eager, and compiled (the generated backward
    of a one-element result of leaves; the engine's path with a non-leaf input)."""
    plain = tg.compile(lambda x, c: (x * c).sum())
    return [("eager", lambda x, c: (x * c).sum()),
            ("compiled", plain),
            ("compiled_nonleaf", lambda x, c: plain(x * 1.0, c))]


@pytest.mark.parametrize("name,loss", _losses())
@given(k=st.integers(1, 4), seed=st.integers(0, 2**16))
@settings(max_examples=8, deadline=None)
def test_accumulation_is_the_sum_in_place(name, loss, k, seed):
    rng = np.random.default_rng(seed)
    cs = [rng.standard_normal((3, 5)).astype(np.float32) for _ in range(k)]
    x = tg.tensor(rng.standard_normal((3, 5)).astype(np.float32), requires_grad=True)
    loss(x, tg.tensor(cs[0])).backward()
    g, data = x.grad, x.grad._data
    assert not any(np.shares_memory(data, c) for c in cs)
    want = cs[0].copy()
    for i, c in enumerate(cs[1:]):
        loss(x, tg.tensor(c)).backward()
        want += c
        assert x.grad is g and x.grad._data is data and g._version == i + 1
    np.testing.assert_allclose(g.numpy(), want, rtol=1e-6, atol=1e-6)


def test_accumulation_into_a_grad_the_user_holds():
    """An assigned .grad is the user's tensor: backward adds into it (PyTorch's AccumulateGrad)."""
    for make in (lambda: tg.tensor(np.ones(4, np.float32)), lambda: tg.zeros(2, 4)[1]):
        x = tg.zeros(4, requires_grad=True)
        held = make()
        x.grad = held
        (x * 2.0).sum().backward()
        assert x.grad is held and held._version == 1
        np.testing.assert_array_equal(held.numpy(), np.asarray(make().numpy()) + 2.0)
    base = tg.zeros(2, 4)
    x = tg.zeros(4, requires_grad=True)
    x.grad = base[1]
    (x * 3.0).sum().backward()
    np.testing.assert_array_equal(base.numpy(), [[0.0] * 4, [3.0] * 4])


@pytest.mark.parametrize("grad, message", [
    (lambda: tg.zeros(1).expand(4), "more than one element of the written-to tensor refers to a single memory"),
    (lambda: tg.from_numpy(np.frombuffer(bytes(16), np.float32)), "read-only memory"),
])
@pytest.mark.parametrize("name,loss", _losses())
def test_accumulation_into_an_unwritable_grad_raises(grad, message, name, loss):
    x = tg.zeros(4, requires_grad=True)
    x.grad = grad()
    with pytest.raises(RuntimeError, match=message):
        loss(x, tg.ones(4)).backward()


def test_gradient_overlapping_the_grad():
    """backward(gradient) where the gradient is x.grad itself or its transpose: NumPy reads the
    overlapping source first, so the sum is that of the values before the update."""
    a = np.arange(9.0).reshape(3, 3)
    x = tg.tensor(a, requires_grad=True)
    x.backward(tg.tensor(a))
    x.backward(x.grad)
    np.testing.assert_array_equal(x.grad.numpy(), 2 * a)
    x.backward(x.grad.T)
    np.testing.assert_array_equal(x.grad.numpy(), 2 * a + 2 * a.T)


def test_grad_of_another_dtype_keeps_it():
    x = tg.ones(3, requires_grad=True)
    x.grad = tg.zeros(3, dtype=tg.float64)
    (x * 2.0).sum().backward()
    (x * 2.0).sum().backward()
    assert x.grad.dtype == tg.float64
    np.testing.assert_array_equal(x.grad.numpy(), [4.0] * 3)


def test_accumulation_allocates_no_full_size_sum():
    """The accumulation of a large gradient adds into .grad: the step allocates the backward's own
    gradient, not a second array for the sum."""
    x = tg.zeros(N, requires_grad=True)
    c = tg.ones(N)
    f = tg.compile(lambda x, c: (x * c).sum())
    f(x, c).backward()
    size = N * 4
    assert _peak(lambda: f(x, c).backward()) < 2 * size
    with general_path():
        assert _peak(lambda: f(x, c).backward()) >= 2 * size
    np.testing.assert_array_equal(x.grad.numpy(), np.full(N, 3.0, np.float32))


def test_threads_accumulate_their_own_leaves():
    f = tg.compile(lambda x, c: (x * c).sum())
    xs = [tg.zeros(64, requires_grad=True) for _ in range(4)]

    def work(i):
        for _ in range(10):
            f(xs[i], tg.full((64,), float(i))).backward()
            xs[i].grad.mul_(1.0)
    run_threads(work, 4)
    for i, x in enumerate(xs):
        np.testing.assert_array_equal(x.grad.numpy(), np.full(64, 10.0 * i, np.float32))


# ------------------------------------------------------------ x[index] = v with tensor indices

@st.composite
def _advanced_index(draw):
    """(shape, index) with tensor indices (of one length, so they broadcast) or one boolean mask;
    tensor indices hold distinct positions (the differentiable path sums repeated positions, the
    eager one keeps the last: both as PyTorch)."""
    shape = tuple(draw(st.lists(st.integers(1, 5), min_size=1, max_size=3)))
    kinds = [draw(st.sampled_from(["all", "slice", "int", "tensor", "tensor", "mask"])) for _ in shape]
    if "mask" in kinds:
        m = kinds.index("mask")
        kinds = ["all" if k in ("tensor", "mask") and d != m else k for d, k in enumerate(kinds)]
    elif "tensor" not in kinds:
        kinds[0] = "tensor"
    length = draw(st.integers(1, min(n for n, k in zip(shape, kinds) if k in ("tensor", "mask"))))
    items = []
    for n, kind in zip(shape, kinds):
        if kind == "slice":
            items.append(slice(draw(st.integers(0, n - 1)), None, draw(st.integers(1, 2))))
        elif kind == "int":
            items.append(draw(st.integers(-n, n - 1)))
        elif kind == "tensor":
            pos = draw(st.permutations(range(n)))[:length]
            items.append(tg.tensor([p - n if draw(st.booleans()) else p for p in pos], dtype=tg.int64))
        elif kind == "mask":
            items.append(tg.tensor(draw(st.lists(st.booleans(), min_size=n, max_size=n))))
        else:
            items.append(slice(None))
    if draw(st.booleans()):
        items.insert(draw(st.integers(0, len(items))), None)
    return shape, tuple(items)


@settings(max_examples=EXAMPLES, deadline=None)
@given(case=_advanced_index(), seed=st.integers(0, 2**16), scalar=st.booleans())
def test_setitem_with_tensor_indices(case, seed, scalar):
    """Eager x[index] = v (written through coordinates of the selection's size) against the
    differentiable path (a scatter into the whole tensor, recorded by autograd)."""
    shape, index = case
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(shape)
    x = tg.tensor(a)
    sel = x[index].shape
    v = 2.5 if scalar else tg.tensor(rng.standard_normal(sel))
    x[index] = v
    assert x._version == 1
    y = tg.tensor(a, requires_grad=True) * 1.0
    y[index] = v
    np.testing.assert_array_equal(x.numpy(), y.detach().numpy())


def test_setitem_with_tensor_indices_allocates_the_selection_only():
    x = tg.zeros(512, 512)
    rows, mask = tg.tensor([1, -5, 7]), tg.zeros(512, dtype=tg.bool)
    mask[3] = True
    for index in (rows, (slice(None), rows), (rows, rows), mask, (slice(2, 100, 3), rows)):
        assert _peak(lambda: x.__setitem__(index, 1.0)) < x.numel() * 4 // 4
    a = np.zeros((512, 512))
    a[[1, -5, 7]] = 1.0
    a[:, [1, -5, 7]] = 1.0
    a[3] = 1.0
    a[2:100:3][:, [1, -5, 7]] = 1.0
    np.testing.assert_array_equal(x.numpy(), a)
