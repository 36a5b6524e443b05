"""A decision on symbolic sizes asked after a symbolic trace's guards were fixed (issue 26, "0 wrong cache
hits"): a compile built on first use (a partial backward, a joined forward+gradient) would decide on the
trace's sizes while calls of other sizes, already checked and cached, never check it. The ShapeEnv is sealed
once the symbolic graphs are lowered: such a decision raises LateGuard, and the compile takes a choice that
holds for every size (a partial backward per size, no joined program)."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tracegrad as tg
from tracegrad.ir.passes import cotangents, join
from tracegrad.symint import LateGuard, ShapeEnv, hint, is_sym, using

SETTINGS = settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))


def test_a_sealed_shape_env_refuses_a_new_guard_only():
    env = ShapeEnv()
    with using(env):
        b = env.sym("B", 6)
        assert bool(b >= 2)                     # recorded before sealing
        env.sealed = True
        assert bool(b >= 2)                     # the same guard again: every call checks it
        assert bool(b + 1 > 0)                  # provable over the range: no guard
        with pytest.raises(LateGuard, match="B >= 6"):
            bool(b >= 6)
    assert [g.text for g in env.guards] == ["B >= 2"]


def _specializing(original):
    """drop_cotangents made to decide on a symbolic size and compile it in, as a lowering strategy that
    needs a size would: `B >= hint` guarded, then the graph instantiated at the trace's sizes."""
    def drop(bwd, present):
        graph, absent = original(bwd, present)
        dims = [d for v in graph.inputs for d in v.shape if is_sym(d)]
        if dims and bool(dims[0] >= hint(dims[0])):
            names = set().union(*(d.expr.symbols() for d in dims))
            hints = {n: hint(d) for d in dims for n in d.expr.symbols() if d.expr == d.expr.symbol(n)}
            if names <= set(hints):
                graph = graph.substitute(hints)
                graph.grads_of = getattr(bwd, "grads_of", None)
        return graph, absent
    return drop


@SETTINGS
@given(sizes=st.lists(st.sampled_from([1, 2, 3, 5, 6, 9]), min_size=2, max_size=5, unique=True))
def test_a_late_decision_of_a_partial_backward_never_reaches_other_sizes(sizes):
    """Every size is called (and cached) before the first partial backward is built, at the trace's size:
    a decision it makes must not hold for the others, which get eager's gradients (the calls of one size
    with a gradient, then with none, retrace for that state: no guard of sizes is among the reasons)."""
    def f(x):
        v = (x * 3.0).cumsum(-1)
        return v.sum(-1), v.tanh().mean()

    mp = pytest.MonkeyPatch()
    mp.setattr(cotangents, "drop_cotangents", _specializing(cotangents.drop_cotangents))
    try:
        c = tg.compile(f, backend="llvm", dynamic=True)
        xs = [tg.tensor(np.linspace(-1, 1, 2 * n).reshape(2, n), requires_grad=True) for n in sizes]
        outs = [c(x) for x in xs]           # every size checked against the guards and cached
        for x, out in zip(xs, outs):
            out[0].sum().backward()
            xe = tg.tensor(x.detach().numpy(), requires_grad=True)
            f(xe)[0].sum().backward()
            np.testing.assert_allclose(x.grad.numpy(), xe.grad.numpy(), rtol=1e-6)
            again = c(x)                    # the hot path: the same sizes as the last call
            again[0].sum().backward()
            np.testing.assert_allclose(x.grad.numpy(), 2 * xe.grad.numpy(), rtol=1e-6)
        assert not any("guard" in r for r in c.stats()["retrace_reasons"])
        assert all(not e["guards"] for e in c.stats()["dynamic"])   # f's trace has none; the late one none
    finally:
        mp.undo()


@settings(max_examples=3, deadline=None, suppress_health_check=list(HealthCheck))
@given(rows=st.lists(st.integers(260, 300), min_size=2, max_size=3, unique=True))
def test_a_late_decision_of_a_joined_forward_and_gradient_is_refused(rows):
    """A loss whose calls are each followed by backward() gets the forward joined with its gradient, built on
    first use at a later size: a decision on sizes there is refused (no joined program), the gradients are
    eager's at every size and no guard is recorded."""
    original, asked = join.forward_with_gradient, []

    def deciding(fwd, *args, **kwargs):
        asked.append(fwd)
        dims = [d for v in fwd.inputs for d in v.shape if is_sym(d)]
        if dims:
            bool(dims[0] >= hint(dims[0]))
        return original(fwd, *args, **kwargs)

    def f(x):
        return (x * x).tanh().sum()

    mp = pytest.MonkeyPatch()
    mp.setattr(join, "forward_with_gradient", deciding)
    try:
        c = tg.compile(f, backend="llvm", dynamic=True)
        for n in rows + rows[:1]:
            x = tg.tensor(np.linspace(-1, 1, 512 * n).reshape(n, 512), requires_grad=True)
            xe = tg.tensor(x.detach().numpy(), requires_grad=True)
            f(xe).backward()
            for _ in range(4):
                c(x).backward()
                np.testing.assert_allclose(x.grad.numpy(), xe.grad.numpy(), rtol=1e-9, atol=1e-12)
                x.grad = None
        assert asked and all(not e["guards"] for e in c.stats()["dynamic"])
    finally:
        mp.undo()
