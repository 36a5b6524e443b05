"""The compiled call's fast paths decide nothing wrong: the check against the last call's signature
(a miss after any change of shape, dtype, layout, storage sharing, requires_grad, .grad, a number
or the grad mode falls back to the full lookup), the lightweight autograd node, and the recycling
of small output arrays (an array is reused only when nothing else holds it).

Oracle: eager tracegrad on copies of the same inputs."""
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tracegrad as tg

EXAMPLES = int(os.environ.get("TRACEGRAD_HYPOTHESIS_EXAMPLES", "8"))
DATA = np.linspace(-1.0, 1.0, 12).reshape(3, 4)


def leaf(kind, dtype, scale):
    """A (3, 4) tensor over new memory: row-major, a transposed view, or every other column of a
    wider array (a leaf that requires no grad yet)."""
    data = (DATA * scale).astype(dtype)
    if kind == "transposed":
        return tg.tensor(np.ascontiguousarray(data.T)).t()
    if kind == "strided":
        wide = np.zeros((3, 8), dtype)
        wide[:, ::2] = data
        return tg.tensor(wide)[:, ::2]
    return tg.tensor(data)


def f(a, b, k):
    return ((a * b).tanh() * k + a.exp()).sum()


ARG = st.tuples(st.sampled_from(["contiguous", "transposed", "strided"]), st.booleans(), st.booleans())
CALL = st.fixed_dictionaries({
    "a": ARG, "b": ARG, "dtype": st.sampled_from([np.float32, np.float64]),
    "alias": st.sampled_from(["none", "same tensor", "same array"]),
    "k": st.sampled_from([0.5, 2, 2.0]), "grad_mode": st.booleans()})


def arguments(call, scale):
    """(a, b, k) of one generated call: each tensor with its layout, requires_grad and .grad."""
    ts = []
    for (kind, rg, has_grad), s in zip((call["a"], call["b"]), (scale, 2 * scale)):
        t = leaf(kind, call["dtype"], s).requires_grad_(rg)
        if rg and has_grad:
            t.grad = tg.ones(3, 4, dtype=t.dtype)
        ts.append(t)
    a, b = ts
    if call["alias"] == "same tensor":
        b = a
    elif call["alias"] == "same array":
        b = a.detach()
    return a, b, call["k"]


def result(fn, a, b, k, grad_mode):
    with tg.set_grad_enabled(grad_mode):
        out = fn(a, b, k)
    if out.requires_grad:
        out.backward()
    return out.item(), [None if t.grad is None else t.grad.numpy().copy() for t in (a, b)]


def close(x, y):
    return np.allclose(x, y, rtol=1e-4, atol=1e-4)


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.lists(CALL, min_size=2, max_size=4))
def test_generated_call_sequences_match_eager(calls):
    compiled = tg.compile(f)
    for i, call in enumerate(calls):
        for repeat in range(2):        # the second call of a signature takes the fast path
            scale = 1.0 + 0.25 * i + 0.1 * repeat
            got = result(compiled, *arguments(call, scale), call["grad_mode"])
            want = result(f, *arguments(call, scale), call["grad_mode"])
            assert close(got[0], want[0]), (call, got[0], want[0])
            for g, w in zip(got[1], want[1]):
                assert (g is None) == (w is None) and (g is None or close(g, w)), (call, g, w)


def h(a, b, k):
    """Writes a in place (so which inputs share memory is in the signature) and reads b.grad."""
    a.mul_(k)
    out = (a * 2 + b).sum()
    return out if b.grad is None else out + b.grad.sum()


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.lists(CALL, min_size=2, max_size=4))
def test_generated_calls_of_an_in_place_function_match_eager(calls):
    compiled = tg.compile(h)
    for i, call in enumerate(calls):
        call = dict(call, a=(call["a"][0], False, False))     # a leaf updated in place requires no grad
        for repeat in range(2):
            scale = 1.0 + 0.25 * i + 0.1 * repeat
            args, ref = arguments(call, scale), arguments(call, scale)
            with tg.set_grad_enabled(call["grad_mode"]):
                got, want = compiled(*args).item(), h(*ref).item()
            assert close(got, want), (call, got, want)
            assert close(args[0].detach().numpy(), ref[0].detach().numpy())


@pytest.mark.filterwarnings("ignore:f was traced")
def test_a_miss_after_each_change_falls_back_and_is_right():
    compiled = tg.compile(f)
    call = {"a": ("contiguous", True, False), "b": ("contiguous", False, False), "dtype": np.float32,
            "alias": "none", "k": 2.0, "grad_mode": True}
    changes = [{}, {"dtype": np.float64}, {"a": ("transposed", True, False)}, {"alias": "same tensor"},
               {"alias": "same array"}, {"k": 2}, {"k": 3.0}, {"a": ("contiguous", False, False)},
               {"a": ("contiguous", True, True)}, {"grad_mode": False}, {}]
    for change in changes:
        c = dict(call, **change)
        for scale in (1.0, 1.5):
            got, want = result(compiled, *arguments(c, scale), c["grad_mode"]), result(f, *arguments(c, scale),
                                                                                      c["grad_mode"])
            assert close(got[0], want[0]), change
            assert all((g is None) == (w is None) and (g is None or close(g, w)) for g, w in zip(got[1], want[1]))
    assert compiled.stats()["cache_hits"] >= len(changes)


def test_default_dtype_change_misses():
    compiled = tg.compile(lambda x: x * 0.1)
    x = tg.tensor([1.0, 2.0], dtype=tg.float64)
    compiled(x)
    compiled(x)
    try:
        tg.set_default_dtype(tg.float64)
        traces = compiled.stats()["traces"]
        compiled(x)
        assert compiled.stats()["traces"] == traces + 1
    finally:
        tg.set_default_dtype(tg.float32)


# ---------------------------------------------------------------------- recycled outputs

def small(x):
    return (x * 2.0).tanh()


def test_an_output_still_held_is_never_reused():
    g = tg.compile(small)
    x = tg.tensor(DATA.astype(np.float32))
    y1 = g(x)
    before = y1.numpy().copy()
    y2 = g(x * 3)
    assert y1.numpy() is not y2.numpy() and np.array_equal(y1.numpy(), before)
    view = g(x).numpy()[1:]            # only a view of the array is left
    kept = view.copy()
    g(x * 5)
    assert np.array_equal(view, kept)


def test_an_output_made_read_only_is_not_reused():
    g = tg.compile(small)
    x = tg.tensor(DATA.astype(np.float32))
    y = g(x)
    y.numpy().flags.writeable = False
    del y
    for _ in range(2):
        y = g(x)
        y.add_(1.0)                    # a fresh output is writable
        assert np.allclose(y.numpy(), np.tanh(DATA * 2) + 1, atol=1e-6)
        del y


def test_saved_values_and_grads_survive_later_calls():
    def loss(x):
        return (x * 1.5).tanh().exp().sum()
    g = tg.compile(loss)
    x1 = tg.tensor(DATA.astype(np.float32), requires_grad=True)
    x2 = tg.tensor(DATA[::-1].copy().astype(np.float32), requires_grad=True)
    l1 = g(x1)                          # its saved values must not be overwritten by the next call
    l2 = g(x2)
    l1.backward()
    l2.backward()
    g1 = x1.grad.numpy().copy()
    g(x1).backward()                    # .grad held by x1: accumulated into, not overwritten
    for x, want in ((x1, 2 * g1), (x2, None)):
        e = x.detach().clone().requires_grad_()
        loss(e).backward()
        assert np.allclose(x.grad.numpy(), want if want is not None else e.grad.numpy(), rtol=1e-5, atol=1e-6)
