"""check=True on programs that draw random numbers or update their inputs: the compiled program and
the interpreter beside it compare like with like (the interpreter takes the compiled run's draws and
runs on the inputs as they were before the call), and the call leaves the generator, the results,
the gradients and the updated inputs where one eager call leaves them. Every draw (randint and
randperm too) is fresh at each call."""
import os

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import tracegrad as tg
from broken_kernel import break_last_kernel

EXAMPLES = int(os.environ.get("TRACEGRAD_HYPOTHESIS_EXAMPLES", "6"))

DRAWS = ["tg.rand(x.shape)", "tg.randn(x.shape[-1])", "tg.nn.functional.dropout(x, 0.5)",
         "tg.nn.functional.dropout(x.exp(), 0.25)", "tg.randn(x.shape, dtype=x.dtype) * x",
         "tg.randint(0, 7, x.shape).to(x.dtype)", "x[..., tg.randperm(x.shape[-1])]",
         "tg.randint(-3, 3, (x.shape[-1],), dtype=x.dtype)"]


def _program(draws):
    def f(x, w):
        acc = x * w
        for k, used in draws:
            d = eval(DRAWS[k])
            if used:
                acc = acc + d * w
        return acc.tanh().sum(), acc
    return f


def _run(f, seed, shape, dtype, calls):
    """Each call's results and gradients, then a draw after the last call (where the generator is)."""
    tg.manual_seed(seed)
    x = tg.tensor(np.linspace(-1, 1, int(np.prod(shape))).reshape(shape), dtype=dtype, requires_grad=True)
    w = tg.tensor(np.linspace(0.5, 1.5, shape[-1]), dtype=dtype, requires_grad=True)
    out = []
    for _ in range(calls):
        loss, acc = f(x, w)
        loss.backward()
        out += [loss.detach().numpy().copy(), acc.detach().numpy().copy(), x.grad.numpy().copy(), w.grad.numpy().copy()]
        x.grad = w.grad = None
    return out, tg.rand(5).numpy()


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.lists(st.tuples(st.integers(0, len(DRAWS) - 1), st.booleans()), min_size=1, max_size=4),
       st.integers(0, 2**16), st.sampled_from([(3,), (2, 5), (4, 3)]), st.sampled_from(["float32", "float64"]),
       st.integers(2, 3))
def test_check_mode_on_random_programs_matches_one_eager_run(draws, seed, shape, dtype, calls):
    f = _program(draws)
    want, want_after = _run(f, seed, shape, getattr(tg, dtype), calls)
    tol = 1e-5 if dtype == "float32" else 1e-12
    for backend in ("llvm", "interpret"):
        got, got_after = _run(tg.compile(f, backend=backend, check=True), seed, shape, getattr(tg, dtype), calls)
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, rtol=tol, atol=tol)
        np.testing.assert_array_equal(got_after, want_after)     # the generator moved as one eager call


def test_check_mode_compares_an_update_in_place_with_the_inputs_before_the_call():
    def f(p, q):
        with tg.no_grad():
            p.mul_(2.0).add_(tg.rand(p.shape))
        return (p * q).sum()

    def run(fn):
        tg.manual_seed(3)
        p, q = tg.tensor([1.0, -2.0, 3.0]), tg.tensor([0.5, 1.5, -1.0], requires_grad=True)
        outs = []
        for _ in range(3):
            loss = fn(p, q)
            loss.backward()
            outs += [loss.item(), p.numpy().copy(), q.grad.numpy().copy()]
        return outs, tg.rand(3).numpy()
    want = run(f)
    for backend in ("llvm", "interpret"):
        got = run(tg.compile(f, backend=backend, check=True))
        for a, b in zip(got[0], want[0]):
            np.testing.assert_allclose(a, b, rtol=1e-6)
        np.testing.assert_array_equal(got[1], want[1])


def test_check_mode_still_names_a_kernel_whose_result_differs(monkeypatch):
    f = tg.compile(lambda x: (x.exp() * tg.rand(x.shape)).sum(), check=True)
    x = tg.ones(4)
    f(x)
    break_last_kernel(monkeypatch, next(iter(f.cache.values())).programs[0])
    try:
        f(x)
    except tg.CheckError as e:
        assert "differs from the interpret backend" in str(e)
    else:
        raise AssertionError("check=True missed a kernel whose output differs")


def test_check_tolerance_follows_the_float_width():
    """check=True compares each dtype within a few of its own rounding steps: a float16 result one
    float16 step off (a device's math function rounding its float32 differently) is not a mismatch,
    a 5 % difference is; float32 and float64 keep theirs."""
    from tracegrad.jit.check import _close
    one = np.array([1.0, 0.5, -2.0], np.float16)
    step = np.nextafter(one, np.float16(np.inf))
    assert _close(step, one.astype(np.float64))
    assert not _close((one * np.float16(1.05)).astype(np.float16), one.astype(np.float64))
    assert _close(np.float32(1.0001) * np.ones(3, np.float32), np.ones(3))
    assert not _close(np.float64(1.0001) * np.ones(3), np.ones(3))
