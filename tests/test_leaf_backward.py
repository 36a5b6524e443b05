"""`loss.backward()` of a compiled call's one-element result whose inputs are leaves runs the entry's
generated backward (jit/callgen.straight_backward) instead of the engine: the same gradients, the
same accumulation into .grad, and the engine's path, with its errors, wherever the shortcut does not
apply (a second backward, an input changed in place, a non-leaf input, retain_grad, create_graph, an
explicit gradient, a tracer following the backward).

Oracles: eager tracegrad, and the engine's path on the same compiled call (an explicit gradient)."""
import importlib
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tracegrad as tg

tensor_class = importlib.import_module("tracegrad.tensor.tensor_class")   # tracegrad.tensor.tensor is a function
EXAMPLES = int(os.environ.get("TRACEGRAD_HYPOTHESIS_EXAMPLES", "8"))


def f(a, b, c):
    return ((a * b).tanh() + c.exp() * a).sum() / 3.0


def args(dtype, rgs, same, seed=3):
    rng = np.random.default_rng(seed)
    ts = [tg.tensor(rng.standard_normal((2, 5)).astype(dtype), requires_grad=rg) for rg in rgs]
    if same:
        ts[1] = ts[0]
    return ts


def grads(ts):
    return [None if t.grad is None else t.grad.numpy().copy() for t in ts]


@settings(max_examples=EXAMPLES, deadline=None)
@given(dtype=st.sampled_from([np.float32, np.float64]), rgs=st.tuples(st.booleans(), st.booleans(), st.just(True)),
       same=st.booleans(), start_grad=st.booleans(), calls=st.integers(1, 3))
def test_generated_backward_equals_engine_and_eager(dtype, rgs, same, start_grad, calls):
    cf = tg.compile(f)
    results = {}
    for how in ("eager", "engine", "generated"):
        ts = args(dtype, rgs, same)
        if start_grad:
            for t in ts:
                if t.requires_grad:
                    t.grad = tg.full(t.shape, 0.5, dtype=t.dtype)
        for _ in range(calls):          # accumulating calls; the later ones take the hot path
            if how == "eager":
                f(*ts).backward()
            elif how == "engine":
                cf(*ts).backward(tg.ones((), dtype=ts[0].dtype))
            else:
                cf(*ts).backward()
        results[how] = grads(ts)
    assert all(entry.backward_source is not None for entry in cf.cache.values())
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)
    for how in ("engine", "generated"):
        for got, want in zip(results[how], results["eager"]):
            assert (got is None) == (want is None)
            if got is not None:
                np.testing.assert_allclose(got, want, **tol)


def test_the_common_step_never_reaches_the_engine(monkeypatch):
    ref = args(np.float32, (True, True, True), False)
    f(*ref).backward()

    def engine(*a, **k):
        raise AssertionError("backward() went through the engine")
    monkeypatch.setattr(tensor_class, "run_backward", engine)
    cf = tg.compile(f)
    ts = args(np.float32, (True, True, True), False)
    for _ in range(3):
        for t in ts:
            t.grad = None
        cf(*ts).backward()
        for g, w in zip(grads(ts), grads(ref)):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_second_backward_needs_retain_graph():
    cf = tg.compile(f)
    ts = args(np.float64, (True, True, True), False)
    loss = cf(*ts)
    loss.backward(retain_graph=True)
    loss.backward()
    ref = args(np.float64, (True, True, True), False)
    f(*ref).backward()
    for g, w in zip(grads(ts), grads(ref)):
        np.testing.assert_allclose(g, 2 * w, rtol=1e-12)
    with pytest.raises(RuntimeError, match="a second time"):
        loss.backward()


def test_input_changed_in_place_before_backward_raises_eagers_error():
    cf = tg.compile(lambda a: (a.exp() * a).sum())
    a = tg.tensor([0.5, -1.0, 2.0], requires_grad=True)
    cf(a)
    loss = cf(a)
    with tg.no_grad():
        a.mul_(2.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


def test_non_leaf_input_and_retain_grad_take_the_engine():
    cf = tg.compile(lambda a: (a.tanh() * a).sum())
    for _ in range(2):
        x = tg.tensor([0.3, -0.7, 1.1], dtype=tg.float64, requires_grad=True)
        y = cf(x * 2.0)                 # the call's input is not a leaf
        y.retain_grad()
        y.backward()
        z = x * 2.0
        want = 2.0 * (np.tanh(z.detach().numpy()) + z.detach().numpy() / np.cosh(z.detach().numpy()) ** 2)
        np.testing.assert_allclose(x.grad.numpy(), want, rtol=1e-12)
        assert y.grad.item() == 1.0


def test_create_graph_keeps_its_error():
    cf = tg.compile(lambda a: (a * a).sum())
    a = tg.tensor([1.0, 2.0], requires_grad=True)
    cf(a)
    with pytest.raises(RuntimeError, match="double backward"):
        cf(a).backward(create_graph=True)


def test_grad_of_a_leaf_that_is_not_the_first_argument_only():
    cf = tg.compile(lambda a, b: (a * b).sum())
    a = tg.tensor([1.0, 2.0, 3.0])
    b = tg.tensor([4.0, 5.0, 6.0], requires_grad=True)
    for _ in range(3):
        b.grad = None
        cf(a, b).backward()
        assert a.grad is None
        np.testing.assert_array_equal(b.grad.numpy(), [1.0, 2.0, 3.0])


LEAVES = {
    "empty": lambda: np.zeros((0, 3)),
    "transposed": lambda: np.arange(12.0).reshape(3, 4).T / 7,
    "strided": lambda: (np.arange(24.0) / 11)[::3],
    "read-only": lambda: np.require(np.linspace(-1, 1, 5), requirements="C"),
}


@pytest.mark.parametrize("kind", list(LEAVES))
def test_odd_leaves_take_the_generated_backward_as_eager(kind, monkeypatch):
    def leaf():
        arr = LEAVES[kind]()
        arr.flags.writeable = kind != "read-only"
        return tg.from_numpy(arr).requires_grad_()

    def engine(*a, **k):
        raise AssertionError("backward() went through the engine")
    fn = lambda a: (a.exp() * a.tanh()).sum()     # noqa: E731
    x = leaf()
    fn(x).backward()
    want = x.grad.numpy().copy()
    cf = tg.compile(fn)
    for i in range(3):
        x = leaf()
        if i:                                    # the first call traces; the later ones must not reach it
            monkeypatch.setattr(tensor_class, "run_backward", engine)
        cf(x).backward()
        assert x.grad.shape == x.shape
        np.testing.assert_allclose(x.grad.numpy(), want, rtol=1e-12)
