"""Sums of matrix products joined into one product (ir/passes/product_sums.py), sums of unslices that
tile an axis as a cat (ir/passes/tiling.py), and the fusion rules for products' operands (a cat only
products read is written in its own layout; a transposed right operand read by several products is written once).
Values against NumPy in float64, gradients against central differences, and the IR or kernels each
rule promises (one matmul, a cat and no unslice, one transposed copy), including an LSTM's recurrent
weight gradient."""
import re

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tracegrad as tg

SETTINGS = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _ops(f, *args, stage="forward"):
    """The op of each node line of a stage's IR text."""
    out = []
    for line in f.ir(*args, stage=stage).splitlines():
        if " = " in line and line.strip().startswith("%"):
            out.append(line.split(" = ", 1)[1].split("(", 1)[0].strip())
    return out


def _kernel_lines(f, *args):
    return [ln.strip() for ln in f.ir(*args, stage="kernels").splitlines() if re.match(r"k\d", ln.strip())]


@SETTINGS
@given(m=st.integers(1, 9), n=st.integers(1, 9), ks=st.lists(st.integers(1, 12), min_size=2, max_size=6),
       left_t=st.booleans(), right_t=st.booleans(), extra=st.booleans(), seed=st.integers(0, 2 ** 16))
def test_joined_sum_matches_numpy_and_is_one_product(m, n, ks, left_t, right_t, extra, seed):
    rng = np.random.default_rng(seed)
    # each term a_i @ b_i, a_i given as [K, M] (read transposed) or [M, K]; b_i as [N, K] or [K, N]
    a = [rng.standard_normal((k, m) if left_t else (m, k)) for k in ks]
    b = [rng.standard_normal((n, k) if right_t else (k, n)) for k in ks]
    c = rng.standard_normal((m, n))

    def f(c, *ab):
        out = c if extra else None
        for x, y in zip(ab[:len(ks)], ab[len(ks):]):
            p = (x.T if left_t else x) @ (y.T if right_t else y)
            out = p if out is None else out + p
        return out
    g = tg.compile(f)
    args = [tg.tensor(v) for v in [c] + a + b]
    want = (c if extra else 0) + sum((x.T if left_t else x) @ (y.T if right_t else y) for x, y in zip(a, b))
    np.testing.assert_allclose(g(*args).numpy(), want, rtol=1e-10, atol=1e-10)
    assert _ops(g, *args).count("matmul") == 1
    assert tg.gradcheck(g, [tg.tensor(v, requires_grad=True) for v in [c] + a + b])


def test_products_read_elsewhere_or_large_stay_apart():
    """A term another value reads, and a term of inner size over MAX_INNER, keep their own product."""
    from tracegrad.ir.passes.product_sums import MAX_INNER
    rng = np.random.default_rng(1)
    x, y, z, w = (tg.tensor(rng.standard_normal(s)) for s in ((4, 3), (3, 5), (4, 3), (3, 5)))
    g = tg.compile(lambda x, y, z, w: ((x @ y) + (z @ w), (x @ y).sum()))
    out, s = g(x, y, z, w)
    np.testing.assert_allclose(out.numpy(), x.numpy() @ y.numpy() + z.numpy() @ w.numpy(), rtol=1e-12)
    assert _ops(g, x, y, z, w).count("matmul") == 2          # x @ y is read twice (CSE): not joined
    big = [tg.tensor(rng.standard_normal(s)) for s in ((2, MAX_INNER + 1), (MAX_INNER + 1, 2))] * 2
    h = tg.compile(lambda a, b, c, d: a @ b + (c * 2) @ d)
    np.testing.assert_allclose(h(*big).numpy(), 3 * big[0].numpy() @ big[1].numpy(), rtol=1e-10)
    assert _ops(h, *big).count("matmul") == 2


@SETTINGS
@given(widths=st.lists(st.integers(1, 5), min_size=2, max_size=5), rows=st.integers(1, 4), axis=st.integers(0, 1),
       seed=st.integers(0, 2 ** 16))
def test_gradient_of_chunks_is_a_cat(widths, rows, axis, seed):
    """The gradient of a value's slices that tile an axis (chunk, split, per-step indexing) is a cat of
    the pieces' gradients, not a sum of unslices; values == NumPy."""
    rng = np.random.default_rng(seed)
    shape = [rows, rows]
    shape[axis] = sum(widths)
    x = rng.standard_normal(shape)

    def f(x):
        xt = x.detach().requires_grad_()
        pieces, loss = tg.split(xt, widths, axis), 0
        for k, p in enumerate(pieces):
            loss = loss + (p.tanh() * float(k + 1)).sum()
        loss.backward()
        return xt.grad
    g = tg.compile(f)
    got = g(tg.tensor(x)).numpy()
    scale = np.concatenate([np.full(tuple(w if d == axis else s for d, s in enumerate(shape)), k + 1.0)
                            for k, w in enumerate(widths)], axis)
    np.testing.assert_allclose(got, scale * (1 - np.tanh(x) ** 2), rtol=1e-12)
    ops = _ops(g, tg.tensor(x))
    assert "unslice" not in ops and "cat" in ops


def test_overlapping_or_partial_unslices_stay_sums():
    """Slices that overlap, or leave part of the axis uncovered, keep the sum of unslices."""
    x = tg.tensor(np.arange(12.0).reshape(2, 6))

    def f(x):
        xt = x.detach().requires_grad_()
        ((xt[:, 0:4] * 2).sum() + (xt[:, 2:5] * 3).sum()).backward()
        return xt.grad
    g = tg.compile(f)
    np.testing.assert_array_equal(g(x).numpy(), [[2, 2, 5, 5, 3, 0]] * 2)
    assert "unslice" in _ops(g, x)


def test_shared_transposed_weight_written_once():
    """x1 @ w.T and x2 @ w.T: one kernel writes w.T, both products read it (values == NumPy)."""
    rng = np.random.default_rng(2)
    x1, x2 = (rng.standard_normal((3, 16)).astype(np.float32) for _ in range(2))
    w = rng.standard_normal((24, 16)).astype(np.float32)
    g = tg.compile(lambda a, b, w: (a @ w.T) * (b @ w.T).tanh())
    args = [tg.from_numpy(v) for v in (x1, x2, w)]
    want = (x1.astype(np.float64) @ w.T) * np.tanh(x2.astype(np.float64) @ w.T)
    np.testing.assert_allclose(g(*args).numpy(), want, rtol=1e-4, atol=1e-4)
    copies = [ln for ln in _kernel_lines(g, *args) if "space=16x24" in ln and "[loop]" in ln]
    assert len(copies) == 1
    one = tg.compile(lambda a, w: a @ w.T)          # read once: BLAS reads it by its transpose flag
    assert [ln for ln in _kernel_lines(one, args[0], args[2]) if "[loop]" in ln] == []


def test_cat_read_transposed_by_a_product_is_written_in_its_own_layout():
    rng = np.random.default_rng(4)
    parts = [rng.standard_normal((3, 5)).astype(np.float32) for _ in range(4)]
    w = rng.standard_normal((12, 2)).astype(np.float32)
    g = tg.compile(lambda a, b, c, d, w: tg.cat([a, b, c, d], 0).T @ w)
    args = [tg.from_numpy(v) for v in parts + [w]]
    np.testing.assert_allclose(g(*args).numpy(), np.concatenate(parts, 0).T.astype(np.float64) @ w,
                               rtol=1e-4, atol=1e-4)
    lines = _kernel_lines(g, *args)
    assert len(lines) == 2 and "space=12x5" in lines[0] and "[extern]" in lines[1]


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seq=st.integers(2, 4), batch=st.integers(1, 3), hidden=st.integers(1, 3), layers=st.integers(1, 2),
       batch_first=st.booleans(), bidirectional=st.booleans(), seed=st.integers(0, 2 ** 16))
def test_lstm_step_gradients_compiled(seq, batch, hidden, layers, batch_first, bidirectional, seed):
    """A compiled LSTM's gradients (the recurrent weights' through joined products) == central
    differences in float64, and == the eager gradients."""
    tg.manual_seed(seed)
    m = tg.nn.LSTM(2, hidden, num_layers=layers, batch_first=batch_first, bidirectional=bidirectional,
                   dtype=tg.float64)
    x = tg.randn(*((batch, seq, 2) if batch_first else (seq, batch, 2)), dtype=tg.float64, requires_grad=True)
    weights = list(m.parameters())

    def f(x, *ws):
        out, (h, c) = m(x)
        return (out * out).sum() + (h * c).sum()
    g = tg.compile(f)
    assert tg.gradcheck(g, (x, *weights))
    grads = []
    for fn in (f, g):
        for p in [x] + weights:
            p.grad = None
        fn(x, *weights).backward()
        grads.append([p.grad.numpy() for p in [x] + weights])
    for a, b in zip(*grads):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


def test_lstm_recurrent_weight_gradient_is_one_product():
    """Compiled, the backward's products per LSTM layer are one per step (the hidden state's gradient)
    plus a constant number: the recurrent weight's gradient is one product over all steps."""
    counts = []
    for seq in (4, 8):
        tg.manual_seed(0)
        m = tg.nn.LSTM(5, 8, num_layers=2)
        x = tg.randn(seq, 3, 5)

        def step(x):
            out, _ = m(x)
            (out * out).sum().backward()
            return [p.grad for p in m.parameters()]
        g = tg.compile(step)
        g(x)
        counts.append(_ops(g, x).count("matmul"))
    assert counts[1] - counts[0] == 2 * 4 * 2      # per layer and step: h @ W_hh.T and its gradient
