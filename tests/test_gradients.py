"""Gradients of every differentiable operation against central finite differences (tg.gradcheck, float64),
closed forms for second derivatives, and forward mode against finite differences and VJP transposition.

tg.gradcheck is itself checked (it must catch a wrong gradient), and a few gradients are compared with
hand-written NumPy closed forms so that the oracle does not rest on gradcheck alone.
"""
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra import numpy as hnp

import tracegrad as tg
import tracegrad.nn.functional as F

pytestmark = pytest.mark.filterwarnings("ignore::tracegrad.BroadcastWarning")

SETTINGS = settings(max_examples=8, deadline=None)


def rnd(shape, seed=0, low=-2.0, high=2.0):
    return np.random.default_rng(seed).uniform(low, high, shape)


def away(a, points=(0.0,), margin=0.15):
    """`a` nudged at least `margin` away from the kinks in `points`."""
    a = np.array(a, dtype=np.float64)
    for p in points:
        close = np.abs(a - p) < margin
        a[close] = p + np.where(a[close] >= p, margin, -margin)
    return a


def leaf(a, dtype=tg.float64):
    return tg.tensor(np.asarray(a, np.float64), dtype=dtype, requires_grad=True)


def gc(f, *arrays, **kw):
    """gradcheck `f` at float64 leaves made from `arrays` (non-float arrays are passed through)."""
    args = [leaf(a) if isinstance(a, np.ndarray) and a.dtype.kind == "f" else a for a in arrays]
    assert tg.gradcheck(f, args, **kw)


def grad_of(f, *arrays):
    xs = [leaf(a) for a in arrays]
    out = f(*xs)
    return [g.numpy() for g in tg.grad(out, xs)]


# ------------------------------------------------------------------ gradcheck checks itself

def test_gradcheck_catches_a_wrong_gradient():
    x = leaf(rnd((3, 4), 1))

    def wrong(x):              # the detached factor hides half of d(x*x)/dx
        return x * x.detach()

    with pytest.raises(tg.GradcheckError) as e:
        tg.gradcheck(wrong, (x,))
    msg = str(e.value)
    assert isinstance(e.value, RuntimeError)
    assert "input 0" in msg and "element (" in msg and "analytic" in msg and "numerical" in msg
    # the values quoted are the real ones (of gradcheck's random projection): numerical = 2 x analytic
    idx = tuple(int(i) for i in msg.split("element (")[1].split(")")[0].split(",") if i.strip())
    assert len(idx) == 2 and 0 <= idx[0] < 3 and 0 <= idx[1] < 4
    ana = float(msg.split("analytic ")[1].split(",")[0].rstrip())
    num = float(msg.split("numerical ")[1].split()[0].rstrip(",)"))
    assert num == pytest.approx(2 * ana, rel=1e-5)


def test_gradcheck_names_the_second_input():
    a, b = leaf(rnd((2, 3), 2)), leaf(rnd((3,), 3))
    with pytest.raises(tg.GradcheckError, match="input 1"):
        tg.gradcheck(lambda a, b: a * b.detach().exp() + b.detach(), (a, b))


def test_gradcheck_skips_inputs_without_grad_and_checks_float32_in_float64():
    a = tg.tensor(rnd((3,), 4), dtype=tg.float32, requires_grad=True)
    b = tg.tensor(rnd((3,), 5))                      # no requires_grad: held fixed
    assert tg.gradcheck(lambda a, b: (a * b).exp(), (a, b))
    idx = tg.tensor([0, 2])
    assert tg.gradcheck(lambda a, i: a[i] ** 2, (a, idx))


def test_closed_form_gradients_without_gradcheck():
    a, b = rnd((3, 4), 6), rnd((4,), 7)
    ga, gb = grad_of(lambda x, y: (x * y + x.exp()).sum(), a, b)
    np.testing.assert_allclose(ga, np.broadcast_to(b, a.shape) + np.exp(a), rtol=1e-12)
    np.testing.assert_allclose(gb, a.sum(0), rtol=1e-12)
    w, x = rnd((4, 3), 8), rnd((5, 3), 9)
    gw, gx = grad_of(lambda w, x: (x @ w.T).tanh().sum(), w, x)
    d = 1 - np.tanh(x @ w.T) ** 2
    np.testing.assert_allclose(gw, d.T @ x, rtol=1e-12)
    np.testing.assert_allclose(gx, d @ w, rtol=1e-12)


# ------------------------------------------------------------------ unary

UNARY = {
    "exp": ((-2, 2), ()), "log": ((0.2, 3), ()), "sqrt": ((0.2, 3), ()), "rsqrt": ((0.2, 3), ()),
    "tanh": ((-2, 2), ()), "sigmoid": ((-4, 4), ()), "relu": ((-2, 2), (0.0,)), "sin": ((-3, 3), ()),
    "cos": ((-3, 3), ()), "abs": ((-2, 2), (0.0,)), "sign": ((-2, 2), (0.0,)), "neg": ((-2, 2), ()),
    "reciprocal": ((0.3, 3), ()), "square": ((-2, 2), ()), "log1p": ((-0.5, 2), ()), "expm1": ((-2, 2), ()),
}


@pytest.mark.parametrize("name", list(UNARY))
def test_unary(name):
    (lo, hi), kinks = UNARY[name]
    a = away(rnd((3, 4), 10, lo, hi), kinks)
    gc(lambda x: getattr(x, name)(), a)
    gc(lambda x: getattr(tg, name)(x[0]), a)


def test_unary_closed_forms():
    a = away(rnd((6,), 11), (0.0,))
    for f, d in [(lambda x: x.sigmoid(), lambda a: np.exp(-a) / (1 + np.exp(-a)) ** 2),
                 (lambda x: x.relu(), lambda a: (a > 0).astype(float)),
                 (lambda x: x.abs(), np.sign),
                 (lambda x: x.sign(), np.zeros_like),
                 (lambda x: x.sin(), np.cos)]:
        (g,) = grad_of(lambda x: f(x).sum(), a)
        np.testing.assert_allclose(g, d(a), rtol=1e-12, atol=1e-15)


# ------------------------------------------------------------------ binary with broadcasting

BINARY = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b, "pow": lambda a, b: a ** b, "maximum": tg.maximum, "minimum": tg.minimum,
}


@pytest.mark.parametrize("name", list(BINARY))
@SETTINGS
@given(shapes=hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3, min_side=1, max_side=3),
       seed=st.integers(0, 2**16))
def test_binary_broadcast(name, shapes, seed):
    (sa, sb), _ = shapes
    a, b = rnd(sa, seed), rnd(sb, seed + 1)
    if name == "pow":
        a = rnd(sa, seed, 0.3, 2.0)
    if name == "div":
        b = away(b, (0.0,), 0.3)
    if name in ("maximum", "minimum"):
        b = b + 0.05          # no ties: ties have their own test
    gc(BINARY[name], a, b)


def test_classic_broadcast_shape():
    """(64,1,128)*(1,32,128)+(128,), shrunk: gradcheck costs two forward passes per input element."""
    a, b, c = rnd((8, 1, 16), 12), rnd((1, 4, 16), 13), rnd((16,), 14)
    gc(lambda a, b, c: a * b + c, a, b, c)
    ga, gb, gc_ = grad_of(lambda a, b, c: (a * b + c).sum(), a, b, c)
    np.testing.assert_allclose(ga, np.broadcast_to(b.sum(1, keepdims=True), a.shape), rtol=1e-12)
    np.testing.assert_allclose(gb, np.broadcast_to(a.sum(0, keepdims=True), b.shape), rtol=1e-12)
    np.testing.assert_allclose(gc_, np.full(16, 32.0))


@pytest.mark.parametrize("f", [lambda x: 2.0 - x, lambda x: 3.0 / x, lambda x: 2.0 ** x, lambda x: x ** 3,
                               lambda x: 1.5 * x + 2, lambda x: x ** 0.5 - x / 4, lambda x: (-x) ** 2.0])
def test_scalar_operands(f):
    gc(f, rnd((2, 3), 15, 0.3, 2.0))


def test_pow_edge_cases_match_pytorch():
    x = leaf(np.array([0.0, 1.0, 2.0]))
    (g,) = tg.grad((x ** 0).sum(), x)
    np.testing.assert_array_equal(g.numpy(), [0.0, 0.0, 0.0])
    (g,) = tg.grad((x ** 2.0).sum(), x)
    np.testing.assert_array_equal(g.numpy(), [0.0, 2.0, 4.0])
    e = leaf(np.array([1.0, 2.0]))
    (g,) = tg.grad((tg.tensor(0.0, dtype=tg.float64) ** e).sum(), e)
    np.testing.assert_array_equal(g.numpy(), [0.0, 0.0])


def test_maximum_minimum_ties_split_evenly():
    a = np.array([1.0, 2.0, 3.0, -1.0])
    b = np.array([1.0, 0.0, 3.0, 5.0])
    ga, gb = grad_of(lambda a, b: tg.maximum(a, b).sum(), a, b)
    np.testing.assert_array_equal(ga, [0.5, 1.0, 0.5, 0.0])
    np.testing.assert_array_equal(gb, [0.5, 0.0, 0.5, 1.0])
    ga, gb = grad_of(lambda a, b: tg.minimum(a, b).sum(), a, b)
    np.testing.assert_array_equal(ga, [0.5, 0.0, 0.5, 1.0])
    np.testing.assert_array_equal(gb, [0.5, 1.0, 0.5, 0.0])
    gc(tg.maximum, a, b)      # central differences see the even split at a tie too
    gc(tg.minimum, a, b)
    ta, tb = np.array([1.0, 2.0, 4.0, 8.0]), np.array([3.0, 5.0, 7.0, 11.0])
    for f, pick in ((tg.maximum, a > b), (tg.minimum, a < b)):
        _, t = tg.jvp(f, (tg.tensor(a), tg.tensor(b)), (tg.tensor(ta), tg.tensor(tb)))
        np.testing.assert_array_equal(t.numpy(), np.where(a == b, (ta + tb) / 2, np.where(pick, ta, tb)))


def test_clamp_and_where():
    a = away(rnd((3, 4), 16), (-0.5, 0.7))
    gc(lambda x: x.clamp(-0.5, 0.7), a)
    gc(lambda x: x.clamp(min=-0.5) * x, a)
    lo, hi = rnd((4,), 17, -1.0, -0.2), rnd((3, 1), 18, 0.2, 1.0)
    gc(lambda x, lo, hi: x.clamp(lo, hi), a, lo, hi)
    b = rnd((4,), 19)
    gc(lambda x, b: tg.where(x > 0, x * 2, b), a, b)
    gc(lambda x: tg.where(x > 0, x.exp(), 0.0), a)
    gc(lambda x: tg.where(x > 0, 1.0, x ** 2), a)
    # PyTorch's clamp passes the gradient at the boundaries
    x = leaf(np.array([-1.0, 0.0, 0.5, 1.0, 2.0]))
    (g,) = tg.grad(x.clamp(0.0, 1.0).sum(), x)
    np.testing.assert_array_equal(g.numpy(), [0.0, 1.0, 1.0, 1.0, 0.0])


def test_matmul():
    for sa, sb in [((3,), (3,)), ((3,), (3, 2)), ((2, 3), (3,)), ((2, 3), (3, 4)), ((2, 1, 2, 3), (3, 3, 2)),
                   ((3,), (2, 3, 2)), ((2, 2, 3), (3,))]:
        gc(lambda a, b: a @ b, rnd(sa, 20), rnd(sb, 21))
    gc(lambda a: a @ a.mT, rnd((2, 3), 22))


# ------------------------------------------------------------------ reductions

@st.composite
def shape_and_axis(draw):
    shape = draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=3))
    n = len(shape)
    kind = draw(st.sampled_from(["none", "int", "tuple"]))
    if kind == "none":
        axis = None
    elif kind == "int":
        axis = draw(st.integers(-n, n - 1))
    else:
        axis = tuple(draw(st.lists(st.integers(-n, n - 1), min_size=1, max_size=n,
                                   unique_by=lambda a: a % n)))
    return shape, axis, draw(st.booleans())


REDUCTIONS = ["sum", "mean", "amax", "amin", "prod", "logsumexp", "var", "std"]


@pytest.mark.parametrize("name", REDUCTIONS)
@SETTINGS
@given(sak=shape_and_axis(), seed=st.integers(0, 2**16))
def test_reductions(name, sak, seed):
    shape, axis, keepdims = sak
    a = rnd(shape, seed, 0.5, 1.5)
    if name in ("amax", "amin"):      # distinct values, far apart next to gradcheck's step (no near ties)
        a = 0.5 + np.random.default_rng(seed).permutation(a.size).reshape(shape) / max(a.size, 1)
    if name in ("std", "var"):
        n = a.size if axis is None else math.prod(shape[i] for i in ((axis,) if isinstance(axis, int) else axis))
        if n < 2:
            return     # N - 1 = 0 (var: 0/0); sqrt(0): not differentiable
    gc(lambda x: getattr(x, name)(axis=axis, keepdims=keepdims), a)


def test_var_unbiased_and_dim_spelling():
    a = rnd((3, 4), 23)
    gc(lambda x: x.var(1, unbiased=True), a)
    gc(lambda x: x.var(dim=(0, 1), keepdim=True, unbiased=True), a)
    gc(lambda x: x.sum(dim=-1, keepdim=True) * x, a)


def test_max_min_reduction_ties():
    a = np.array([[1.0, 3.0, 3.0], [2.0, 0.0, 2.0]])
    (g,) = grad_of(lambda x: x.amax(1).sum(), a)          # amax: split evenly among ties
    np.testing.assert_array_equal(g, [[0, 0.5, 0.5], [0.5, 0, 0.5]])
    (g,) = grad_of(lambda x: x.max(), a)
    np.testing.assert_array_equal(g, [[0, 0.5, 0.5], [0, 0, 0]])
    (g,) = grad_of(lambda x: x.max(1).values.sum(), a)   # max(dim): all to the selected (first) index
    np.testing.assert_array_equal(g, [[0, 1, 0], [1, 0, 0]])
    (g,) = grad_of(lambda x: x.min(0).values.sum(), a)
    np.testing.assert_array_equal(g, [[1, 0, 0], [0, 1, 1]])


def test_prod_with_zeros():
    a = np.array([[2.0, 0.0, 3.0], [0.0, 0.0, 4.0], [1.5, 2.0, -1.0]])
    (g,) = grad_of(lambda x: x.prod(1).sum(), a)
    np.testing.assert_allclose(g, [[0, 6, 0], [0, 0, 0], [-2, -1.5, 3]])
    gc(lambda x: x.prod(1), a)
    gc(lambda x: x.prod(), rnd((2, 3), 24))


def test_logsumexp_extreme_values():
    a = np.array([[1000.0, 1000.0, 0.0], [-1000.0, -1001.0, -1000.5]])
    (g,) = grad_of(lambda x: x.logsumexp(1).sum(), a)
    m = a - a.max(1, keepdims=True)
    np.testing.assert_allclose(g, np.exp(m) / np.exp(m).sum(1, keepdims=True), rtol=1e-12)
    gc(lambda x: x.logsumexp(1), a)


# ------------------------------------------------------------------ views and shape ops

VIEWS = {
    "slice_steps": lambda x: x[1::2, ::3],
    "slice_neg": lambda x: x[-2:, 1:-1],
    "int_index": lambda x: x[1],
    "col": lambda x: x[:, 0],
    "newaxis": lambda x: x[..., None] * x[None, 0],
    "transpose": lambda x: x.transpose(0, 1) * tg.arange(4, dtype=tg.float64),
    "T": lambda x: x.T @ x,
    "mT": lambda x: x.mT.exp(),
    "permute": lambda x: x.reshape(2, 2, 5).permute(2, 0, 1)[1:],
    "expand": lambda x: x[:1].expand(3, 5) * x[1:],
    "expand_new_dims": lambda x: x.expand(2, 4, 5).sin(),
    "broadcast_to": lambda x: x[:, :1].broadcast_to((4, 3)) ** 2,
    "squeeze_unsqueeze": lambda x: x[:, :1].squeeze(1).unsqueeze(0).unsqueeze(-1) * 2,
    "reshape_view": lambda x: x.view(5, 4)[1:3].view(-1) * x.T.reshape(-1)[:8],
    "flatten": lambda x: x.reshape(2, 2, 5).flatten(1),
    "contiguous": lambda x: x.T.contiguous().tanh(),
    "slice_of_slice": lambda x: x[::2][:, 1::2][1:],
}


@pytest.mark.parametrize("name", list(VIEWS))
def test_views(name):
    gc(VIEWS[name], rnd((4, 5), 25))


def test_cat_stack():
    a, b, c = rnd((2, 3), 26), rnd((1, 3), 27), rnd((2, 3), 28)
    gc(lambda a, b, c: tg.cat([a, b, c], 0) * tg.arange(5, dtype=tg.float64)[:, None], a, b, c)
    gc(lambda a, c: tg.cat([a, c, a], axis=-1).exp(), a, c)
    gc(lambda a, c: tg.stack([a, c], 1).sin(), a, c)
    gc(lambda a, c: tg.stack([a, c, a * c], dim=-1), a, c)
    ga, gcc = grad_of(lambda a, c: (tg.stack([a, c, a]) * tg.arange(3, dtype=tg.float64)[:, None, None]).sum(), a, c)
    np.testing.assert_array_equal(ga, np.full((2, 3), 2.0))
    np.testing.assert_array_equal(gcc, np.full((2, 3), 1.0))


# ------------------------------------------------------------------ integer-tensor indexing

def test_gather_scatter_adds_repeated_indices():
    a = rnd((4, 3), 29)
    idx = np.array([0, 2, 2, 0, 2])
    w = rnd((5, 3), 30)
    (g,) = grad_of(lambda x: (x[tg.tensor(idx)] * tg.tensor(w)).sum(), a)
    exp = np.zeros_like(a)
    np.add.at(exp, idx, w)
    np.testing.assert_allclose(g, exp, rtol=1e-12)
    gc(lambda x: x[tg.tensor(idx)], a)


@pytest.mark.parametrize("index", [
    lambda: (tg.arange(4), tg.tensor([2, 0, 2, 1])),                      # logits[arange(n), labels]
    lambda: (slice(None), tg.tensor([[1, 1], [0, 2]])),
    lambda: (tg.tensor([3, 3, -1]),),
    lambda: (tg.tensor([[0], [3]]), tg.tensor([1, 1, 2])),               # broadcast index tensors
    lambda: ([0, 0, 1],),
    lambda: (tg.tensor([1, 2]), None),
])
def test_gather_gradients(index):
    ix = index()
    gc(lambda x: x[ix] * 1.5, rnd((4, 3), 31))


def test_gather_non_adjacent_and_mask():
    a = rnd((3, 4, 2), 32)
    i, j = tg.tensor([0, 2, 2]), tg.tensor([1, 1, 0])
    gc(lambda x: x[i, :, j], a)
    mask = tg.tensor(a > 0)
    gc(lambda x: x[mask].exp(), a)


# ------------------------------------------------------------------ in place and setitem

def test_inplace_gradients():
    a, b = rnd((3, 4), 33), away(rnd((4,), 34), (0.0,), 0.3)

    def f(x, y):
        z = x * 1.0
        z.mul_(y)
        z += x
        z.sub_(y, alpha=2.0)
        z /= y
        return z

    gc(f, a, b)
    ga, gb = grad_of(lambda x, y: f(x, y).sum(), a, b)
    np.testing.assert_allclose(ga, np.broadcast_to(1 + 1 / b, a.shape), rtol=1e-12)
    np.testing.assert_allclose(gb, (-a / b ** 2).sum(0), rtol=1e-12)      # z = x + x/y - 2


def test_setitem_gradients():
    a, v = rnd((3, 4), 35), rnd((4,), 36)

    def f(x, v):
        z = x * 2.0
        z[1] = v
        z[:, 0] = 0.0
        return z

    gc(f, a, v)
    ga, gv = grad_of(lambda x, v: (f(x, v) * tg.tensor(rnd((3, 4), 37))).sum(), a, v)
    w = rnd((3, 4), 37)
    exp_a = 2 * w
    exp_a[1] = 0
    exp_a[:, 0] = 0
    exp_v = w[1].copy()
    exp_v[0] = 0
    np.testing.assert_allclose(ga, exp_a, rtol=1e-12)
    np.testing.assert_allclose(gv, exp_v, rtol=1e-12)

    def g(x):
        z = x * 1.0
        z[tg.tensor([0, 2])] = z[tg.tensor([1, 1])] * 3.0
        return z

    gc(g, a)


# ------------------------------------------------------------------ composites

def test_gelu():
    a = rnd((3, 5), 38, -3, 3)
    gc(lambda x: F.gelu(x), a)
    gc(lambda x: F.gelu(x, approximate="tanh"), a)
    (g,) = grad_of(lambda x: F.gelu(x).sum(), a)
    erf = np.vectorize(math.erf)
    exp = 0.5 * (1 + erf(a / math.sqrt(2))) + a * np.exp(-a * a / 2) / math.sqrt(2 * math.pi)
    np.testing.assert_allclose(g, exp, rtol=1e-12)


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_softmax_log_softmax(axis):
    a = rnd((3, 4), 39, -3, 3)
    gc(lambda x: F.softmax(x, axis), a)
    gc(lambda x: F.log_softmax(x, dim=axis), a)
    gc(lambda x: x.softmax(axis) * x, a)


def test_softmax_closed_form():
    a = rnd((5,), 40)
    w = rnd((5,), 41)
    (g,) = grad_of(lambda x: (F.softmax(x, 0) * tg.tensor(w)).sum(), a)
    p = np.exp(a) / np.exp(a).sum()
    np.testing.assert_allclose(g, p * (w - (p * w).sum()), rtol=1e-12)


@pytest.mark.parametrize("shape,norm", [((3, 5), (5,)), ((2, 2, 3), (2, 3))])
def test_layer_norm(shape, norm):
    a = rnd(shape, 42)
    w, b = rnd(norm, 43), rnd(norm, 44)
    gc(lambda x, w, b: F.layer_norm(x, norm, w, b), a, w, b)
    gc(lambda x: F.layer_norm(x, norm, eps=1e-3), a)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy(reduction):
    a = rnd((4, 3), 45)
    labels = tg.tensor([2, 0, 1, 2])
    gc(lambda x, t: F.cross_entropy(x, t, reduction=reduction), a, labels)
    b = rnd((2, 3, 2), 46)
    gc(lambda x: F.cross_entropy(x, tg.tensor([[0, 2], [1, 1]]), reduction=reduction), b)
    p = np.random.default_rng(47).dirichlet(np.ones(3), 4)
    gc(lambda x: F.cross_entropy(x, tg.tensor(p), reduction=reduction), a)


def test_cross_entropy_closed_form():
    a = rnd((4, 3), 48)
    labels = np.array([2, 0, 1, 2])
    (g,) = grad_of(lambda x: F.cross_entropy(x, tg.tensor(labels)), a)
    p = np.exp(a) / np.exp(a).sum(1, keepdims=True)
    p[np.arange(4), labels] -= 1
    np.testing.assert_allclose(g, p / 4, rtol=1e-12)


def test_losses_and_linear():
    a, b = rnd((3, 4), 49), rnd((3, 4), 50)
    for red in ("mean", "sum", "none"):
        gc(lambda x, y: F.mse_loss(x, y, reduction=red), a, b)
    gc(lambda x, w, bias: F.linear(x, w, bias), rnd((2, 3), 51), rnd((4, 3), 52), rnd((4,), 53))
    gc(lambda x, w: F.linear(x, w), rnd((2, 2, 3), 54), rnd((4, 3), 55))
    gc(lambda x: F.sigmoid(x) * F.tanh(x) + F.relu(x), away(rnd((3, 3), 56), (0.0,)))


def test_dropout_gradient_uses_the_same_mask():
    tg.manual_seed(1)
    x = leaf(np.ones((20, 20)))
    y = F.dropout(x, 0.3)
    (g,) = tg.grad(y.sum(), x)
    np.testing.assert_allclose(g.numpy(), y.detach().numpy())   # mask / (1-p), the same mask as the forward
    (g,) = tg.grad(F.dropout(x, 0.3, training=False).sum(), x)
    np.testing.assert_array_equal(g.numpy(), np.ones((20, 20)))


def test_casts_pass_gradients():
    a = rnd((3,), 57)
    x = tg.tensor(a, dtype=tg.float32, requires_grad=True)
    (g,) = tg.grad((x.double() ** 2).sum(), x)
    assert g.dtype == tg.float32
    np.testing.assert_allclose(g.numpy(), 2 * a.astype(np.float32), rtol=1e-6)


# ------------------------------------------------------------------ second derivatives (create_graph=True)

def _second(f, a):
    x = leaf(a)
    (g,) = tg.grad(f(x).sum(), x, create_graph=True)
    (h,) = tg.grad(g.sum(), x)
    return g.detach().numpy(), h.numpy()


@pytest.mark.parametrize("f,d1,d2", [
    (lambda x: x ** 3, lambda a: 3 * a ** 2, lambda a: 6 * a),
    (lambda x: x.tanh(), lambda a: 1 - np.tanh(a) ** 2, lambda a: -2 * np.tanh(a) * (1 - np.tanh(a) ** 2)),
    (lambda x: x.exp() * x.sin(), lambda a: np.exp(a) * (np.sin(a) + np.cos(a)), lambda a: 2 * np.exp(a) * np.cos(a)),
    (lambda x: x.sigmoid(), lambda a: (s := 1 / (1 + np.exp(-a))) * (1 - s),
     lambda a: (s := 1 / (1 + np.exp(-a))) * (1 - s) * (1 - 2 * s)),
    (lambda x: x.log() / x, lambda a: (1 - np.log(a)) / a ** 2, lambda a: (2 * np.log(a) - 3) / a ** 3),
    (lambda x: x.sqrt(), lambda a: 0.5 / np.sqrt(a), lambda a: -0.25 * a ** -1.5),
    (lambda x: 2.0 ** x, lambda a: np.log(2) * 2 ** a, lambda a: np.log(2) ** 2 * 2 ** a),
])
def test_second_derivatives_closed_form(f, d1, d2):
    a = rnd((5,), 58, 0.3, 2.0)
    g, h = _second(f, a)
    np.testing.assert_allclose(g, d1(a), rtol=1e-10)
    np.testing.assert_allclose(h, d2(a), rtol=1e-10)


def test_hessian_of_logsumexp_and_softmax():
    a = rnd((4,), 59)
    x = leaf(a)
    (g,) = tg.grad(x.logsumexp(), x, create_graph=True)
    p = np.exp(a) / np.exp(a).sum()
    np.testing.assert_allclose(g.detach().numpy(), p, rtol=1e-12)
    H = np.stack([tg.grad(g[i], x, retain_graph=True)[0].numpy() for i in range(4)])
    np.testing.assert_allclose(H, np.diag(p) - np.outer(p, p), rtol=1e-10, atol=1e-14)
    # d/dx of the softmax Jacobian-vector product: d^2/dx^2 of sum(w * softmax(x))
    w = rnd((4,), 60)
    (g,) = tg.grad((F.softmax(x, 0) * tg.tensor(w)).sum(), x, create_graph=True)
    Hs = np.stack([tg.grad(g[i], x, retain_graph=True)[0].numpy() for i in range(4)])
    wb = (p * w).sum()
    exp = np.empty((4, 4))
    for i in range(4):
        for j in range(4):
            dij = float(i == j)
            # g_i = p_i (w_i - wb);  d g_i/d x_j = p_i(dij - p_j)(w_i - wb) - p_i p_j (w_j - wb)
            exp[i, j] = p[i] * (dij - p[j]) * (w[i] - wb) - p[i] * p[j] * (w[j] - wb)
    np.testing.assert_allclose(Hs, exp, rtol=1e-10, atol=1e-14)


def test_mixed_second_derivative():
    a, b = rnd((3,), 61), rnd((3,), 62)
    x, y = leaf(a), leaf(b)
    (gx,) = tg.grad((x * x * y.sin()).sum(), x, create_graph=True)     # 2 x sin y
    (gy,) = tg.grad(gx.sum(), y)
    np.testing.assert_allclose(gy.numpy(), 2 * a * np.cos(b), rtol=1e-12)


GRADGRAD = {
    "mul_broadcast": (lambda x, y: x * y * x, [(2, 3), (3,)]),
    "div": (lambda x, y: x / (y * y + 1.0), [(2, 3), (2, 1)]),
    "pow": (lambda x, y: (x * x + 0.5) ** y, [(3,), (3,)]),
    "unary_chain": (lambda x: (x.sin() * x.exp()).tanh().sigmoid() + (x * x + 1).log().sqrt(), [(2, 3)]),
    "max_axis": (lambda x: x.max(1).values * x.amax(1) * x.sum(1), [(3, 4)]),
    "prod": (lambda x: x.prod(1), [(2, 3)]),
    "matmul": (lambda a, b: (a @ b) ** 2, [(2, 3), (3, 2)]),
    "softmax": (lambda x: F.softmax(x, -1) * x, [(2, 4)]),
    "log_softmax": (lambda x: F.log_softmax(x, 0) ** 2, [(3, 2)]),
    "layer_norm": (lambda x, w: F.layer_norm(x, (4,), w), [(2, 4), (4,)]),
    "gelu": (lambda x: F.gelu(x) + F.gelu(x, approximate="tanh"), [(5,)]),
    "cross_entropy": (lambda x: F.cross_entropy(x, tg.tensor([1, 0, 2])), [(3, 3)]),
    "gather": (lambda x: x[tg.tensor([0, 0, 2])] ** 3, [(3, 2)]),
    "where_relu": (lambda x: tg.where(x > 0, x ** 3, -x * x) + x.relu() * x, [(2, 3)]),
    "views": (lambda x: (x.T[::2] * x.T[1::2]).expand(2, 2, 2).sum(0) ** 2, [(2, 4)]),
    "var_logsumexp": (lambda x: x.var(1) * x.logsumexp(0).sum(), [(2, 3)]),
    "cat": (lambda x, y: tg.cat([x * y, y ** 2], 0) ** 2, [(2, 2), (1, 2)]),
    "abs_maximum": (lambda x, y: tg.maximum(x, y) ** 2 * x.abs(), [(3,), (3,)]),
}


@pytest.mark.parametrize("name", list(GRADGRAD))
def test_gradgradcheck(name):
    """gradcheck the gradient itself (built with create_graph=True) for every VJP rule family."""
    f, shapes = GRADGRAD[name]
    arrays = [away(rnd(s, 63 + k), (0.0,), 0.2) for k, s in enumerate(shapes)]
    w = [tg.tensor(rnd(s, 90 + k)) for k, s in enumerate(shapes)]

    def gradient(*xs):
        with tg.enable_grad():       # gradcheck evaluates its finite differences under no_grad
            xs = [x if x.requires_grad else x.detach().requires_grad_() for x in xs]
            out = f(*xs)
            gs = tg.grad((out * tg.tensor(rnd(out.shape, 99))).sum(), xs, create_graph=True)
            return sum(((g * wk).sum() for g, wk in zip(gs, w)), tg.tensor(0.0, dtype=tg.float64))

    gc(gradient, *arrays)


# ------------------------------------------------------------------ forward mode

JVP_CASES = {
    "exp_log": (lambda x: x.exp() + (x * x + 1).log(), [(3, 2)]),
    "sin_cos_tanh": (lambda x: x.sin() * x.cos() + x.tanh(), [(4,)]),
    "sigmoid_sqrt": (lambda x: x.sigmoid() * (x * x + 0.5).sqrt(), [(4,)]),
    "mul_broadcast": (lambda x, y: x * y, [(2, 3), (3,)]),
    "div_sub": (lambda x, y: x / (y * y + 1) - y, [(2, 3), (2, 1)]),
    "pow": (lambda x, y: (x * x + 0.5) ** y, [(3,), (3,)]),
    "matmul": (lambda a, b: a @ b, [(2, 3), (3, 4)]),
    "matmul_1d": (lambda a, b: a @ b, [(3,), (2, 3, 2)]),
    "sum_mean": (lambda x: x.sum(0) + x.mean(1, keepdims=True), [(3, 3)]),
    "max_min": (lambda x: x.max(1).values - x.min() + x.amin(0).sum(), [(3, 4)]),
    "prod": (lambda x: x.prod(0), [(3, 2)]),
    "softmax": (lambda x: F.softmax(x, -1), [(2, 4)]),
    "log_softmax": (lambda x: F.log_softmax(x, 0), [(3, 2)]),
    "logsumexp_var": (lambda x: x.logsumexp(1) + x.var(0).sum(), [(2, 3)]),
    "layer_norm": (lambda x, w, b: F.layer_norm(x, (3,), w, b), [(2, 3), (3,), (3,)]),
    "gelu": (lambda x: F.gelu(x) * F.gelu(x, approximate="tanh"), [(5,)]),
    "cross_entropy": (lambda x: F.cross_entropy(x, tg.tensor([1, 0])), [(2, 3)]),
    "views": (lambda x: x.T[1:, ::2].reshape(-1).unsqueeze(0).expand(2, 4) * 1.0, [(4, 3)]),
    "permute_cat": (lambda x, y: tg.cat([x.permute(1, 0), y], 1), [(2, 3), (3, 1)]),
    "stack": (lambda x, y: tg.stack([x, y * x], -1), [(2, 3), (2, 3)]),
    "gather": (lambda x: x[tg.arange(3), tg.tensor([1, 0, 1])] + x[tg.tensor([2, 2])].sum(0).sum(), [(3, 2)]),
    "where_maximum": (lambda x, y: tg.where(x > 0, x, y * 2.0) + tg.maximum(x, y) + tg.where(y > 0, 0.0, y),
                      [(2, 3), (3,)]),
    "abs_relu_clamp": (lambda x: x.abs() + x.relu() + x.clamp(-0.5, 0.5), [(5,)]),
    "mse": (lambda x, y: F.mse_loss(x, y), [(2, 3), (2, 3)]),
}


def _numeric_jvp(f, arrays, tangents, eps=1e-6):
    plus = f(*[tg.tensor(a + eps * t) for a, t in zip(arrays, tangents)])
    minus = f(*[tg.tensor(a - eps * t) for a, t in zip(arrays, tangents)])
    return (plus.numpy() - minus.numpy()) / (2 * eps)


@pytest.mark.parametrize("name", list(JVP_CASES))
def test_jvp_against_finite_differences_and_vjp(name):
    f, shapes = JVP_CASES[name]
    arrays = [away(rnd(s, 70 + k), (0.0, -0.5, 0.5), 0.1) for k, s in enumerate(shapes)]
    tangents = [rnd(s, 80 + k) for k, s in enumerate(shapes)]
    out, tout = tg.jvp(f, tuple(tg.tensor(a) for a in arrays), tuple(tg.tensor(t) for t in tangents))
    expected_out = f(*[tg.tensor(a) for a in arrays]).numpy()
    np.testing.assert_allclose(out.numpy(), expected_out, rtol=1e-12)
    assert tout.shape == out.shape and tout.dtype == out.dtype
    np.testing.assert_allclose(tout.numpy(), _numeric_jvp(f, arrays, tangents), rtol=1e-5, atol=1e-7)
    # transposition: <u, J v> == <J^T u, v>
    u = rnd(out.shape, 85)
    _, vjp_fn = tg.vjp(f, *[tg.tensor(a) for a in arrays])
    cot = vjp_fn(tg.tensor(u))
    lhs = float((u * tout.numpy()).sum())
    rhs = sum(float((c.numpy() * t).sum()) for c, t in zip(cot, tangents))
    assert lhs == pytest.approx(rhs, rel=1e-10, abs=1e-12)


def test_jvp_with_only_some_tangents_nonzero():
    a, b = rnd((3,), 86), rnd((3,), 87)
    _, t = tg.jvp(lambda x, y: x * y.exp(), (tg.tensor(a), tg.tensor(b)), (tg.ones(3, dtype=tg.float64),
                                                                            tg.zeros(3, dtype=tg.float64)))
    np.testing.assert_allclose(t.numpy(), np.exp(b), rtol=1e-12)
    _, t = tg.jvp(lambda x: x.sum() * 0.0 + 3.0, (tg.tensor(a),), (tg.tensor(b),))
    np.testing.assert_allclose(t.numpy(), 0.0)


def test_masked_softmax_and_sign_gradients_are_finite():
    a = rnd((2, 4), 88)
    mask = tg.tensor(np.array([[True, False, True, True], [False, False, True, False]]))
    x = leaf(a)
    y = F.softmax(tg.where(mask, x, float("-inf")), -1)
    w = rnd((2, 4), 89)
    (g,) = tg.grad((y * tg.tensor(w)).sum(), x)
    p = np.where(mask.numpy(), np.exp(a), 0.0)
    p /= p.sum(1, keepdims=True)
    np.testing.assert_allclose(g.numpy(), p * (w - (p * w).sum(1, keepdims=True)), rtol=1e-12, atol=1e-300)
    (g,) = tg.grad(F.log_softmax(tg.where(mask, x, float("-inf")), -1)[:, 2].sum(), x)
    assert np.isfinite(g.numpy()).all()
    # sign is piecewise constant: its gradient is zero, not an error (as PyTorch)
    s = x.sign().sum()
    assert s.requires_grad
    s.backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.zeros((2, 4)))
