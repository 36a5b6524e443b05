"""Every autodiff mode through a compiled function agrees with eager: forward mode (tg.jvp of a
compiled function), a gradient taken with create_graph=True inside a compiled loss (a gradient
penalty), and custom autograd.Functions with several outputs. Oracles: eager tracegrad, central
finite differences in float64 (tg.gradcheck, and of the function's value for tangents), NumPy, and
numbers computed with PyTorch 2.13 written in as literals."""
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tracegrad as tg
import tracegrad.nn.functional as F

EXAMPLES = int(os.environ.get("TRACEGRAD_HYPOTHESIS_EXAMPLES", "8"))
F64 = tg.float64


def rnd(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape)


def t64(a, requires_grad=False):
    return tg.tensor(np.asarray(a, dtype=np.float64), dtype=F64, requires_grad=requires_grad)


# ---------------------------------------------------------------------- forward mode (tg.jvp)

UNARY = {"sin": tg.sin, "exp": lambda u: (u * 0.5).exp(), "tanh": tg.tanh, "square": lambda u: u * u,
         "softmax": lambda u: F.softmax(u, -1), "sum_keep": lambda u: u.sum(-1, keepdim=True) * u,
         "sigmoid": tg.sigmoid, "transpose": lambda u: u.T.reshape(u.shape) * 1.5}


def _chain(ops):
    def f(x, y):
        h = x
        for name in ops:
            h = UNARY[name](h) + y
        return h, h.sum()
    return f


def _numeric_tangent(f, primals, tangents, k, eps=1e-6):
    plus = f(*[p + eps * t for p, t in zip(primals, tangents)])[k].numpy()
    minus = f(*[p - eps * t for p, t in zip(primals, tangents)])[k].numpy()
    return (plus - minus) / (2 * eps)


@settings(max_examples=EXAMPLES, deadline=None)
@given(ops=st.lists(st.sampled_from(sorted(UNARY)), min_size=1, max_size=4),
       shape=st.sampled_from([(3,), (2, 3), (4, 1)]), seed=st.integers(0, 1000),
       backend=st.sampled_from(tg.jit.BACKENDS))
def test_jvp_of_compiled_matches_eager_and_finite_differences(ops, shape, seed, backend):
    f = _chain(ops)
    primals = (t64(rnd(shape, seed)), t64(rnd(shape[-1:], seed + 1)))
    tangents = (t64(rnd(shape, seed + 2)), t64(rnd(shape[-1:], seed + 3)))
    (e_out, e_sum), (e_t, e_tsum) = tg.jvp(f, primals, tangents)
    cf = tg.compile(f, backend=backend)
    for _ in range(2):                      # the traced call, then the cached one
        (c_out, c_sum), (c_t, c_tsum) = tg.jvp(cf, primals, tangents)
        np.testing.assert_allclose(c_out.numpy(), e_out.numpy(), rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(c_t.numpy(), e_t.numpy(), rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(c_tsum.numpy(), e_tsum.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(c_t.numpy(), _numeric_tangent(f, primals, tangents, 0), rtol=1e-5, atol=1e-7)
    assert c_t._tangent is None and c_out._tangent is None         # jvp leaves no tangent behind


def test_jvp_of_compiled_with_tangents_changing_per_call():
    f = tg.compile(lambda x, y: tg.sin(x) * y + x.exp())
    x, y = tg.tensor([0.3, -0.2]), tg.tensor([1.0, 2.0])
    for tx, ty in [([1.0, 0.5], [0.2, -0.1]), ([0.0, 1.0], [1.0, 1.0])]:
        _, t = tg.jvp(f, (x, y), (tg.tensor(tx), tg.tensor(ty)))
        expected = np.cos([0.3, -0.2]) * np.array(tx) * [1.0, 2.0] + np.sin([0.3, -0.2]) * ty + \
            np.exp([0.3, -0.2]) * np.array(tx)
        np.testing.assert_allclose(t.numpy(), expected, rtol=1e-6)
    assert f.stats()["traces"] == 0 and f._twin.stats()["traces"] == 1


K = 2.0


def _with_global(x, scale=1.0):
    return (x * K * scale).tanh(), 3, x > 0


def test_jvp_of_compiled_keeps_statics_kwargs_guards_and_modules():
    global K
    x, tx = t64([0.3, -0.7]), t64([1.0, 2.0])
    cf = tg.compile(_with_global)
    seen = []

    def first(a):
        out = cf(a, scale=0.5)
        seen.append(out[1:])
        return out[0]
    for k in (2.0, 5.0):
        K = k
        _, t = tg.jvp(first, (x,), (tx,))
        assert seen[-1][0] == 3 and seen[-1][1].tolist() == [True, False] and seen[-1][1]._tangent is None
        np.testing.assert_allclose(t.numpy(), (1 - np.tanh(x.numpy() * k * 0.5) ** 2) * k * 0.5 * tx.numpy(),
                                   rtol=1e-12)
    assert any("K" in r for r in cf._twin.stats()["retrace_reasons"])
    K = 2.0
    model = tg.nn.Sequential(tg.nn.Linear(2, 3), tg.nn.Tanh()).double()
    _, e = tg.jvp(model, (x,), (tx,))
    _, c = tg.jvp(tg.compile(model), (x,), (tx,))
    np.testing.assert_allclose(c.numpy(), e.numpy(), rtol=1e-12)


def test_jvp_of_compiled_draws_and_updates_as_eagerly():
    x = tg.ones(8, dtype=F64)
    drop = tg.nn.Dropout(0.5)
    tg.manual_seed(3)
    eager = tg.jvp(drop, (x,), (x * 2,))
    after_eager = tg.rand(1).item()
    tg.manual_seed(3)
    compiled = tg.jvp(tg.compile(drop), (x,), (x * 2,))
    assert tg.rand(1).item() == after_eager
    for e, c in zip(eager, compiled):
        np.testing.assert_array_equal(c.numpy(), e.numpy())
    buf = tg.zeros(2, dtype=F64)

    def update(a):
        buf.add_(a)
        return a.exp()
    _, t = tg.jvp(tg.compile(update), (t64([0.1, 0.2]),), (t64([1.0, -1.0]),))
    np.testing.assert_allclose(t.numpy(), np.exp([0.1, 0.2]) * [1.0, -1.0], rtol=1e-12)
    np.testing.assert_allclose(buf.numpy(), [0.1, 0.2])


def test_jvp_refuses_a_tangent_read_through_a_closure():
    def outer(a):
        q = a * 3.0
        return tg.compile(lambda c: c * q)(tg.ones(2, dtype=F64))
    with pytest.raises(tg.TraceError, match="q float64.*carries a tangent.*Pass that tensor as an argument"):
        tg.jvp(outer, (t64([0.3, -0.2]),), (t64([1.0, 0.5]),))


def test_jvp_of_a_log_softmax_over_gathered_rows():
    """Fuzz seed 99, program 266: the tangent's column statistic over (3, 257) rows has no kernel
    streaming its space, and the walk ordering of fusion raised ValueError (max of nothing)."""
    def f(x0):
        v3 = x0.clamp(min=0.1)[tg.tensor([-1, -1, 0])]
        return F.log_softmax(v3, -1).reshape(771)
    x, t = t64(rnd((1, 257), 5)), t64(rnd((1, 257), 6))
    (e_out, e_t), (c_out, c_t) = tg.jvp(f, (x,), (t,)), tg.jvp(tg.compile(f), (x,), (t,))
    np.testing.assert_allclose(c_out.numpy(), e_out.numpy(), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(c_t.numpy(), e_t.numpy(), rtol=1e-10, atol=1e-12)


def _hvp(f):
    """x -> the gradient of f(x).sum(): under tg.jvp, a Hessian-vector product."""
    def g(a):
        with tg.enable_grad():
            a = a.requires_grad_()
            return tg.grad(f(a).sum(), a)[0]
    return g


def test_forward_over_the_backward_of_a_compiled_call():
    x, tx = t64([0.3, -0.2]), t64([1.0, 0.5])
    cube = lambda a: a * a * a                      # noqa: E731
    _, t = tg.jvp(tg.compile(_hvp(cube)), (x,), (tx,))       # the gradient taken inside: compiled
    np.testing.assert_allclose(t.numpy(), 6 * x.numpy() * tx.numpy(), rtol=1e-12)
    with pytest.raises(RuntimeError, match="forward mode .* over the backward of compiled function"):
        tg.jvp(_hvp(tg.compile(cube)), (x,), (tx,))     # its gradients would carry no tangent


def test_every_differentiable_primitive_has_forward_mode():
    from tracegrad.ops import PRIMS
    assert [n for n, p in PRIMS.items() if p.differentiable and p.jvp is None] == []


@pytest.mark.parametrize("f", [lambda x, y: x % y, lambda x, y: (x * y).prod(1),
                               lambda x, y: tg.autograd.grad(x.prod(1).sum(), x, create_graph=True)[0] * y],
                         ids=["remainder", "prod", "prod_others"])
def test_remainder_and_exclusive_products_in_forward_mode(f):
    def g(x, y):                           # (a gradient taken inside needs x to require grad)
        with tg.enable_grad():
            return f(x.requires_grad_(), y)
    a, b = rnd((3, 4), 1), np.abs(rnd(4, 2)) + 0.5
    ta, tb = rnd((3, 4), 3), rnd(4, 4)
    for fn in (g, tg.compile(g)):
        _, t = tg.jvp(fn, (t64(a), t64(b)), (t64(ta), t64(tb)))
        eps = 1e-6
        num = (g(t64(a + eps * ta), t64(b + eps * tb)) - g(t64(a - eps * ta), t64(b - eps * tb))) / (2 * eps)
        np.testing.assert_allclose(t.numpy(), num.detach().numpy(), rtol=1e-6, atol=1e-8)


# ---------------------------------------------------------------------- create_graph inside a compiled loss

def _penalized(w, x):
    y = (x @ w).tanh().sum()
    (g,) = tg.autograd.grad(y, w, create_graph=True)
    return y + (g * g).sum()


def _gradient_penalty(w, x):
    """WGAN-GP's penalty: the gradient with respect to the input, its norm pushed towards 1."""
    d = (x @ w).sigmoid()
    (gx,) = tg.autograd.grad(d.sum(), x, create_graph=True)
    return d.mean() + 10 * ((gx.norm(dim=1) - 1) ** 2).mean()


W0, X0 = [0.5, -0.3, 0.8], [[1.0, 2.0, -1.0], [0.5, -1.5, 2.0]]


def _penalty_only(w, x):
    y = (x @ w).tanh().sum()
    (g,) = tg.autograd.grad(y, w, create_graph=True)
    return (g * g).sum()


def test_a_compiled_penalty_added_to_an_eager_loss_is_not_detached():
    """The issue's shape: the compiled term was returned without an autograd node, so w.grad was the
    eager term's alone ([0.6, -0.4, 1.0])."""
    cf = tg.compile(_penalty_only)
    w = t64(W0, True)
    loss = (w * t64([0.6, -0.4, 1.0])).sum() + cf(w, t64(X0))
    loss.backward()
    assert loss.item() == pytest.approx(2.479917764354521, rel=1e-12)        # PyTorch 2.13
    np.testing.assert_allclose(w.grad.numpy(), [4.5778830138, 6.8083575878, -2.2304745740], rtol=1e-9)


@pytest.mark.parametrize("backend", tg.jit.BACKENDS)
def test_gradient_penalty_reaches_the_outer_backward_as_in_pytorch(backend):
    # PyTorch 2.13, float64: the same losses and their gradients
    cases = [(_penalized, False, 1.5237162904216879, [4.4845059019, 8.1230757290, -3.6385698271], None),
             (_gradient_penalty, True, 7.985280971368043, [-1.4632742356, -1.4207365920, -0.0425376436],
              [[-0.2904668126, 0.1742800876, -0.4647469002], [0.3284473782, -0.1970684269, 0.5255158051]])]
    for fn, x_grad, value, w_grad, x_grad_value in cases:
        cf = tg.compile(fn, backend=backend)
        for _ in range(2):
            w, x = t64(W0, True), t64(X0, x_grad)
            loss = cf(w, x)
            loss.backward()
            assert loss.item() == pytest.approx(value, rel=1e-12)
            np.testing.assert_allclose(w.grad.numpy(), w_grad, rtol=1e-9)
            if x_grad_value is not None:
                np.testing.assert_allclose(x.grad.numpy(), x_grad_value, rtol=1e-9)


@settings(max_examples=EXAMPLES, deadline=None)
@given(n=st.integers(1, 4), m=st.integers(1, 4), seed=st.integers(0, 1000), coef=st.sampled_from([0.1, 1.0, 10.0]),
       backend=st.sampled_from(tg.jit.BACKENDS))
def test_penalized_losses_match_eager_and_finite_differences(n, m, seed, coef, backend):
    def loss(w, b, x):
        y = ((x @ w + b).sin() * (x @ w)).sum()
        gw, gb = tg.autograd.grad(y, [w, b], create_graph=True)
        return y + coef * ((gw * gw).sum() + (gb * gb).sum())
    x = t64(rnd((n, m), seed))
    w, b = t64(rnd(m, seed + 1), True), t64(rnd(1, seed + 2), True)
    cf = tg.compile(loss, backend=backend)
    eager = loss(w, b, x)
    ew = tg.autograd.grad(eager, [w, b])
    compiled = cf(w, b, x)
    cw = tg.autograd.grad(compiled, [w, b])
    assert compiled.item() == pytest.approx(eager.item(), rel=1e-10, abs=1e-12)
    for c, e in zip(cw, ew):
        np.testing.assert_allclose(c.numpy(), e.numpy(), rtol=1e-9, atol=1e-11)
    assert tg.gradcheck(cf, (w, b, x))


def test_a_backward_inside_frees_the_graph_as_eagerly():
    def step(w, x, retain):
        y = (x @ w).tanh().sum()
        y.backward(retain_graph=retain)
        return y
    for retain in (False, True):
        results = []
        for fn in (step, tg.compile(step)):
            w = t64(W0, True)
            out = fn(w, t64(X0), retain)
            assert out.requires_grad
            if retain:
                out.backward()
                results.append(w.grad.numpy())
            else:
                with pytest.raises(RuntimeError, match="backward through the graph a second time"):
                    out.backward()
        if retain:
            np.testing.assert_allclose(results[1], results[0], rtol=1e-12)


def test_a_grad_with_history_set_inside_is_refused():
    def step(w, x):
        y = (x @ w).tanh().sum()
        y.backward(create_graph=True)
        return y
    with pytest.raises(tg.TraceError, match="sets the .grad of w to a tensor with autograd history"):
        tg.compile(step)(t64(W0, True), t64(X0))


# ---------------------------------------------------------------------- custom Functions with several outputs

class Powers(tg.autograd.Function):
    """(x, x**2, x**3) with a hand-written backward."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * 1.0, x * x, x * x * x

    @staticmethod
    def backward(ctx, g1, g2, g3):
        (x,) = ctx.saved_tensors
        assert g1 is not None and g2 is not None and g3 is not None       # materialized, as PyTorch's
        return g1 + g2 * 2 * x + g3 * 3 * x * x


class PowersUnmaterialized(Powers):
    @staticmethod
    def forward(ctx, x):
        ctx.set_materialize_grads(False)
        return Powers.forward(ctx, x)

    @staticmethod
    def backward(ctx, g1, g2, g3):
        (x,) = ctx.saved_tensors
        out = None
        for k, g in enumerate((g1, g2, g3)):
            if g is not None:
                term = g * (k + 1) * x ** k
                out = term if out is None else out + term
        return out


@settings(max_examples=EXAMPLES, deadline=None)
@given(used=st.lists(st.integers(0, 2), min_size=1, max_size=3, unique=True), shape=st.sampled_from([(3,), (2, 2)]),
       seed=st.integers(0, 1000), fn=st.sampled_from([Powers, PowersUnmaterialized]),
       backend=st.sampled_from(tg.jit.BACKENDS))
def test_a_function_with_several_outputs_some_unused(used, shape, seed, fn, backend):
    a = rnd(shape, seed)

    def loss(x):
        outs = fn.apply(x)
        return sum((outs[k] * (k + 1.0)).sum() for k in used)
    expected = sum((k + 1.0) * (k + 1) * a ** k for k in used)         # NumPy: d/dx of the loss
    for f in (loss, tg.compile(loss, backend=backend)):
        x = t64(a, True)
        f(x).backward()
        np.testing.assert_allclose(x.grad.numpy(), expected, rtol=1e-12)


def test_unmaterialized_grads_are_none():
    seen = []

    class Two(tg.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.set_materialize_grads(False)
            return x * 2.0, x * 3.0

        @staticmethod
        def backward(ctx, ga, gb):
            seen.append((ga is None, gb is None))
            return ga * 2.0
    x = t64([1.0, 2.0], True)
    Two.apply(x)[0].sum().backward()
    assert seen == [(False, True)]
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 2.0])


class PowersWithJvp(Powers):
    @staticmethod
    def jvp(ctx, t):
        (x,) = ctx.saved_tensors
        return t, 2 * x * t, 3 * x * x * t


@pytest.mark.parametrize("backend", tg.jit.BACKENDS)
def test_a_function_with_several_outputs_under_jvp(backend):
    x, t = t64([1.0, -3.0]), t64([0.5, 2.0])
    eager = tg.jvp(PowersWithJvp.apply, (x,), (t,))
    compiled = tg.jvp(tg.compile(lambda a: PowersWithJvp.apply(a), backend=backend), (x,), (t,))
    for e, c in zip(eager[0] + eager[1], compiled[0] + compiled[1]):
        np.testing.assert_array_equal(c.numpy(), e.numpy())
    np.testing.assert_allclose(compiled[1][2].numpy(), 3 * x.numpy() ** 2 * t.numpy())
