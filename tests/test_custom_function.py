"""tg.autograd.Function (PyTorch's custom autograd functions), the tg.autograd aliases, and
gradcheck's report of the Jacobian entry it names. Eager, create_graph and compiled."""
import re

import numpy as np
import pytest

import tracegrad as tg

BACKENDS = ["interpret", "llvm"]


class LegendreP3(tg.autograd.Function):
    """PyTorch's tutorial example: P3(x) = (5x^3 - 3x)/2 with a hand-written derivative."""

    @staticmethod
    def forward(ctx, input):
        ctx.save_for_backward(input)
        return 0.5 * (5 * input ** 3 - 3 * input)

    @staticmethod
    def backward(ctx, grad_output):
        input, = ctx.saved_tensors
        return grad_output * 1.5 * (5 * input ** 2 - 1)


class MyReLU(tg.autograd.Function):
    @staticmethod
    def forward(ctx, input):
        ctx.save_for_backward(input)
        return input.clamp(min=0)

    @staticmethod
    def backward(ctx, grad_output):
        input, = ctx.saved_tensors
        return tg.where(input < 0, 0.0, grad_output)


class ScaleBy(tg.autograd.Function):
    """Two outputs, a non-tensor argument, ctx attributes, needs_input_grad."""

    @staticmethod
    def forward(ctx, x, y, k):
        ctx.k = k
        ctx.save_for_backward(x, y)
        ctx.needs = ctx.needs_input_grad
        return x * k, x * y

    @staticmethod
    def backward(ctx, g1, g2):
        x, y = ctx.saved_tensors
        return g1 * ctx.k + g2 * y, g2 * x, None


def _x(values):
    return tg.tensor(np.array(values, dtype=np.float64), requires_grad=True)


def test_tutorial_function_values_and_gradient():
    x = _x([0.1, 0.5, -0.7])
    y = LegendreP3.apply(x)
    np.testing.assert_allclose(y.detach().numpy(), [-0.1475, -0.4375, 0.1925], atol=1e-12)
    assert y.grad_fn.name() == "LegendreP3Backward" and "LegendreP3Backward" in repr(y)
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [-1.425, 0.375, 2.175], atol=1e-12)
    assert tg.gradcheck(LegendreP3.apply, (_x([0.3, -0.2, 1.1]),))
    assert tg.gradcheck(MyReLU.apply, (_x([0.3, -0.2, 1.1]),))


def test_create_graph_runs_the_users_backward_as_differentiable_ops():
    x = _x([0.3, -0.2])
    g, = tg.autograd.grad(LegendreP3.apply(x).sum(), x, create_graph=True)
    g2, = tg.autograd.grad(g.sum(), x)
    np.testing.assert_allclose(g2.numpy(), 15 * x.detach().numpy(), rtol=1e-12)   # d/dx 1.5(5x^2-1)
    assert tg.gradcheck(lambda x: tg.autograd.grad(LegendreP3.apply(x).sum(), x, create_graph=True)[0], (x,))


def test_two_outputs_non_tensor_argument_and_needs_input_grad():
    x, y = _x([1.0, 2.0]), tg.tensor([3.0, -1.0], dtype=tg.float64)
    a, b = ScaleBy.apply(x, y, 4.0)
    assert a.grad_fn is b.grad_fn and b.grad_fn.name() == "ScaleByBackward"
    assert a.grad_fn.ctx.needs == (True, False, False)
    (a.sum() + 2 * b.sum()).backward()
    np.testing.assert_allclose(x.grad.numpy(), [4 + 6.0, 4 - 2.0])
    assert y.grad is None
    assert tg.gradcheck(lambda x, y: ScaleBy.apply(x, y, 3.0), (_x([0.5, -1.5]), _x([2.0, 0.25])))
    b.detach()                      # only one output used: the other's gradient is zero
    x.grad = None
    ScaleBy.apply(x, y, 4.0)[1].sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), y.numpy())


def test_setup_context_style_and_mark_non_differentiable():
    class SortOf(tg.autograd.Function):
        @staticmethod
        def forward(x):
            return x * 2, (x > 0)

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.mark_non_differentiable(output[1])

        @staticmethod
        def backward(ctx, g, g_mask):
            return 2 * g

    x = _x([-1.0, 1.0])
    y, mask = SortOf.apply(x)
    assert mask.grad_fn is None and not mask.requires_grad and y.requires_grad
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 2.0])


def test_non_tensor_outputs_get_none_gradients():
    class WithCount(tg.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2, 7

        @staticmethod
        def backward(ctx, g, g_count):
            assert g_count is None
            return g * 2

    x = _x([1.0, 2.0])
    y, n = WithCount.apply(x)
    assert n == 7
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 2.0])


def test_no_recording_without_grad_and_input_returned_unchanged():
    class Ident(tg.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x

        @staticmethod
        def backward(ctx, g):
            return g * 3

    x = _x([1.0])
    y = Ident.apply(x)
    assert y is not x and y.grad_fn.name() == "IdentBackward"
    assert x.grad_fn is None                       # the input keeps its own history
    y.sum().backward()
    assert x.grad.item() == 3.0
    with tg.no_grad():
        assert Ident.apply(x).grad_fn is None
    assert Ident.apply(tg.tensor([1.0])).grad_fn is None


def test_gradient_broadcast_shape_is_summed_down_and_bad_ones_are_refused():
    class Broad(tg.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.sum()

        @staticmethod
        def backward(ctx, g):
            return g.expand(2, 3)          # (2, 3) for an input of shape (3,): summed over axis 0

    x = _x([1.0, 2.0, 3.0])
    Broad.apply(x).backward()
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 2.0, 2.0])

    class Wrong(tg.autograd.Function):
        @staticmethod
        def forward(ctx, x, k):
            return x * k

        @staticmethod
        def backward(ctx, g):
            return g

    with pytest.raises(RuntimeError, match=r"WrongBackward returned an incorrect number of gradients \(expected 2, got 1\)"):
        Wrong.apply(x, 2.0).sum().backward()

    class BadShape(tg.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 1

        @staticmethod
        def backward(ctx, g):
            return g[:2]

    with pytest.raises(RuntimeError, match=r"invalid gradient at index 0 - got \[2\] but expected shape compatible "
                                           r"with \[3\]"):
        BadShape.apply(x).sum().backward()


def test_saved_tensor_checks_version_and_freeing():
    x = _x([1.0, 2.0])
    h = x * 1
    y = LegendreP3.apply(h)
    h.mul_(2)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()
    y = LegendreP3.apply(x)
    y.sum().backward()
    with pytest.raises(RuntimeError, match="retain_graph=True"):
        y.sum().backward()


def test_forward_mode_needs_a_jvp():
    class WithJvp(tg.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        def backward(ctx, g):
            x, = ctx.saved_tensors
            return 2 * x * g

        @staticmethod
        def jvp(ctx, t):
            x, = ctx.saved_tensors
            return 2 * x * t

    x = tg.tensor([1.0, 3.0])
    out, t = tg.jvp(WithJvp.apply, (x,), (tg.tensor([1.0, 0.5]),))
    np.testing.assert_allclose(t.numpy(), [2.0, 3.0])
    with pytest.raises(NotImplementedError, match="jvp"):
        tg.jvp(LegendreP3.apply, (x,), (x,))


@pytest.mark.parametrize("backend", BACKENDS)
def test_compiled_function_runs_the_users_backward_as_ir(backend):
    def f(x, w):
        return (LegendreP3.apply(x * w) + MyReLU.apply(w - 1.5)).sum()

    cf = tg.compile(f, backend=backend)
    xv, wv = np.array([0.1, 0.5, -0.7], np.float32), np.array([1.0, 2.0, 3.0], np.float32)
    w = tg.tensor(wv, requires_grad=True)
    out = cf(tg.tensor(xv), w)
    out.backward()
    w_e = tg.tensor(wv, requires_grad=True)
    ref = f(tg.tensor(xv), w_e)
    ref.backward()
    np.testing.assert_allclose(out.item(), ref.item(), rtol=1e-6)
    np.testing.assert_allclose(w.grad.numpy(), w_e.grad.numpy(), rtol=1e-5)
    u = xv * wv
    np.testing.assert_allclose(w.grad.numpy(), 1.5 * (5 * u * u - 1) * xv + (wv > 1.5), rtol=1e-5)
    assert "where" in cf.ir(tg.tensor(xv), w, stage="backward")   # MyReLU's backward, traced


def test_compiled_function_with_a_module_and_optimizer_step_inside():
    lin = tg.nn.Linear(3, 2)
    opt = tg.optim.SGD(lin.parameters(), lr=0.1)
    x = tg.randn(4, 3)
    before = [p.detach().clone() for p in lin.parameters()]

    def loss_of(m, x):
        return MyReLU.apply(m(x)).pow(2).sum()

    @tg.compile(backend="interpret")
    def step(x):
        opt.zero_grad()
        loss = loss_of(lin, x)
        loss.backward()
        opt.step()
        return loss

    step(x)
    ref = tg.nn.Linear(3, 2)
    ref.load_state_dict({n: b for n, b in zip(["weight", "bias"], before)})
    loss_of(ref, x).backward()
    for p, b, r in zip(lin.parameters(), before, ref.parameters()):
        np.testing.assert_allclose(p.detach().numpy(), (b - 0.1 * r.grad).numpy(), rtol=1e-5, atol=1e-6)


def test_variable_and_autograd_aliases():
    t = tg.tensor([1.0, 2.0])
    v = tg.autograd.Variable(t, requires_grad=True)
    assert v is t and t.requires_grad and isinstance(t, tg.autograd.Variable)
    y = (v * v).sum()
    g, = tg.autograd.grad(y, v, retain_graph=True)
    np.testing.assert_allclose(g.numpy(), [2.0, 4.0])
    tg.autograd.backward(y)
    np.testing.assert_allclose(v.grad.numpy(), [2.0, 4.0])
    a, b = tg.tensor([1.0], requires_grad=True), tg.tensor([2.0], requires_grad=True)
    tg.autograd.backward([a * b], [tg.tensor([1.0])], inputs=[a])
    assert a.grad.item() == 2.0 and b.grad is None
    with pytest.raises(AttributeError):
        tg.autograd.NoSuchThing


def _reported(msg):
    ana = float(re.search(r"analytic (\S+),", msg).group(1))
    num = float(re.search(r"numerical (\S+)", msg).group(1))
    return ana, num


def test_gradcheck_reports_the_jacobian_entry_itself():
    class HalfGrad(tg.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 1

        @staticmethod
        def backward(ctx, g):
            return g * 0.5

    with pytest.raises(tg.GradcheckError) as e:
        tg.gradcheck(HalfGrad.apply, (_x([0.3, -2.0, 4.0]),))
    msg = str(e.value)
    ana, num = _reported(msg)
    assert ana == pytest.approx(0.5) and num == pytest.approx(1.0, rel=1e-6)
    assert "at element (0,)" in msg and "output 0[0]" in msg

    # an entry of the second output: d out1[1] / d x[2] is 3, but the detach hides it
    def f(x):
        return x * 2, tg.stack([x[0], x[2].detach() * 3])

    with pytest.raises(tg.GradcheckError) as e:
        tg.gradcheck(f, (_x([1.0, 2.0, 3.0]),))
    msg = str(e.value)
    ana, num = _reported(msg)
    assert ana == 0.0 and num == pytest.approx(3.0, rel=1e-6)
    assert "at element (2,)" in msg and "d output 1[1] / d input 0[2]" in msg
