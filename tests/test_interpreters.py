"""Interpreters and modes are per thread; traced values are their own type; retain_grad; grad mode calls."""
import threading

import numpy as np
import pytest

import tracegrad as tg
from threads_helper import run_in_threads
from tracegrad.trace import Traced

N_THREADS = 8


def _tanh_sq_loss_grads(a, b):
    """NumPy oracle of sum(tanh(a*b)**2) and its gradients in a and b."""
    t = np.tanh(a * b)
    d = 2 * t * (1 - t * t)
    return (t * t).sum(), d * b, (d * a).sum(axis=0)


# ---------------------------------------------------------------- threads

def test_eager_backward_in_eight_threads_matches_numpy():
    def work(i):
        rng = np.random.default_rng(i)
        for _ in range(40):
            n, m = rng.integers(1, 5, size=2)
            a, b = rng.standard_normal((n, m)), rng.standard_normal(m)
            x, w = tg.tensor(a, requires_grad=True), tg.tensor(b, requires_grad=True)
            if rng.random() < 0.3:
                with tg.no_grad():          # this thread's no_grad must not switch off the others' autograd
                    assert not (x * w).requires_grad
            loss = ((x * w).tanh() ** 2).sum()
            loss.backward()
            value, gx, gw = _tanh_sq_loss_grads(a, b)
            np.testing.assert_allclose(loss.item(), value, rtol=1e-12)
            np.testing.assert_allclose(x.grad.numpy(), gx, rtol=1e-10, atol=1e-12)
            np.testing.assert_allclose(w.grad.numpy(), gw, rtol=1e-10, atol=1e-12)

    run_in_threads(work, n=N_THREADS)


def test_compiling_in_one_thread_leaves_other_threads_eager():
    stop = threading.Event()

    def work(i):
        if i == 0:
            try:
                for k in range(12):     # new functions and shapes: every call traces
                    f = tg.compile(lambda x: ((x * 3.0).tanh() * x).sum(), backend="interpret")
                    x = tg.randn(3 + k, requires_grad=True)
                    f(x).backward()
                    t = np.tanh(3 * x.detach().numpy())
                    np.testing.assert_allclose(x.grad.numpy(), t + 3 * x.detach().numpy() * (1 - t * t),
                                               rtol=1e-5, atol=1e-6)
            finally:
                stop.set()
            return
        rng = np.random.default_rng(i)
        while not stop.is_set():
            a = rng.standard_normal(5)
            x = tg.tensor(a, requires_grad=True)
            y = (x * 2.0).sum()
            assert y.item() == pytest.approx(2 * a.sum())      # .item() of an eager tensor, never traced
            assert bool(y > -1e9) and y.detach().numpy().shape == ()
            y.backward()
            np.testing.assert_array_equal(x.grad.numpy(), np.full(5, 2.0))

    run_in_threads(work, n=4)


def test_eight_threads_calling_one_compiled_function_trace_it_once():
    f = tg.compile(lambda x, w: ((x * w).tanh() ** 2).sum(), backend="interpret")

    def work(i):
        rng = np.random.default_rng(100 + i)
        for _ in range(10):
            a, b = rng.standard_normal((3, 4)), rng.standard_normal(4)
            x = tg.tensor(a, requires_grad=True)
            loss = f(x, tg.tensor(b))
            loss.backward()
            value, gx, _ = _tanh_sq_loss_grads(a, b)
            np.testing.assert_allclose(loss.item(), value, rtol=1e-12)
            np.testing.assert_allclose(x.grad.numpy(), gx, rtol=1e-10, atol=1e-12)

    run_in_threads(work, n=N_THREADS)
    assert f.stats()["traces"] == 1


def test_grad_mode_is_per_thread():
    inside, release = threading.Barrier(2), threading.Event()
    seen = {}

    def work(i):
        if i == 0:
            with tg.no_grad():
                inside.wait()
                release.wait()
                seen[0] = tg.is_grad_enabled()
        else:
            inside.wait()           # thread 0 is inside no_grad now
            x = tg.ones(2, requires_grad=True)
            seen[1] = (tg.is_grad_enabled(), (x * 2).requires_grad)
            release.set()

    run_in_threads(work, n=2)
    assert seen == {0: False, 1: (True, True)}


# ---------------------------------------------------------------- traced values

def test_traced_values_are_their_own_type_and_still_tensors():
    kinds = []

    def f(x):
        y = x * 2
        kinds.append((type(y), isinstance(y, tg.Tensor), y.shape, y.dtype))
        return y.exp().sum(0).softmax(0)

    tg.compile(f, backend="interpret")(tg.ones(2, 3))
    assert kinds == [(Traced, True, (2, 3), tg.float32)]
    assert type(tg.ones(2) * 2) is tg.Tensor


def test_jvp_inside_a_compiled_function():
    f = tg.compile(lambda a, t: tg.jvp(lambda u: (u * u).sin(), (a,), (t,))[1], backend="interpret")
    x = np.array([1.0, 2.0, 3.0])
    np.testing.assert_allclose(f(tg.tensor(x), tg.ones(3, dtype=tg.float64)).numpy(), 2 * x * np.cos(x * x))


# ---------------------------------------------------------------- retain_grad

def test_retain_grad_fills_grad_of_a_non_leaf():
    x = tg.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x * x
    z = y * 2.0
    assert y.retain_grad() is y and y.retains_grad and not z.retains_grad
    (z * z).sum().backward()
    # PyTorch: y.grad = d/dy sum((2y)^2) = 8y; z.grad stays None (not retained)
    np.testing.assert_allclose(y.grad.numpy(), 8 * np.array([1.0, 4.0, 9.0]))
    assert z.grad is None and y.grad.grad_fn is None
    np.testing.assert_allclose(x.grad.numpy(), 16 * np.array([1.0, 8.0, 27.0]))


def test_retain_grad_accumulates_and_follows_in_place_updates():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    y = x * 3.0
    y.retain_grad()
    (y * 2.0).sum().backward(retain_graph=True)
    (y * 5.0).sum().backward()
    np.testing.assert_allclose(y.grad.numpy(), [7.0, 7.0])          # accumulated, as PyTorch does
    w = x * 1.0
    w.retain_grad()
    w.mul_(4.0)                      # the retained gradient is that of w's new value
    (w * w).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), 2 * 4.0 * np.array([1.0, 2.0]))


def test_retain_grad_on_leaves_and_tensors_without_grad():
    x = tg.tensor([1.0], requires_grad=True)
    assert x.retain_grad() is x and not x.retains_grad      # a leaf keeps its gradient anyway
    with pytest.raises(RuntimeError, match="requires_grad=False"):
        tg.tensor([1.0]).retain_grad()


def test_retain_grad_not_filled_by_autograd_grad():
    x = tg.tensor([2.0], requires_grad=True)
    y = x * x
    y.retain_grad()
    (g,) = tg.grad((y * y).sum(), x)
    assert g.item() == 32.0 and y.grad is None


# ---------------------------------------------------------------- set_grad_enabled

def test_set_grad_enabled_as_a_call_switches_grad_mode():
    x = tg.ones(2, requires_grad=True)
    try:
        tg.set_grad_enabled(False)
        assert not tg.is_grad_enabled() and not (x * 2).requires_grad
        tg.set_grad_enabled(True)
        assert tg.is_grad_enabled() and (x * 2).requires_grad
    finally:
        tg.set_grad_enabled(True)


def test_set_grad_enabled_as_context_manager_and_decorator():
    x = tg.ones(2, requires_grad=True)
    with tg.set_grad_enabled(False):
        assert not (x * 2).requires_grad
        with tg.set_grad_enabled(True):
            assert (x * 2).requires_grad
        assert not tg.is_grad_enabled()
    assert tg.is_grad_enabled()

    @tg.set_grad_enabled(False)
    def f(t):
        return t * 2

    assert tg.is_grad_enabled()          # decorating does not switch the mode
    assert not f(x).requires_grad and tg.is_grad_enabled()


def test_set_grad_enabled_call_is_per_thread():
    seen = {}

    def work(i):
        if i == 0:
            tg.set_grad_enabled(False)   # only this thread, and it ends with the thread
            seen[0] = tg.is_grad_enabled()
        else:
            seen[1] = tg.is_grad_enabled()

    run_in_threads(work, n=2)
    assert seen == {0: False, 1: True} and tg.is_grad_enabled()
