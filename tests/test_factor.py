"""Factored row sums (ir/passes/factor.py): a sum that reads another reduction only through a factor
constant along its axes (sum(a / std + dvar * xc) in a layer norm backward) is rewritten so that it
no longer waits for that reduction, and the row kernel needs fewer walks over each row.

Checked: the walks of a layer norm's forward joined with its backward (stage="kernels"); generated
programs whose sums hold products and quotients by broadcast statistics, negations and sums of such
terms (odd sizes, float32 and float64, sums over the last, the first and two axes), compiled ==
eager == interpret, forward and gradients, and the rewrite fires on each; gradcheck in float64; NaN
and inf where eager puts them when the factor is inf or 0.

TRACEGRAD_FACTOR_EXAMPLES raises the hypothesis example count (default 12, for CI)."""
import os
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tracegrad as tg
import tracegrad.jit.joined as joined
from tracegrad.ir.passes import factor_sums
from tracegrad.ops import PRIMS
from test_row_walks import _walks, layernorm_loss

EXAMPLES = int(os.environ.get("TRACEGRAD_FACTOR_EXAMPLES", "12"))


def _depth(graph):
    """The longest chain of reductions to any output of `graph`."""
    d = {}
    for n in graph.nodes:
        d[id(n.out)] = max((d.get(id(i), 0) for i in n.inputs), default=0) + \
            (n.op != "const" and PRIMS[n.op].kind == "reduction")
    return max(d.get(id(v), 0) for v in graph.outputs)


def test_layernorm_forward_with_gradient_is_three_walks(monkeypatch):
    """Joined (jit/joined.py), a layer norm's loss and gradients were six walks over each row (mean;
    var; loss, dw, db and the dvar sum; the dmean sum, which read dvar; dx). With dvar factored out
    of the dmean sum and 1/std out of both, every backward row sum reads only the row and its mean:
    {mean, db}, {var, the backward row sums}, {loss, dw, dx}."""
    monkeypatch.setattr(joined, "JOIN_MIN_BYTES", 0)
    rng = np.random.default_rng(0)
    x = tg.tensor(rng.standard_normal((37, 301)).astype(np.float32), requires_grad=True)
    w, b = (tg.tensor(rng.standard_normal(301).astype(np.float32), requires_grad=True) for _ in "wb")
    g = tg.tensor(rng.standard_normal((37, 301)).astype(np.float32))
    f = tg.compile(layernorm_loss)
    for _ in range(joined.JOIN_AFTER + 1):
        for t in (x, w, b):
            t.grad = None
        f(x, w, b, g).backward()
    for t in (x, w, b):
        t.grad = None
    text = f.ir(x, w, b, g, stage="kernels")
    section = text.split("forward with gradient")[1]
    (line,) = [ln for ln in section.splitlines() if re.match(r"\s+k\d+ ", ln)]
    walks = _walks(line)
    assert len(walks) == 3, line
    phases = sorted(p for w in walks for p in w)
    assert phases == list(range(len(phases))), line


def _stats(x, axes):
    m = x.mean(axis=axes, keepdims=True)
    v = ((x - m) * (x - m)).mean(axis=axes, keepdims=True)
    return m, v


FACTORS = {       # statistics constant along the summed axes, deeper than the terms they scale
    "std": lambda x, y, a: (_stats(x, a)[1] + 1e-3).sqrt(),
    "var_plus": lambda x, y, a: _stats(x, a)[1] + 0.5,
    "dot": lambda x, y, a: ((x - _stats(x, a)[0]) * y).sum(axis=a, keepdims=True),
}
TERMS = {         # the values they scale: the row itself, centered, products
    "x": lambda x, y, m: x,
    "xy": lambda x, y, m: x * y,
    "centered": lambda x, y, m: x - m,
    "y": lambda x, y, m: y,
}


def _program(axes, terms):
    """sum over `axes` of a sum of +-(t * s), +-(t / s), -(t) terms, then used elementwise."""
    def f(x, y):
        m = x.mean(axis=axes, keepdims=True)
        body = None
        for op, tname, fname, sign in terms:
            t, s = TERMS[tname](x, y, m), FACTORS[fname](x, y, axes)
            part = t * s if op == "mul" else s * t if op == "rmul" else t / s
            part = -part if sign else part
            body = part if body is None else body + part if len(terms) % 2 else body - part
        r = body.sum(axis=axes, keepdims=True)
        return (r * x + y).sum() + r.sum()
    return f


AXES = {2: [(1,), (0,)], 3: [(2,), (0, 2), (0,)]}
SIZES = [1, 2, 3, 7, 17, 33]


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), dtype=st.sampled_from([np.float32, np.float64]), seed=st.integers(0, 2 ** 16))
def test_factored_sums_equal_eager_and_interpret(data, dtype, seed):
    rank = data.draw(st.sampled_from([2, 3]))
    shape = tuple(data.draw(st.sampled_from(SIZES)) for _ in range(rank))
    axes = data.draw(st.sampled_from(AXES[rank]))
    terms = data.draw(st.lists(st.tuples(st.sampled_from(["mul", "rmul", "div"]), st.sampled_from(sorted(TERMS)),
                                         st.sampled_from(sorted(FACTORS)), st.booleans()), min_size=1, max_size=3))
    terms = [(op if fname != "dot" or op != "div" else "mul", t, fname, sign) for op, t, fname, sign in terms]
    fn = _program(axes, terms)
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal(shape).astype(dtype) for _ in "xy"]

    def run(f):
        ts = [tg.tensor(a, requires_grad=True) for a in arrays]
        out = f(*ts)
        out.backward()
        return [out.detach().numpy()] + [t.grad.numpy() for t in ts]
    want = run(fn)
    cf = tg.compile(fn)
    got, ref = run(cf), run(tg.compile(fn, backend="interpret"))
    scale = max(np.abs(w).max() for w in want) + 1
    tol = dict(rtol=1e-3, atol=1e-4 * scale) if dtype == np.float32 else dict(rtol=1e-9, atol=1e-10 * scale)
    for g, r, w, what in zip(got, ref, want, ["value", "grad x", "grad y"]):
        np.testing.assert_allclose(g, w, err_msg=f"llvm {what}", **tol)
        np.testing.assert_allclose(r, w, err_msg=f"interpret {what}", **tol)
    entry = next(iter(cf.cache.values()))
    assert _depth(entry.fwd) < _depth(entry.traced), "the rewrite did not fire"


def _rms_loss(x, w):
    return ((x / ((x * x).mean(axis=-1, keepdims=True) + 1e-6).sqrt() * w).tanh()).sum()


def _softmax_loss(x, w):
    return ((x * w).softmax(-1) * x).sum()


def _batch_norm_loss(x, w):        # NCHW, statistics over (0, 2, 3)
    m = x.mean(axis=(0, 2, 3), keepdims=True)
    v = ((x - m) * (x - m)).mean(axis=(0, 2, 3), keepdims=True)
    return (((x - m) / (v + 1e-5).sqrt() * w).tanh() * x).sum()


@pytest.mark.parametrize("name, fn, shapes", [
    ("layer_norm", lambda x, w: layernorm_loss(x, w, w * 0.5, x.tanh()), [(5, 7), (7,)]),
    ("rms_norm", _rms_loss, [(4, 9), (9,)]),
    ("softmax", _softmax_loss, [(3, 8), (8,)]),
    ("batch_norm", _batch_norm_loss, [(3, 2, 3, 5), (1, 2, 1, 1)]),
])
def test_gradcheck_float64(name, fn, shapes):
    rng = np.random.default_rng(len(name))
    ts = [tg.tensor(rng.standard_normal(s), requires_grad=True) for s in shapes]
    assert tg.gradcheck(tg.compile(fn), ts)


def test_centered_sums_are_not_split():
    """sum(x - mean) is the small residual of a centering: splitting it into sum(x) - n * mean would
    lose it to cancellation (var's refined mean reads it), so the graph keeps it."""
    f = tg.compile(lambda x: x.var(1, correction=0))
    x = tg.tensor(np.full((2, 5), 0.3))
    assert not f(x).numpy().any()
    text = f.ir(x, stage="forward")
    assert re.search(r"= sub\(%x, %\d+\)", text) and text.count("sum(") == 3, text


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", ["inf_factor", "zero_divisor"])
def test_nan_and_inf_where_eager_puts_them(case, dtype):
    """sum_j(s * v_j) for s = inf is NaN when a v_j is 0 or two have opposite signs, and so is
    sum_j(v_j / s) for s = 0; s * sum(v) alone would say +-inf. The guard keeps eager's answer."""
    v = np.array([[1.0, 0.0, 2.0], [1.0, -1.0, 3.0], [2.0, 3.0, 4.0], [-1.0, -2.0, -0.5]], dtype)
    huge = 1e30 if dtype == np.float32 else 1e200                 # squared: inf
    big = np.array([[huge, 0.0, 1.0], [huge, 2.0, 1.0], [1.0, huge, 2.0], [1.0, 1.0, 1.0]], dtype)

    def fn(v, big):
        if case == "inf_factor":
            return (v * (big * big).sum(axis=1, keepdims=True)).sum(axis=1)     # inf in three rows
        return (v / (big * 0.0).sum(axis=1, keepdims=True)).sum(axis=1)      # a row sum of zeros
    with np.errstate(all="ignore"):
        want = fn(tg.tensor(v), tg.tensor(big)).numpy()
        got = tg.compile(fn)(tg.tensor(v), tg.tensor(big)).numpy()
    for name, mask in [("NaN", np.isnan), ("+inf", np.isposinf), ("-inf", np.isneginf)]:
        assert np.array_equal(mask(got), mask(want)), f"{name} positions differ: {got} vs {want}"
    fin = np.isfinite(want)
    np.testing.assert_allclose(got[fin], want[fin], rtol=1e-5)


@settings(max_examples=20, deadline=None)
@given(s=st.sampled_from([-2.0, -1.0, -0.0, 0.0, 1.0]), u=st.lists(st.sampled_from([-0.0, 0.0, 1.5]), min_size=1,
                                                                  max_size=4))
def test_factored_sums_of_zeros_are_plus_zero_as_eagers(s, u):
    """A sum starting at +0.0 is never -0.0 (eager's, NumPy's); s * sum(u) may be (-1 * 0.0, or a
    constant -0.0 along the summed axis times its count): the rewrite adds +0.0. 1 / the sum tells."""
    x = tg.tensor(np.full((3, 1), s))
    y = tg.tensor(np.array(u))
    fns = [lambda x, y: 1.0 / (x * y).sum(1), lambda x, y: 1.0 / (x * y / 2.0).sum(1, keepdims=True),
           lambda x, y: 1.0 / (x.expand(3, len(u)) * 1.0).sum(1)]
    with np.errstate(divide="ignore", invalid="ignore"):
        for fn in fns:
            want, got = fn(x, y).numpy(), tg.compile(fn)(x, y).numpy()
            np.testing.assert_array_equal(got, want)


def test_rewrite_only_where_it_cuts_a_chain():
    """A factor no deeper than the values it scales stays inside the sum: nothing to gain."""
    from tracegrad.ir.graph import Graph
    from tracegrad.dtypes import float32
    g = Graph("t")
    x = g.add_input("x", (3, 4), float32)
    s = g.add_input("s", (3, 1), float32)
    p = g.add("mul", [x, s], {}, (3, 4), float32)
    g.outputs = [g.add("sum", [p], {"axis": (1,), "keepdims": True}, (3, 1), float32)]
    out = factor_sums(g)
    assert [n.op for n in out.nodes] == ["mul", "sum"]
