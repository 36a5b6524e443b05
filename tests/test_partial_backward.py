"""backward() from some of a compiled call's outputs computes what eager autograd computes: nothing
that only the other outputs lead to (no 0 * inf = nan from a zero cotangent), and no gradient at
all (.grad stays None) for an input only the other outputs depend on. The compiled node runs the
backward of the present cotangents alone (ir/passes/cotangents.py), built once per subset.

Found by the fuzzer (seed 49, programs 1, 144, 149, 194): `return x2.sum(), (x2.sum().abs() + 0.5)
** (sigmoid(x0) * x0) - x2` with x0 = inf, backward() of the first output gave nan gradients.

Oracle: eager tracegrad on the same inputs."""
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tracegrad as tg
from tracegrad.ir.graph import Graph
from tracegrad.ir.passes.cotangents import drop_cotangents

EXAMPLES = int(os.environ.get("TRACEGRAD_HYPOTHESIS_EXAMPLES", "8"))
F32 = tg.float32


def fuzz_repro(x0, x1, x2):
    v1 = x2.sum()
    v2 = (v1.abs() + 0.5) ** (tg.nn.functional.sigmoid(x0) * x0)
    return v1, v2 - x2


def grads_of(fn, values, which, backend=None):
    xs = [tg.tensor(v, requires_grad=True) for v in values]
    f = fn if backend is None else tg.compile(fn, backend=backend)
    outs = f(*xs)
    tg.autograd.backward([outs[k] for k in which])
    return [None if x.grad is None else x.grad.numpy().copy() for x in xs]


@pytest.mark.parametrize("backend", ["llvm", "interpret"])
def test_the_fuzzers_program(backend):
    values = [np.float32(np.inf), np.float32(0.3), np.float32(-1.5)]
    for which in ([0], [1], [0, 1]):
        want = grads_of(fuzz_repro, values, which)
        got = grads_of(fuzz_repro, values, which, backend)
        for g, w in zip(got, want):
            assert (g is None) == (w is None), (which, got, want)
            if g is not None:
                np.testing.assert_array_equal(g, w)


# each output combines some of the inputs; a special value (inf, nan, 0) makes a zero cotangent
# times a derivative nan
PIECES = [lambda a: a.exp(), lambda a: a.log(), lambda a: a.sqrt(), lambda a: a * a, lambda a: a.tanh(),
          lambda a: (a * 2.0).sum(dim=0, keepdim=True)]


def make(outputs):
    """outputs: [(piece, input index, input index)]: output k is piece(x_i) * x_j."""
    def fn(*xs):
        return tuple(PIECES[p](xs[i]) * xs[j] for p, i, j in outputs)
    return fn


@settings(max_examples=EXAMPLES, deadline=None)
@given(outputs=st.lists(st.tuples(st.integers(0, len(PIECES) - 1), st.integers(0, 2), st.integers(0, 2)),
                        min_size=2, max_size=3),
       which=st.sets(st.integers(0, 2), min_size=1),
       special=st.sampled_from([0.0, np.inf, -np.inf, np.nan, 1.5]),
       dtype=st.sampled_from([np.float32, np.float64]), backend=st.sampled_from(["llvm", "interpret"]))
def test_backward_from_some_outputs_matches_eager(outputs, which, special, dtype, backend):
    which = sorted(k for k in which if k < len(outputs))
    if not which:
        return
    rng = np.random.default_rng(len(outputs))
    values = [rng.uniform(0.5, 2.0, (2, 3)).astype(dtype) for _ in range(3)]
    values[0][0, 1] = special
    fn = make(outputs)
    with np.errstate(all="ignore"):
        want = grads_of(lambda *xs: tuple(o.sum() for o in fn(*xs)), values, which)
        got = grads_of(lambda *xs: tuple(o.sum() for o in fn(*xs)), values, which, backend)
    for g, w in zip(got, want):
        assert (g is None) == (w is None), (got, want)
        if g is not None:
            np.testing.assert_allclose(g, w, rtol=1e-5 if dtype == np.float32 else 1e-12, equal_nan=True)


def test_two_backwards_through_one_graph_add_up_and_each_subset_is_built_once():
    f = tg.compile(lambda a, b: ((a * b).sum(), (a.exp() * b).sum(), b.tanh().sum()))
    a = tg.tensor([0.5, -1.0, 2.0], requires_grad=True)
    b = tg.tensor([1.5, 0.25, -0.5], requires_grad=True)
    outs = f(a, b)
    outs[0].backward(retain_graph=True)
    assert b.grad is not None and a.grad is not None
    outs[2].backward(retain_graph=True)
    tg.autograd.backward([outs[1], outs[2]])
    ea, eb = tg.tensor(a.detach().numpy(), requires_grad=True), tg.tensor(b.detach().numpy(), requires_grad=True)
    (ea * eb).sum().backward()
    eb.tanh().sum().backward()
    ((ea.exp() * eb).sum() + eb.tanh().sum()).backward()
    np.testing.assert_allclose(a.grad.numpy(), ea.grad.numpy(), rtol=1e-6)
    np.testing.assert_allclose(b.grad.numpy(), eb.grad.numpy(), rtol=1e-6)
    (entry,) = f.cache.values()
    assert set(entry._partial) == {(True, False, False), (False, False, True), (False, True, True)}


def test_an_input_only_the_other_output_reads_keeps_grad_none():
    f = tg.compile(lambda a, b: (a.sin().sum(), (b * 3.0).sum()))
    a, b = tg.tensor([1.0, 2.0], requires_grad=True), tg.tensor([3.0, 4.0], requires_grad=True)
    f(a, b)[1].backward()
    assert a.grad is None
    np.testing.assert_array_equal(b.grad.numpy(), [3.0, 3.0])


def test_check_mode_runs_the_partial_backward_against_the_interpreter():
    f = tg.compile(fuzz_repro, check=True)
    xs = [tg.tensor(v, requires_grad=True) for v in (0.7, 0.3, -1.5)]
    f(*xs)[1].backward()
    want = grads_of(fuzz_repro, [np.float32(v) for v in (0.7, 0.3, -1.5)], [1])
    assert [x.grad is None for x in xs] == [w is None for w in want] == [False, True, False]
    for x, w in zip(xs, want):
        if w is not None:
            np.testing.assert_allclose(x.grad.numpy(), w, rtol=1e-5)


def test_drop_cotangents_removes_what_only_absent_cotangents_reach():
    g = Graph("b")
    g0, g1 = g.add_input("g0", (3,), F32), g.add_input("g1", (3,), F32)
    s = g.add_input("s", (3,), F32)
    p = g.add("mul", [g1, s], {}, (3,), F32)            # zero: g1 is absent
    q = g.add("add", [g0, p], {}, (3,), F32)            # g0 + 0: kept, reading a zero constant
    r = g.add("exp", [p], {}, (3,), F32)                # exp(0) is not zero: kept
    g.outputs = [q, p, r]
    out, absent = drop_cotangents(g, (True, False))
    assert absent == {1}
    assert [n.op for n in out.nodes].count("mul") == 0 and len(out.inputs) == 3
    from tracegrad.ir.interpret import run
    x = np.array([1.0, np.inf, 2.0], np.float32)
    res = run(out, x, x, np.array([np.inf, 1.0, 1.0], np.float32))
    np.testing.assert_array_equal(res[0], x)
    np.testing.assert_array_equal(res[2], np.ones(3, np.float32))


def test_sums_and_selects_with_a_literal_zero_are_zero_products_only_by_an_absent_factor():
    g = Graph("b")
    g0, g1 = g.add_input("g0", (2,), F32), g.add_input("g1", (2,), F32)
    c = g.add_input("c", (2,), tg.bool)
    z = g.add("const", [], {"value": 0.0}, (2,), F32)
    sel = g.add("where", [c, g1, z], {}, (2,), F32)        # where(c, absent, 0): zero
    tot = g.add("add", [sel, z], {}, (2,), F32)              # absent + 0: zero
    live = g.add("mul", [g0, z], {}, (2,), F32)              # present * literal 0: kept (0 * inf is nan)
    g.outputs = [tot, live]
    out, absent = drop_cotangents(g, (True, False))
    assert absent == {0}
    assert [n.op for n in out.nodes if n.op != "const"] == ["mul"]


def test_every_primitive_declaring_zero_maps_zeros_to_zero():
    """The table's `zero` field against each primitive's NumPy implementation on zeros."""
    from tracegrad.ops import PRIMS
    declared = {name: p.zero for name, p in PRIMS.items() if p.zero is not None}
    assert {"add", "sub", "mul", "div", "where", "sum", "matmul", "neg"} <= set(declared)
    z = np.zeros((2, 3), np.float32)
    x = np.full((2, 3), 1.5, np.float32)
    checks = {"add": lambda f: f(z, z), "sub": lambda f: f(z, z), "mul": lambda f: f(z, x), "div": lambda f: f(z, x),
              "where": lambda f: f(x > 0, z, z), "neg": lambda f: f(z), "cast": lambda f: f(z, dtype=tg.float64),
              "copy": lambda f: f(z), "sum": lambda f: f(z, axis=(0,), keepdims=False),
              "matmul": lambda f: f(z, x.T), "cat": lambda f: f(z, z, axis=0)}
    for name, check in checks.items():
        assert name in declared and not np.any(check(PRIMS[name].impl)), name
