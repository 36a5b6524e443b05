"""In-place ops on views (issue 9 item 7): as PyTorch's CopySlices, an in-place op on a view of a
tensor whose value autograd records rebases the base's history; other views of the base follow it;
inside tg.compile the update is functionalized through the base (arguments written back). Checked
against finite differences (tg.gradcheck, float64), eager against compiled, and generated cases."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tracegrad as tg

BACKENDS = ["interpret", "llvm"]


def f64(a, grad=True):
    return tg.tensor(np.asarray(a, dtype=np.float64), requires_grad=grad)


def _scaled_head(x):
    h = x * 2
    h[:2].mul_(5)
    return (h * h).sum()


def test_in_place_on_a_slice_of_a_non_leaf_rebases_its_history():
    x = f64(np.arange(4.0))
    y = _scaled_head(x)
    y.backward()
    # h = [10 x0, 10 x1, 2 x2, 2 x3]: d sum h^2 / dx = [200 x0, 200 x1, 8 x2, 8 x3] (PyTorch's numbers)
    assert y.item() == 152.0
    np.testing.assert_array_equal(x.grad.numpy(), [0.0, 200.0, 16.0, 24.0])
    h = x * 1
    h[1:3].add_(1)
    assert h.grad_fn.name() == "CopySlices"
    assert tg.gradcheck(_scaled_head, (f64([0.5, -1.0, 2.0, 0.25]),))


def test_other_views_of_the_base_follow_it():
    def f(x):
        h = x * 1
        a, b = h[:2], h[1:3]
        a.mul_(3)                      # b overlaps a: it reads the updated base
        return (b * b).sum() + h.exp().sum()

    x = f64([0.0, 0.25, 0.5, 0.75])
    assert tg.gradcheck(f, (x,))
    h = x.detach() * 1
    b = h[1:3]
    h[:2].mul_(3)
    assert b.numpy().tolist() == [0.75, 0.5]


def test_a_value_that_requires_grad_written_into_a_plain_tensor():
    w = f64([2.0, 3.0])
    h = tg.zeros(4, dtype=tg.float64)
    h[1:3].copy_(w)
    assert h.requires_grad and h.grad_fn.name() == "CopySlices"
    (h * tg.arange(4.0, dtype=tg.float64)).sum().backward()
    assert w.grad.numpy().tolist() == [1.0, 2.0]


def test_views_of_leaves_and_expanded_views_refuse_in_place():
    leaf = tg.ones(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="a view of a leaf Variable that requires grad"):
        leaf[:2].mul_(2)
    with tg.no_grad():
        leaf[:2].mul_(2)               # allowed without recording, as in PyTorch
    assert leaf.detach().numpy().tolist() == [2.0, 2.0, 1.0]
    e = (tg.ones(1, requires_grad=True) * 1).expand(3)
    with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
        e.mul_(2)


@pytest.mark.parametrize("backend", BACKENDS)
def test_compiled_in_place_on_views_matches_eager(backend):
    def f(x, w):
        h = x * w
        h[:, 1:].mul_(3)
        h.T[0].add_(w[0])              # a view of a view
        return (h * h).sum()

    x, w = f64(np.arange(6.0).reshape(2, 3) / 4), f64([0.5, -1.0, 2.0])
    cf = tg.compile(f, backend=backend)
    out = cf(x, w)
    out.backward()
    xe, we = f64(x.detach().numpy()), f64(w.detach().numpy())
    ref = f(xe, we)
    ref.backward()
    assert out.item() == pytest.approx(ref.item(), rel=1e-12)
    np.testing.assert_allclose(x.grad.numpy(), xe.grad.numpy(), rtol=1e-12)
    np.testing.assert_allclose(w.grad.numpy(), we.grad.numpy(), rtol=1e-12)
    assert tg.gradcheck(cf, (xe, we))


@pytest.mark.parametrize("backend", BACKENDS)
def test_compiled_in_place_on_cat_and_on_views_of_arguments(backend):
    def g(a, b):
        c = tg.cat([a, b])
        c[1:3].mul_(10)
        return c * 1

    a, b = f64([1.0, 2.0]), f64([3.0, 4.0, 5.0])
    out = tg.compile(g, backend=backend)(a, b)
    np.testing.assert_array_equal(out.detach().numpy(), [1.0, 20.0, 30.0, 4.0, 5.0])
    out.sum().backward()
    assert a.grad.numpy().tolist() == [1.0, 10.0] and b.grad.numpy().tolist() == [10.0, 1.0, 1.0]

    p = tg.ones(4)

    def step(p):                       # an optimizer-like update of slices of an argument
        p[:2].mul_(3)
        p[2:].add_(1)

    tg.compile(step, backend=backend)(p)
    assert p.numpy().tolist() == [3.0, 3.0, 2.0, 2.0]


# ------------------------------------------------------------------ generated cases

VIEWS = [
    ("slice", lambda t, r: t[r.integers(0, 2):] if t.shape[0] > 1 else t),
    ("step", lambda t, r: t[::2]),
    ("select", lambda t, r: t[r.integers(0, t.shape[0])] if t.ndim > 1 else t),
    ("transpose", lambda t, r: t.transpose(0, -1)),
    ("unsqueeze", lambda t, r: t.unsqueeze(0)),
    ("column", lambda t, r: t[..., 1:] if t.shape[-1] > 1 else t),
]
UPDATES = [
    ("mul_", lambda v, o: v.mul_(o)),
    ("add_", lambda v, o: v.add_(o * 2)),
    ("copy_", lambda v, o: v.copy_(o.exp())),
    ("zero_", lambda v, o: v.zero_()),
]


def _program(seed, picks, upd):
    def f(x, o_flat):
        r = np.random.default_rng(seed)
        h = x.sin() * 1
        v = h
        for k in picks:
            v = VIEWS[k][1](v, r)
        other = h[..., :1] if h.shape[-1] > 1 else h      # another view, read after the update
        o = o_flat[:v.numel()].reshape(v.shape) if v.numel() else o_flat[:0].reshape(v.shape)
        UPDATES[upd][1](v, o)
        return (h * h).sum() + other.exp().sum() + v.sum()
    return f


@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 2**16), shape=st.sampled_from([(3, 4), (2, 3, 4), (4,), (3, 1, 2)]),
       picks=st.lists(st.integers(0, len(VIEWS) - 1), min_size=1, max_size=3), upd=st.integers(0, len(UPDATES) - 1))
def test_generated_in_place_updates_of_views(seed, shape, picks, upd):
    rng = np.random.default_rng(seed)
    x, o = f64(rng.uniform(-1, 1, shape)), f64(rng.uniform(-1, 1, int(np.prod(shape))))
    f = _program(seed, picks, upd)
    assert tg.gradcheck(f, (x, o))
    ref = f(x, o)
    ref.backward()
    xc, oc = f64(x.detach().numpy()), f64(o.detach().numpy())
    out = tg.compile(f, backend="interpret")(xc, oc)
    out.backward()
    assert out.item() == pytest.approx(ref.item(), rel=1e-12)
    for got, want in ((xc.grad, x.grad), (oc.grad, o.grad)):
        assert (got is None) == (want is None)            # zero_ leaves o unused: None, as eager
        if want is not None:
            np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-10, atol=1e-12)


def test_overwriting_a_value_with_history_by_a_constant_keeps_the_graph():
    x = f64([1.0, -2.0])
    h = x * 2
    h.zero_()
    assert h.requires_grad and h.grad_fn is not None        # PyTorch: ZeroBackward
    h.add_(1).sum().backward()
    assert x.grad.numpy().tolist() == [0.0, 0.0]             # zeros, not None: x still reaches the loss
    y = f64([3.0])
    g = y * 1
    g.copy_(tg.tensor([5.0], dtype=tg.float64))
    assert g.requires_grad and g.item() == 5.0
    z = tg.zeros(2)
    z.fill_(1.0)
    assert not z.requires_grad


@pytest.mark.parametrize("backend", BACKENDS)
def test_compiled_select_views_follow_an_update_of_their_base(backend):
    def f(x):
        h = x * 1
        row, col = h[0], h[:, 1].unsqueeze(0)   # reshapes that only drop/add unit axes: views in any layout
        h.mul_(3)
        return row * 1, col * 1

    x = tg.tensor(np.arange(6.0).reshape(2, 3))
    got, want = tg.compile(f, backend=backend)(x), f(x)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g.numpy(), w.numpy())
