"""check=True on symbolic traces (dynamic=True, and dynamic=None once a size changed): the compiled
program runs at the call's sizes and the interpreter beside it runs the symbolic graph bound to them,
so a call at any size (0 and 1 included) gives eager's values and gradients with no error, and a
kernel whose result differs is still reported. The introspection that runs or prints a symbolic
entry at a call (ir() of every stage, profile, draw, to_dot) works at every size too."""
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tracegrad as tg
from broken_kernel import break_last_kernel
from tracegrad.jit.dynamic import SymbolicEntry

EXAMPLES = int(os.environ.get("TRACEGRAD_HYPOTHESIS_EXAMPLES", "6"))
FEATURES = 6


def _matmul(x, w):
    return ((x @ w).tanh() * 2).sum(), None


def _broadcast(x, w):
    h = (x * w[:, 0] + w[:, 1]).exp()             # [B, 6] with a [6] row: the row stretches
    return h.sum(dim=1).log().sum(), h


def _shape_read(x, w):
    n = x.shape[0]                                 # a symbolic int inside the function
    y = x.reshape(n, 2, FEATURES // 2)[:, 1:].relu() * tg.arange(n, dtype=x.dtype).reshape(n, 1, 1)
    return (y.sum(dim=(1, 2)) @ tg.ones(n, dtype=x.dtype)) + (w * w).sum(), y


def _two_outputs(x, w):
    h = x @ w
    return (h * h).sum(dim=1).sum(), h.relu()      # backward() from the first only: a partial backward


PROGRAMS = [_matmul, _broadcast, _shape_read, _two_outputs]


def _calls(f, sizes, seed):
    """Per call: the first result, the second (or None) and the gradients of x and w."""
    r = np.random.default_rng(seed)
    w = tg.tensor(r.standard_normal((FEATURES, FEATURES)).astype(np.float32) * 0.3, requires_grad=True)
    out = []
    for b in sizes:
        x = tg.tensor(r.standard_normal((b, FEATURES)).astype(np.float32), requires_grad=True)
        loss, other = f(x, w)
        loss.backward()
        out.append([loss.detach().numpy().copy(), None if other is None else other.detach().numpy().copy(),
                    x.grad.numpy().copy(), w.grad.numpy().copy()])
        w.grad = None
    return out


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.sampled_from(PROGRAMS), st.lists(st.sampled_from([0, 1, 2, 3, 5, 8]), min_size=3, max_size=5),
       st.sampled_from([True, None]), st.integers(0, 2**16))
def test_check_mode_at_every_size_gives_eagers_values_and_gradients(program, sizes, dynamic, seed):
    want = _calls(program, sizes, seed)
    f = tg.compile(program, dynamic=dynamic, check=True)
    got = _calls(f, sizes, seed)
    for b, g_call, w_call in zip(sizes, got, want):
        for a, e in zip(g_call, w_call):
            if e is None:
                assert a is None
                continue
            assert a.shape == e.shape, (b, a.shape, e.shape)
            np.testing.assert_allclose(a, e, rtol=1e-4, atol=1e-4, err_msg=f"size {b}")
    if dynamic:     # the checked calls ran symbolic programs (x's feature dim is a symbol at least)
        assert f.stats()["dynamic"], "dynamic=True traced no symbolic entry"


def _symbolic_program(f, x, w):
    """The program (forward and backward) f's symbolic entry runs at x's sizes."""
    entry = next(e for es in f.symbolic.values() for e in es)
    assert isinstance(entry, SymbolicEntry)
    return entry.program_for([x, w]).programs


@pytest.mark.parametrize("which", [0, 1])
def test_check_mode_under_dynamic_still_reports_a_kernel_whose_result_differs(monkeypatch, which):
    """A kernel output of the symbolic program made wrong (forward or backward): the next call, at a
    size the trace never saw, raises CheckError naming the interpret backend."""
    f = tg.compile(lambda x, w: ((x @ w).tanh() * 2).sum(), dynamic=True, check=True)
    w = tg.ones(FEATURES, 3, requires_grad=True)
    x = tg.ones(5, FEATURES)
    f(x, w).backward()
    w.grad = None
    break_last_kernel(monkeypatch, _symbolic_program(f, x, w)[which])
    x, w.grad = tg.ones(7, FEATURES), None     # (a .grad now set would be a new signature: a retrace)
    with pytest.raises(tg.CheckError, match="differs from the interpret backend"):
        f(x, w).backward()
    assert f.stats()["traces"] == 1        # the size-7 call ran the symbolic program


def test_interpret_backend_check_mode_under_dynamic_matches_eager():
    sizes = [4, 1, 0, 6]
    want = _calls(_broadcast, sizes, 1)
    got = _calls(tg.compile(_broadcast, backend="interpret", dynamic=True, check=True), sizes, 1)
    for g_call, w_call in zip(got, want):
        for a, e in zip(g_call, w_call):
            np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dynamic", [True, None])
def test_introspection_of_a_symbolic_entry_at_each_call(dynamic):
    """ir() of every stage, profile(), draw() and to_dot() of a symbolic entry, at sizes after the
    trace's: the symbolic stages print symbols; kernels, llvm and profiles are the call's sizes'."""
    f = tg.compile(lambda x, w: ((x @ w).tanh() * 2).sum(), dynamic=dynamic)
    w = tg.ones(FEATURES, 3, requires_grad=True)
    for b in (5, 7, 1, 9):
        x = tg.ones(b, FEATURES)
        f(x, w)
        for stage in ("traced", "forward", "backward", "kernels", "llvm"):
            assert f.ir(x, w, stage=stage)
        if b == 9:      # the third distinct size: symbolic under both settings
            assert "f32[B," in f.ir(x, w, stage="forward")
        rows = f.profile(x, w, repeat=1)
        assert rows and all(r["bytes"] > 0 for r in rows)
        for stage in ("forward", "backward", "kernels"):
            assert str(f.draw(x, w, stage=stage))
        assert "digraph" in f.to_dot(x, w)
