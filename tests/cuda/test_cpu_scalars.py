"""A 0-d cpu tensor joins cuda tensors as PyTorch lets it, and stays a cpu tensor: its gradient and
.grad come back to the cpu (eagerly, under create_graph, and from compiled calls), a compiled call's
cpu results hold host memory, and a compiled call reads the scalar's current value (updated in place,
or -0.0 after 0.0). Values against NumPy."""
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tracegrad as tg

EXAMPLES = int(os.environ.get("TRACEGRAD_HYPOTHESIS_EXAMPLES", "8"))
F64 = tg.float64
X = np.array([0.5, -1.25, 2.0])

# op -> (f(s, x), d f.sum() / d s as NumPy of (s, x))
OPS = {
    "mul": (lambda s, x: s * x, lambda s, x: x.sum()),
    "add": (lambda s, x: x + s, lambda s, x: float(len(x))),
    "rsub": (lambda s, x: s - x, lambda s, x: float(len(x))),
    "div": (lambda s, x: x / s, lambda s, x: (-x / s ** 2).sum()),
    "pow": (lambda s, x: (x * x + 1.0) ** s, lambda s, x: ((x * x + 1) ** s * np.log(x * x + 1)).sum()),
    "maximum": (lambda s, x: tg.maximum(x, s), lambda s, x: float((s > x).sum())),
}


def _is_host(t):
    return t.device == "cpu" and isinstance(t._data, np.ndarray)


@settings(max_examples=3 * EXAMPLES, deadline=None)
@given(op=st.sampled_from(sorted(OPS)), s=st.sampled_from([0.75, 1.5, -0.5]),
       through=st.sampled_from(["leaf", "cpu intermediate"]))
def test_eager_gradient_of_a_cpu_scalar_stays_on_the_cpu(op, s, through):
    f, ds = OPS[op]
    leaf = tg.tensor(s, dtype=F64, requires_grad=True)
    x = tg.tensor(X, dtype=F64, device="cuda", requires_grad=True)
    mid = leaf if through == "leaf" else leaf * 1.0     # a cpu op before the mixed one
    if through != "leaf":
        mid.retain_grad()
    f(mid, x).sum().backward()
    assert _is_host(leaf.grad) and leaf.grad.shape == ()
    assert x.grad.device == "cuda:0"
    np.testing.assert_allclose(leaf.grad.item(), ds(s, X), rtol=1e-12)
    if through != "leaf":
        assert _is_host(mid.grad)


def test_create_graph_keeps_the_cpu_scalar_gradient_differentiable():
    s = tg.tensor(1.5, dtype=F64, requires_grad=True)
    x = tg.tensor(X, dtype=F64, device="cuda")
    (g,) = tg.autograd.grad((x * s * s).sum(), s, create_graph=True)     # 2 s sum(x)
    assert _is_host(g) and g.requires_grad
    (gg,) = tg.autograd.grad(g, s)
    assert _is_host(gg)
    np.testing.assert_allclose([g.item(), gg.item()], [2 * 1.5 * X.sum(), 2 * X.sum()], rtol=1e-12)


@pytest.mark.parametrize("op", ["mul", "div", "pow"])
def test_compiled_call_returns_cpu_gradients_and_results_in_host_memory(op):
    f, ds = OPS[op]
    cf = tg.compile(lambda s, x: (f(s, x).sum(), s * 2.0))
    for s_value in (0.75, -0.5):
        s = tg.tensor(s_value, dtype=F64, requires_grad=True)
        x = tg.tensor(X, dtype=F64, device="cuda", requires_grad=True)
        total, doubled = cf(s, x)
        assert total.device == "cuda:0" and _is_host(doubled) and doubled.item() == 2 * s_value
        (total + doubled).backward()
        assert _is_host(s.grad) and x.grad.device == "cuda:0"
        np.testing.assert_allclose(s.grad.item(), ds(s_value, X) + 2.0, rtol=1e-12)


def test_a_backward_inside_a_compiled_call_leaves_the_cpu_grad_on_the_cpu():
    def step(s, x):
        (x * s).sum().backward()
    s = tg.tensor(2.0, dtype=F64, requires_grad=True)
    x = tg.tensor(X, dtype=F64, device="cuda", requires_grad=True)
    tg.compile(step)(s, x)
    assert _is_host(s.grad) and s.grad.item() == pytest.approx(X.sum(), rel=1e-12)


@pytest.mark.filterwarnings("ignore:divide by zero")      # the simulator divides as NumPy scalars
def test_a_compiled_call_reads_the_scalars_current_bits():
    x = tg.tensor(X, dtype=F64, device="cuda")
    cf = tg.compile(lambda s, x: 1.0 / (x * s))
    s = tg.tensor(2.0, dtype=F64)
    np.testing.assert_allclose(cf(s, x).cpu().numpy(), 1 / (X * 2.0))
    s.add_(1.0)                                     # the same array, updated in place
    np.testing.assert_allclose(cf(s, x).cpu().numpy(), 1 / (X * 3.0))
    assert np.all(cf(tg.tensor(0.0, dtype=F64), x).cpu().numpy() == np.sign(X) * np.inf)
    assert np.all(cf(tg.tensor(-0.0, dtype=F64), x).cpu().numpy() == -np.sign(X) * np.inf)


def test_a_compiled_call_updates_a_cpu_scalar_in_place():
    def f(s, x):
        s.add_(1.0)
        return x * s
    s, x = tg.tensor(2.0, dtype=F64), tg.tensor(X, dtype=F64, device="cuda")
    out = tg.compile(f)(s, x)
    assert _is_host(s) and s.item() == 3.0
    np.testing.assert_allclose(out.cpu().numpy(), X * 3.0)
