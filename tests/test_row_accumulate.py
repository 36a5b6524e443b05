"""Reductions over all the outer axes of a neighbouring row kernel accumulate inside it while its rows
stream by (fusion's merge_accumulations): a layer norm's loss and its weight/bias gradients read the
inputs once with the rows; values only the row kernel reads stay in the row (keep_in_rows). Read from `stage="kernels"`; compiled == interpret == NumPy on odd sizes,
float32 and float64, one chunk or many (threads keep private partials).

TRACEGRAD_ACCUMULATE_EXAMPLES raises the hypothesis example count (default 15, for CI)."""
import os
import re

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tracegrad as tg

EXAMPLES = int(os.environ.get("TRACEGRAD_ACCUMULATE_EXAMPLES", "15"))


def kernels(fn, *tensors):
    return [line for line in tg.compile(fn).ir(*tensors, stage="kernels").splitlines() if re.match(r"\s+k\d+ ", line)]


def layernorm_loss(x, w, b, g):
    mean = x.mean(axis=1, keepdims=True)
    d = x - mean
    var = (d * d).mean(axis=1, keepdims=True)
    return ((d / (var + 1e-5).sqrt() * w + b) * g).sum()


def test_layernorm_forward_and_backward_are_one_row_kernel_each():
    rng = np.random.default_rng(0)
    x, g = (tg.tensor(rng.standard_normal((37, 300)).astype(np.float32), requires_grad=n == "x") for n in "xg")
    w, b = (tg.tensor(rng.standard_normal(300).astype(np.float32), requires_grad=True) for _ in "wb")
    text = tg.compile(layernorm_loss).ir(x, w, b, g, stage="kernels")
    blocks = text.split("kernels ")[1:]
    assert [block.splitlines()[0].rsplit(": ", 1)[1] for block in blocks] == ["1", "1"], text
    assert "[reduce_acc]" not in text and "f32[1,300], f32[1,300]" in blocks[1], text


def test_values_only_the_row_kernel_reads_are_not_written():
    """A layer norm backward's normalized gradient (shared by two later phases) stays in the row."""
    rng = np.random.default_rng(0)
    x = tg.tensor(rng.standard_normal((37, 300)).astype(np.float32), requires_grad=True)
    w, b = (tg.tensor(rng.standard_normal(300).astype(np.float32), requires_grad=True) for _ in "wb")
    g = tg.tensor(rng.standard_normal((37, 300)).astype(np.float32))
    backward = tg.compile(layernorm_loss).ir(x, w, b, g, stage="kernels").split("kernels ")[2]
    assert backward.count("f32[37,300]") == 1, backward                 # dx alone

    def shared(x, w):                        # a value of more than 8 ops read by two later phases
        y = ((x - x.mean(-1, keepdims=True)) * w + 1.0).tanh() * 2.0 - 0.5
        return y * y.sum(-1, keepdims=True) + y.exp()
    xs, ws = tg.tensor(rng.standard_normal((9, 70)).astype(np.float32)), tg.tensor(rng.standard_normal(70).astype(np.float32))
    (line,) = kernels(shared, xs, ws)
    assert line.count("f32[9,70]") == 1, line
    xn, wn = xs.numpy().astype(np.float64), ws.numpy().astype(np.float64)
    y = np.tanh((xn - xn.mean(-1, keepdims=True)) * wn + 1.0) * 2.0 - 0.5
    np.testing.assert_allclose(tg.compile(shared)(xs, ws).numpy(), y * y.sum(-1, keepdims=True) + np.exp(y), rtol=2e-5)


PROGRAMS = {
    # (fn, numpy oracle): a row kernel and a reduction over its rows side by side
    "centered_col_sums": (lambda x, w: ((x - x.mean(-1, keepdims=True)) * w).sum(0),
                          lambda x, w: ((x - x.mean(-1, keepdims=True)) * w).sum(0)),
    "row_norm_loss": (lambda x, w: (x / (x * x).sum(-1, keepdims=True).add(1.0).sqrt() * w).sum(),
                      lambda x, w: (x / np.sqrt((x * x).sum(-1, keepdims=True) + 1.0) * w).sum()),
    "row_value_kept_in_rows": (lambda x, w: (lambda y: y * y.sum(-1, keepdims=True) + y.exp())(
        ((x - x.mean(-1, keepdims=True)) * w + 1.0).tanh() * 2.0 - 0.5),
        lambda x, w: (lambda y: y * y.sum(-1, keepdims=True) + np.exp(y))(
        np.tanh((x - x.mean(-1, keepdims=True)) * w + 1.0) * 2.0 - 0.5)),
    # a sum over the rows is complete only after the last row: a later row phase reading it must not
    # join the row kernel (it did for a moment, bdf5547: wrong values, no error)
    "a_sum_over_rows_read_by_another": (
        lambda x, w: (lambda d: (d * (d * w).sum(-2, keepdims=True)).sum())(x - x.mean(-1, keepdims=True)),
        lambda x, w: (lambda d: (d * (d * w).sum(-2, keepdims=True)).sum())(x - x.mean(-1, keepdims=True))),
    "col_max_beside_rows": (lambda x, w: (x * w).amax(0) + (x - x.amax(-1, keepdims=True)).exp().sum(-1).sum(),
                            lambda x, w: (x * w).max(0) + np.exp(x - x.max(-1, keepdims=True)).sum(-1).sum()),
}


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=st.sampled_from([1, 2, 3, 17, 129, 1100]), cols=st.sampled_from([1, 5, 33, 300, 1025]),
       lead=st.sampled_from([(), (2,)]), name=st.sampled_from(sorted(PROGRAMS)),
       dtype=st.sampled_from([np.float32, np.float64]), seed=st.integers(0, 2 ** 16))
def test_compiled_matches_interpret_and_numpy(rows, cols, lead, name, dtype, seed):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(lead + (rows, cols)) + 0.5).astype(dtype)
    w = rng.standard_normal(cols).astype(dtype)
    fn, ref = PROGRAMS[name]
    want = ref(x.astype(np.float64), w.astype(np.float64))
    got = tg.compile(fn)(tg.tensor(x), tg.tensor(w)).numpy()
    oracle = tg.compile(fn, backend="interpret")(tg.tensor(x), tg.tensor(w)).numpy()
    scale = max(1.0, float(np.max(np.abs(want))))
    tol = 2e-5 if dtype == np.float32 else 1e-10
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * scale * np.sqrt(x.size))
    np.testing.assert_allclose(got, oracle, rtol=tol, atol=tol * scale * np.sqrt(x.size))


def test_layernorm_gradients_match_gradcheck_and_numpy():
    rng = np.random.default_rng(2)
    x = tg.tensor(rng.standard_normal((6, 40)), requires_grad=True)
    w = tg.tensor(rng.standard_normal(40), requires_grad=True)
    b = tg.tensor(rng.standard_normal(40), requires_grad=True)
    g = tg.tensor(rng.standard_normal((6, 40)))
    assert tg.gradcheck(tg.compile(layernorm_loss), (x, w, b, g))
    xs = tg.tensor(rng.standard_normal((1500, 700)).astype(np.float32), requires_grad=True)   # chunked
    ws, bs = (tg.tensor(rng.standard_normal(700).astype(np.float32), requires_grad=True) for _ in "wb")
    gs = tg.tensor(rng.standard_normal((1500, 700)).astype(np.float32))
    tg.compile(layernorm_loss)(xs, ws, bs, gs).backward()
    xn, gn = xs.detach().numpy().astype(np.float64), gs.numpy().astype(np.float64)
    xhat = (xn - xn.mean(1, keepdims=True)) / np.sqrt(xn.var(1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(ws.grad.numpy(), (gn * xhat).sum(0), rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(bs.grad.numpy(), gn.sum(0), rtol=1e-4, atol=1e-3)


@settings(max_examples=EXAMPLES, deadline=None)
@given(n=st.sampled_from([1, 2, 17, 1000]), dtype=st.sampled_from([np.float32, np.float64]), seed=st.integers(0, 2 ** 16))
def test_a_vector_reduction_read_by_the_next_one(n, dtype, seed):
    """A 1-D map, its max (a sum over the map's only axis: its 'rows'), then a sum that reads the max:
    the max must be complete before the sum reads it (a logsumexp of a clamped vector)."""
    def fn(x):
        y = x.clamp(-0.5, 0.5)
        m = y.amax(0, keepdims=True)
        return (y - m).exp().sum(0, keepdims=True).log() + m
    x = (np.random.default_rng(seed).standard_normal(n) * 2).astype(dtype)
    y = np.clip(x.astype(np.float64), -0.5, 0.5)
    want = np.log(np.exp(y - y.max()).sum(keepdims=True)) + y.max()
    got = tg.compile(fn)(tg.tensor(x, requires_grad=True)).detach().numpy()   # the clamp's masks saved: a map kernel
    np.testing.assert_allclose(got, want, rtol=1e-5 if dtype == np.float32 else 1e-12)
