"""The classes of problems `python -m tracegrad fuzz --sizes` found, each over generated size sequences
(0 and 1 among them): a function compiled once with dynamic=True and once with the default agrees with
eager at every size — values, gradients, and the error where eager raises one — and no symbolic compile
was lost (stats()["symbolic_failures"] stays empty: none fell back to compiling per size)."""
import re
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tracegrad as tg

SETTINGS = settings(max_examples=5, deadline=None, suppress_health_check=list(HealthCheck))
SIZES = st.lists(st.sampled_from([0, 1, 2, 3, 5, 9]), min_size=3, max_size=6)


def _run(f, arrays):
    """(outputs then gradients as arrays) or the error's type."""
    ts = [tg.tensor(a, requires_grad=True) for a in arrays]
    try:
        out = f(*ts)
        outs = list(out) if isinstance(out, tuple) else [out]
        weights = [tg.tensor(1.0 + np.arange(o.numel(), dtype=np.float64).reshape(o.shape)) for o in outs]
        sum((o * w).sum() for o, w in zip(outs, weights)).backward()
    except (RuntimeError, IndexError, ValueError) as e:      # the error is compared with eager's
        return type(e)
    return [o.detach().numpy() for o in outs] + [t.grad.numpy() if t.grad is not None else None for t in ts]


def agree(fn, shapes_seq, backend="llvm"):
    """fn compiled (dynamic=True and the default) == eager at each shape list of shapes_seq."""
    rng, ran = np.random.default_rng(0), 0
    compiled = [tg.compile(fn, dynamic=True, backend=backend), tg.compile(fn, backend=backend)]
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)        # a lost symbolic compile warns
        for shapes in shapes_seq:
            arrays = [rng.standard_normal(s) for s in shapes]
            want = _run(fn, arrays)
            ran += not isinstance(want, type)
            for f in compiled:
                got = _run(f, arrays)
                if isinstance(want, type):
                    assert got is want, (shapes, got, want)
                    continue
                assert not isinstance(got, type), (shapes, got)
                for g, w in zip(got, want):
                    assert (g is None) == (w is None), shapes
                    if w is not None:
                        assert g.shape == w.shape, (shapes, g.shape, w.shape)
                        np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-9, err_msg=str(shapes))
    assert ran >= 2, "eager raised at (nearly) every size: the sequence tests nothing"
    for f in compiled:
        assert f.stats()["symbolic_failures"] == [], f.stats()["symbolic_failures"]


@SETTINGS
@given(ms=SIZES)
def test_a_gradient_no_kernel_writes_takes_its_sizes_at_the_call(ms):
    """The gradient of x (0, 0, M) is empty, written by no kernel, yet its shape names M, which no input
    of the backward carries (was: KeyError 'symbol S0 is not bound' at the second size)."""
    def f(x, y):
        return x.sum(2) @ y, y * 2.0
    agree(f, [[(0, 0, m), (0,)] for m in [2, 4, *ms]])


@SETTINGS
@given(ns=SIZES)
def test_an_error_at_one_size_keeps_the_symbolic_compile(ns):
    """At a size where eager raises (max over an empty dim, an index past the end), the compiled call
    raises the same error, and the other sizes still share the symbolic compile."""
    def f(x):
        return x.max(dim=1).values * 2.0 + x[0, 0], x.sum(0)
    agree(f, [[(3, 4)], [(2, 0)], [(5, 2)]] + [[(n, m)] for n, m in zip(ns, reversed(ns))])


@pytest.mark.parametrize("backend", ["interpret"])
def test_the_interpret_backend_agrees_too(backend):
    agree(lambda x, y: (x.sum(2) @ y) * 3.0, [[(0, 0, m), (0,)] for m in (2, 5, 1, 0, 5)], backend)


@SETTINGS
@given(ns=SIZES)
def test_calls_under_jvp_take_symbolic_sizes(ns):
    """Calls under tg.jvp trace the function with its tangents (a twin compiled function): with
    dynamic=True its sizes are symbolic too, so sizes of one 0/1/>1 class share one trace (was: a trace
    per size, the twin compiled with dynamic=False). Values and tangents == eager's."""
    def f(x, w):
        return (x @ w).tanh() * 2.0 + x.sum(1, keepdim=True)
    g = tg.compile(f, dynamic=True)
    rng = np.random.default_rng(1)
    w = tg.tensor(rng.standard_normal((4, 3)))
    seq = [5, 7, *[n for n in ns if n > 1]]
    for n in seq:
        x, t = (tg.tensor(rng.standard_normal((n, 4))) for _ in range(2))
        tw = tg.tensor(rng.standard_normal((4, 3)))
        want, got = tg.jvp(f, (x, w), (t, tw)), tg.jvp(g, (x, w), (t, tw))
        for a, b in zip(got, want):
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-9, atol=1e-12)
    twin = g._forward_mode().stats()
    assert twin["traces"] == 1 and twin["symbolic_failures"] == [], twin


@SETTINGS
@given(ns=SIZES)
def test_a_retrace_names_the_signature_change_not_the_sizes(ns):
    """With dynamic=True, a call whose arguments alias each other differently (or stop requiring grad)
    is a new signature: its retrace reason names that change (was: "x: dim 0 became symbolic B (5)",
    as if sizes had changed); a global replaced between sizes drops the entries, and a later retrace
    for sizes whose entry it dropped says so. Values == eager at every call."""
    G = {}

    def f(a, b):
        return (a * G["w"]).sum(0) + b.sum(0)
    g = tg.compile(f, dynamic=True)
    rng = np.random.default_rng(2)
    for n in [5, 6, *ns]:
        a = tg.tensor(rng.standard_normal((n, 3)), requires_grad=True)
        G["w"] = tg.tensor(rng.standard_normal(3))
        for args in [(a, a.detach() * 1.0), (a, a.detach()), (a, a)]:
            want, got = f(*args), g(*args)
            np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-12)
    reasons = g.stats()["retrace_reasons"]
    assert any("same storage" in r or "requires_grad" in r for r in reasons), reasons
    assert not any(re.search(r"became symbolic \w+ \(\d+\)$", r) for r in reasons), reasons
    shape_only = [r for r in reasons if "became symbolic" in r]
    assert all(any("dropped" in s or "replaced" in s for s in reasons) for _ in shape_only), reasons
    assert g.stats()["symbolic_failures"] == []


@SETTINGS
@given(ns=SIZES)
def test_an_index_error_never_outlives_its_call(ns):
    """A gather past the end (eager: IndexError) in a call whose later step raises too: the call raises
    eager's IndexError, and the next call at a size where the index is in range runs (was: the kernel's
    out-of-range record outlived the failed call and the next call raised it, stale)."""
    def f(x):
        v = x[tg.arange(3).reshape(3, 1), tg.tensor([[0, 0], [0, -1], [-1, 0]])]
        (g,) = tg.autograd.grad(v.sum(), [x], create_graph=True)
        return v.sum() + (g * g).sum()
    agree(f, [[(n, 1, n)] for n in [3, 1, 5, *ns]])


@SETTINGS
@given(ns=SIZES)
def test_an_output_that_views_an_input_takes_the_calls_sizes(ns):
    """An output that is a view of an input is rebuilt at the call by replaying the views: their
    attributes (a reshape to (B, 1)) bound to the call's sizes (was: RuntimeError 'a decision on
    symbolic sizes (B == 17) outside any ShapeEnv' at the first call)."""
    def f(x, y):
        return x[..., None], x.reshape(-1, 1)[1:], y.t(), x * 2.0
    for backend in ("llvm", "interpret"):
        agree(f, [[(n,), (n, 3)] for n in [17, 4, *ns]], backend)


@SETTINGS
@given(ns=SIZES)
def test_a_gather_past_the_end_raises_eagers_index_error(ns):
    """x[rows, cols] with a column past the end at size 1: the compiled call raises IndexError as eager
    does (was: ValueError 'invalid entry in coordinates array' from the gradient's scatter-add)."""
    def f(x):
        return x.unsqueeze(0)[tg.tensor([0, 0, 0, 0]), tg.tensor([0, 1, 0, 1])] * 2.0
    agree(f, [[(n,)] for n in [1, 3, 4, *ns]])
