"""Reverse mode as a PyTorch user relies on it; functional transforms; devices."""
import numpy as np
import pytest

import tracegrad as tg


# ---------------------------------------------------------------- backward basics

def test_gradients_accumulate_until_reset():
    x = tg.tensor([1.0, 2.0, 3.0], requires_grad=True)
    (x * x).sum().backward()
    assert x.grad.tolist() == [2.0, 4.0, 6.0]
    (x * x).sum().backward()
    assert x.grad.tolist() == [4.0, 8.0, 12.0]
    x.grad = None
    (x * 3.0).sum().backward()
    assert x.grad.tolist() == [3.0, 3.0, 3.0]


def test_leaf_grad_does_not_alias_the_incoming_gradient():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    g = tg.tensor([5.0, 6.0])
    (x * 1.0).backward(g)
    g.mul_(0.0)
    assert x.grad.tolist() == [5.0, 6.0]


def test_second_backward_without_retain_graph_raises():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    y = (x * x).sum()
    y.backward()
    with pytest.raises(RuntimeError, match=r"retain_graph=True"):
        y.backward()


def test_retain_graph_allows_second_backward():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    y = (x * x).sum()
    y.backward(retain_graph=True)
    y.backward()
    assert x.grad.tolist() == [4.0, 8.0]


def test_non_scalar_backward_needs_gradient():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    y = x.exp()
    with pytest.raises(RuntimeError, match="grad can be implicitly created only for scalar outputs"):
        y.backward()
    y.backward(tg.tensor([1.0, 0.5]))
    np.testing.assert_allclose(x.grad.numpy(), np.exp([1.0, 2.0]) * [1.0, 0.5], rtol=1e-6)


@pytest.mark.parametrize("shape", [(1,), (1, 1), ()])
def test_one_element_output_of_any_shape_is_fine(shape):
    w = tg.full(shape, 2.0, requires_grad=True)
    (w * w * w).backward()
    assert w.grad.shape == shape and w.grad.reshape(-1).tolist() == [12.0]


def test_backward_on_tensor_without_grad_raises():
    with pytest.raises(RuntimeError, match="does not require grad"):
        tg.tensor(1.0).backward()


def test_diamond_graph_sums_both_paths():
    x = tg.tensor(3.0, requires_grad=True)
    a = x * 2.0
    b = x * x
    (a * b).backward()  # d/dx 2x^3 = 6x^2
    assert x.grad.item() == 54.0


def test_create_graph_gives_higher_order_gradients():
    x = tg.tensor(3.0, requires_grad=True)
    y = x ** 3
    (g,) = tg.grad(y, x, create_graph=True)
    assert g.item() == 27.0 and g.requires_grad
    (g2,) = tg.grad(g, x, create_graph=True)
    assert g2.item() == 18.0
    (g3,) = tg.grad(g2, x)
    assert g3.item() == 6.0


def test_backward_create_graph_then_differentiate_grad():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    (x.sin().sum()).backward(create_graph=True)
    gx = x.grad
    assert gx.requires_grad
    (h,) = tg.grad(gx.sum(), x)
    np.testing.assert_allclose(h.numpy(), -np.sin([1.0, 2.0]), rtol=1e-6)


# ---------------------------------------------------------------- grad modes

def test_no_grad_context_and_decorators():
    x = tg.tensor([1.0], requires_grad=True)
    assert tg.is_grad_enabled()
    with tg.no_grad():
        assert not tg.is_grad_enabled()
        y = x * 2
        with tg.enable_grad():
            assert tg.is_grad_enabled()
            z = x * 2
        assert not tg.is_grad_enabled()
    assert tg.is_grad_enabled()
    assert not y.requires_grad and y.grad_fn is None
    assert z.requires_grad

    @tg.no_grad()
    def f(t):
        return t * 2, tg.is_grad_enabled()

    @tg.no_grad
    def f_bare(t):
        return t * 2

    out, mode = f(x)
    assert not out.requires_grad and mode is False and tg.is_grad_enabled()
    assert not f_bare(x).requires_grad and f_bare.__name__ == "f_bare"

    @tg.enable_grad()
    def g(t):
        return t * 2

    with tg.no_grad():
        assert g(x).requires_grad


def test_no_grad_restores_mode_on_exception():
    with pytest.raises(ValueError):
        with tg.no_grad():
            raise ValueError("boom")
    assert tg.is_grad_enabled()


def test_set_grad_enabled():
    x = tg.tensor([1.0], requires_grad=True)
    with tg.set_grad_enabled(False):
        assert not (x * 2).requires_grad
    assert (x * 2).requires_grad


def test_detach_shares_data_and_is_cut_from_graph():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    d = y.detach()
    assert not d.requires_grad and d.grad_fn is None and d.is_leaf
    assert d.data_ptr() == y.data_ptr()
    d[0] = 10.0
    assert y[0].item() == 10.0


def test_data_bypasses_autograd():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    x.data.mul_(10.0)           # not an error although x is a leaf requiring grad
    assert x.tolist() == [10.0, 20.0] and x.grad_fn is None
    y = (x * x).sum()
    x.data.add_(1.0)            # invisible to the version counter
    y.backward()
    assert x.grad.tolist() == [22.0, 42.0]   # saved x was changed through .data, as in PyTorch
    assert not x.data.requires_grad


# ---------------------------------------------------------------- in place and version counters

def test_inplace_on_saved_tensor_makes_backward_raise():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    h = x * 1.0
    y = h.sin()          # sin saves its input
    h.mul_(2.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


def test_inplace_on_saved_operand_of_mul_raises():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    h = x * 1.0
    y = h * h
    h.add_(1.0)
    with pytest.raises(RuntimeError, match="version"):
        y.sum().backward()


@pytest.mark.parametrize("op", [lambda h: h + 1.0, lambda h: h * 2.0, lambda h: h / 4.0, lambda h: h.exp(),
                                lambda h: h.sum()])
def test_inplace_on_unsaved_tensor_is_fine(op):
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    h = x * 1.0
    y = op(h)          # none of these needs h's value for its gradient
    h.add_(5.0)
    y.sum().backward()
    ref = tg.tensor([1.0, 2.0], requires_grad=True)
    op(ref * 1.0).sum().backward()
    assert x.grad.tolist() == ref.grad.tolist()


def test_inplace_on_a_view_of_a_saved_tensor_raises():
    x = tg.tensor([1.0, 2.0, 3.0], requires_grad=True)
    h = x * 1.0
    y = h.cos()
    with tg.no_grad():
        h[0:2].mul_(3.0)
    with pytest.raises(RuntimeError, match="inplace"):
        y.sum().backward()


def test_leaf_requiring_grad_used_in_place_raises():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    for f in (lambda: x.add_(1.0), lambda: x.mul_(2.0), lambda: x.zero_(), lambda: x.copy_(tg.ones(2))):
        with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
            f()
    with tg.no_grad():
        x.add_(1.0)       # fine under no_grad, as in PyTorch
    assert x.tolist() == [2.0, 3.0]


def test_inplace_on_non_leaf_is_differentiated():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    h = x * 2.0
    h.add_(x)            # h = 3x
    h.mul_(x)            # h = 3x^2
    h.sum().backward()
    assert x.grad.tolist() == [6.0, 12.0]


def test_long_chain_backprops_without_recursion():
    x = tg.tensor(1.0, requires_grad=True)
    y = x
    for _ in range(25_000):        # 25 times Python's recursion limit (100,000 took five times as long)
        y = y + 1.0
    y.backward()
    assert x.grad.item() == 1.0 and y.item() == 25_001.0


# ---------------------------------------------------------------- tg.grad

def test_grad_returns_tuple_and_does_not_touch_grad_fields():
    a = tg.tensor(2.0, requires_grad=True)
    b = tg.tensor(3.0, requires_grad=True)
    out = a * a * b
    ga, gb = tg.grad(out, (a, b))
    assert ga.item() == 12.0 and gb.item() == 4.0
    assert a.grad is None and b.grad is None


def test_grad_allow_unused():
    a = tg.tensor(2.0, requires_grad=True)
    b = tg.tensor(3.0, requires_grad=True)
    with pytest.raises(RuntimeError, match="allow_unused=True"):
        tg.grad(a * 2.0, [a, b])
    ga, gb = tg.grad(a * 2.0, [a, b], allow_unused=True)
    assert ga.item() == 2.0 and gb is None


def test_grad_with_respect_to_non_leaf():
    a = tg.tensor(2.0, requires_grad=True)
    b = tg.tensor(3.0, requires_grad=True)
    h = a * b
    out = h * h
    gh, ga = tg.grad(out, [h, a])
    assert gh.item() == 12.0 and ga.item() == 36.0


def test_grad_outputs_weights_a_non_scalar_output():
    v = tg.tensor([1.0, 2.0], requires_grad=True)
    (g,) = tg.grad(v * v, v, grad_outputs=tg.tensor([1.0, 10.0]))
    assert g.tolist() == [2.0, 40.0]
    with pytest.raises(RuntimeError, match="scalar outputs"):
        tg.grad(v * v, v)


def test_grad_input_must_require_grad():
    with pytest.raises(RuntimeError):
        tg.grad(tg.tensor(1.0) * 2, tg.tensor(1.0))


# ---------------------------------------------------------------- functional transforms

def test_value_and_grad_argnums():
    f = lambda p, q: (p * p * q).sum()  # noqa: E731
    p, q = tg.tensor([1.0, 2.0]), tg.tensor([3.0, 4.0])
    value, g = tg.value_and_grad(f)(p, q)
    assert value.item() == 19.0 and g.tolist() == [6.0, 16.0]
    value, g = tg.value_and_grad(f, argnums=1)(p, q)
    assert g.tolist() == [1.0, 4.0]
    value, gs = tg.value_and_grad(f, argnums=(0, 1))(p, q)
    assert isinstance(gs, tuple) and gs[0].tolist() == [6.0, 16.0] and gs[1].tolist() == [1.0, 4.0]
    assert not p.requires_grad and p.grad is None


def test_vjp():
    out, fn = tg.vjp(lambda p, q: p * q, tg.tensor([1.0, 2.0]), tg.tensor([3.0, 5.0]))
    assert out.tolist() == [3.0, 10.0]
    gp, gq = fn(tg.tensor([1.0, 10.0]))
    assert gp.tolist() == [3.0, 50.0] and gq.tolist() == [1.0, 20.0]
    gp2, _ = fn(tg.tensor([2.0, 0.0]))       # vjp_fn may be called again
    assert gp2.tolist() == [6.0, 0.0]


def test_jvp_matches_analytic_derivative():
    x = np.array([0.3, -1.2, 2.0])
    t = np.array([1.0, 0.5, -2.0])
    out, tout = tg.jvp(lambda p: (p * p).sin(), (tg.tensor(x, dtype=tg.float64),), (tg.tensor(t, dtype=tg.float64),))
    np.testing.assert_allclose(out.numpy(), np.sin(x * x), rtol=1e-12)
    np.testing.assert_allclose(tout.numpy(), np.cos(x * x) * 2 * x * t, rtol=1e-12)


def test_jvp_matches_vjp_on_a_linear_map():
    rng = np.random.default_rng(0)
    A = tg.tensor(rng.standard_normal((3, 4)))
    x, t, c = (tg.tensor(rng.standard_normal(s)) for s in (4, 4, 3))
    f = lambda v: (A @ v).tanh()  # noqa: E731
    _, jt = tg.jvp(f, (x,), (t,))
    _, fn = tg.vjp(f, x)
    (ct,) = fn(c)
    # <c, J t> == <J^T c, t>
    assert abs(float((c * jt).sum()) - float((ct * t).sum())) < 1e-10


def test_gradcheck_passes_and_reports_mismatch():
    p = tg.tensor([0.5, -1.0, 2.0], requires_grad=True)
    q = tg.tensor([3.0, 4.0, 1.5])
    assert tg.gradcheck(lambda a, b: (a * b).tanh(), (p, q))
    assert tg.gradcheck(lambda a: (a @ a.T).exp().sum(), (tg.randn(2, 3, requires_grad=True),))


def test_gradcheck_skips_inputs_not_requiring_grad():
    calls = []

    def f(a, b):
        calls.append(b.dtype)
        return a * b

    tg.gradcheck(f, (tg.tensor([1.0, 2.0], requires_grad=True), tg.tensor([3.0, 4.0])))
    # one analytic call plus 2 (central) * 2 (elements of a) evaluations; b is never perturbed
    assert len(calls) == 1 + 2 * 2


def test_gradcheck_checks_float32_on_float64_copies():
    seen = []

    def f(a):
        seen.append(a.dtype)
        return a * a

    x = tg.tensor([1.0, 2.0], requires_grad=True)
    assert tg.gradcheck(f, (x,))
    assert seen and all(d == tg.float64 for d in seen)
    assert x.dtype == tg.float32 and x.grad is None


def test_gradcheck_catches_a_wrong_gradient():
    x = tg.tensor([1.0, 2.0], requires_grad=True)

    def f(a):  # forward a*a but backward of a*detach(a): gradient a instead of 2a
        return a * a.detach()

    with pytest.raises(tg.GradcheckError) as e:
        tg.gradcheck(f, (x,))
    assert isinstance(e.value, RuntimeError)
    msg = str(e.value)
    assert "input 0" in msg and "(0,)" in msg and "analytic" in msg and "numerical" in msg


# ---------------------------------------------------------------- devices

def test_device_equality_and_strings():
    assert tg.device("cpu") == "cpu" and tg.device("cpu") == tg.device("cpu")
    assert tg.device("cuda") == "cuda:0" and tg.device("cuda:0") == tg.device("cuda")
    assert str(tg.device("cuda")) == "cuda:0" and str(tg.device("cpu")) == "cpu"
    assert tg.device("cuda:1") != "cuda:0" and tg.device("cpu") != "cuda"
    assert tg.device(tg.device("cuda")) == "cuda:0"
    assert hash(tg.device("cuda")) == hash(tg.device("cuda:0"))
    assert tg.zeros(2).device == "cpu"
    with pytest.raises(RuntimeError):
        tg.device("tpu")
    with pytest.raises(TypeError):
        tg.device(3.5)


@pytest.mark.skipif(tg.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_without_gpu_explains_the_simulator(monkeypatch):
    monkeypatch.delenv("NUMBA_ENABLE_CUDASIM", raising=False)
    for f in (lambda: tg.zeros(2, device="cuda"), lambda: tg.tensor([1.0]).to("cuda"),
              lambda: tg.tensor([1.0]).cuda()):
        with pytest.raises(RuntimeError) as e:
            f()
        assert "NUMBA_ENABLE_CUDASIM=1" in str(e.value) and "not available" in str(e.value)
