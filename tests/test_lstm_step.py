"""What a compiled LSTM training step (bench W11) is made of: a slice of a cat or of an unslice reads
what lies under its box (ir/passes/slices.py: the stack of a layer's outputs of which the head reads
the last step, and that step's gradient placed on zeros, are never built), and a shared value with a
transcendental read on both sides of a matrix product is written once (fusion.py: the gate activations
are not computed again by the backward). Values against NumPy, gradients against central differences
in float64 (tg.gradcheck), structure from the IR text and the kernels."""
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tracegrad as tg
from tracegrad.jit.introspect import fused_kernels

SETTINGS = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FUNCS = {"tanh": (tg.tanh, np.tanh), "sigmoid": (tg.sigmoid, lambda v: 1 / (1 + np.exp(-v))),
         "exp": (tg.exp, np.exp)}


def _ops(text):
    return [line.split(" = ")[1].split("(")[0].split()[-1] for line in text.splitlines() if " = " in line]


@st.composite
def _cat_slices(draw):
    """Pieces of a cat along `axis` (sizes along it), the other axis' size, and a slice box along the
    cat's axis (start, stop) anywhere in it, often inside one piece."""
    sizes = draw(st.lists(st.integers(1, 4), min_size=2, max_size=4))
    axis, other = draw(st.integers(0, 1)), draw(st.integers(1, 3))
    total = sum(sizes)
    if draw(st.booleans()):                                  # inside piece k
        k = draw(st.integers(0, len(sizes) - 1))
        at = sum(sizes[:k])
        a = draw(st.integers(at, at + sizes[k] - 1))
        e = draw(st.integers(a + 1, at + sizes[k]))
    else:
        a = draw(st.integers(0, total - 1))
        e = draw(st.integers(a + 1, total))
    return sizes, axis, other, (a, e)


@SETTINGS
@given(case=_cat_slices(), seed=st.integers(0, 2 ** 16))
def test_slice_of_cat_reads_its_piece_values_and_gradients(case, seed):
    sizes, axis, other, (a, e) = case
    rng = np.random.default_rng(seed)
    shapes = [(s, other) if axis == 0 else (other, s) for s in sizes]
    arrays = [rng.standard_normal(s) for s in shapes]
    box = (slice(a, e), slice(None)) if axis == 0 else (slice(None), slice(a, e))
    w = rng.standard_normal(np.concatenate(arrays, axis)[box].shape)

    def f(*xs):
        return (tg.cat([x.tanh() for x in xs], axis)[box] * tg.tensor(w)).sum()
    xs = [tg.tensor(v, requires_grad=True) for v in arrays]
    compiled = tg.compile(f)
    want = (np.concatenate([np.tanh(v) for v in arrays], axis)[box] * w).sum()
    np.testing.assert_allclose(compiled(*xs).item(), want, rtol=1e-12)
    assert tg.gradcheck(compiled, xs)
    ends = np.cumsum([0] + sizes)
    inside = any(lo <= a and e <= hi for lo, hi in zip(ends, ends[1:]))
    fwd, bwd = compiled.ir(*xs, stage="forward"), compiled.ir(*xs, stage="backward")
    if inside:                  # no cat, and the gradient's zeros are built no larger than a piece
        whole = "[" + ",".join(map(str, np.concatenate(arrays, axis).shape)) + "]"
        assert "cat" not in _ops(fwd) and f"{whole} = unslice" not in bwd.replace("f64", ""), fwd + bwd


def test_stacked_steps_read_last_is_no_cat_and_gradient_is_the_step():
    """stack(steps)[-1] is the last step: no cat in the forward, no unslice in the backward, and the
    other steps' gradient slices are zeros (gradients against NumPy)."""
    rng = np.random.default_rng(3)
    vals = [rng.standard_normal((2, 3)) for _ in range(4)]

    def f(*xs):
        return (tg.stack([x.sigmoid() * 2 for x in xs])[-1] ** 2).sum()
    xs = [tg.tensor(v, requires_grad=True) for v in vals]
    compiled = tg.compile(f)
    loss = compiled(*xs)
    loss.backward()
    s = 1 / (1 + np.exp(-vals[-1]))
    np.testing.assert_allclose(loss.item(), ((2 * s) ** 2).sum(), rtol=1e-12)
    for x in xs[:-1]:
        assert x.grad is None or not np.any(x.grad.numpy())
    np.testing.assert_allclose(xs[-1].grad.numpy(), 8 * s * s * (1 - s), rtol=1e-12)
    assert "cat" not in _ops(compiled.ir(*xs, stage="forward"))
    assert "unslice" not in _ops(compiled.ir(*xs, stage="backward"))


@SETTINGS
@given(name=st.sampled_from(sorted(FUNCS)), rows=st.integers(1, 5), cols=st.integers(1, 6),
       seed=st.integers(0, 2 ** 16))
def test_transcendental_read_across_a_product_is_computed_once(name, rows, cols, seed):
    """a = fn(x) read before and after a matrix product (the one a step's gates feed, then the
    step's backward): values and gradients as NumPy's, and fn computed by one kernel only."""
    tg_fn, np_fn = FUNCS[name]
    rng = np.random.default_rng(seed)
    xv, wv = rng.standard_normal((rows, cols)) * 0.5, rng.standard_normal((cols, cols)) * 0.5

    def f(x, w):
        a = tg_fn(x)
        return ((a * 2) @ w * a).sum()
    x, w = tg.tensor(xv, requires_grad=True), tg.tensor(wv, requires_grad=True)
    compiled = tg.compile(f)
    a = np_fn(xv)
    np.testing.assert_allclose(compiled(x, w).item(), ((a * 2) @ wv * a).sum(), rtol=1e-12)
    assert tg.gradcheck(compiled, (x, w))
    with tg.no_grad():
        entry = compiled._entry_for((x, w), {})[0]
    ops = [op for _, _, ks in fused_kernels(entry) for k in ks for op in k.ops()]
    assert ops.count(name) == 1, ops


def test_lstm_step_backward_recomputes_no_gate():
    """A compiled LSTM training step: each extra time step adds its five transcendentals (three
    sigmoids, two tanh) to the forward's kernels and none to the backward's; and the step matches
    eager's loss and gradients (float64)."""
    counts, results = [], []
    for seq in (3, 6):
        tg.manual_seed(2)
        m = tg.nn.LSTM(4, 5)
        x = tg.randn(seq, 2, 4)

        def step(x):
            for p in m.parameters():
                p.grad = None
            loss = (m(x)[0][-1] ** 2).sum()
            loss.backward()
            return loss
        compiled = tg.compile(step)
        compiled(x)
        entry = compiled._entry_for((x,), {})[0]
        ops = [op for _, _, ks in fused_kernels(entry) for k in ks for op in k.ops()]
        counts.append(ops.count("sigmoid") + ops.count("tanh"))
        if seq == 6:
            got = [compiled(x).item()] + [p.grad.numpy().copy() for p in m.parameters()]
            want = [step(x).item()] + [p.grad.numpy().copy() for p in m.parameters()]
            for g, w in zip(got, want):
                np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-6)
    assert counts[1] - counts[0] == 3 * 5, counts
