"""The steady state of a function compiled with symbolic sizes (dynamic=True): a call with the sizes of
the call before binds nothing (backends/cpu/runtime.py keeps the sizes and each input's shape under them),
yet a hit is exactly as safe as the full check; and a size a guard pinned for one kernel is a constant
in every kernel of the program (ir/passes/sized.py's `settled`). Values against eager (NumPy) over size
sequences with 0 and 1, and the trace counts."""
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tracegrad as tg

RNG = np.random.default_rng(5)
SETTINGS = settings(max_examples=3, deadline=None, suppress_health_check=list(HealthCheck))
ROWS = st.lists(st.sampled_from([0, 1, 2, 3, 7, 16, 33]), min_size=3, max_size=8)


def _layer(x, w):
    y = (x - x.mean(axis=1, keepdims=True)) * w
    return (y * y).sum()


def _numpy_layer(x, w):
    """loss, dx, dw of _layer."""
    d = x - x.mean(axis=1, keepdims=True)
    y = d * w
    dy = 2 * y
    dd = dy * w
    return (y * y).sum(), dd - dd.mean(axis=1, keepdims=True), (dy * d).sum(axis=0)


@SETTINGS
@given(rows=ROWS)
def test_repeated_and_alternating_sizes_match_eager(rows):
    """Each batch size twice in a row (the second call takes the fast path) and sizes alternating (the
    program's sizes change at every call): loss and gradients as NumPy's, one trace (two from 1 row)."""
    f = tg.compile(_layer, dynamic=True)
    w = RNG.standard_normal(6).astype(np.float32)
    for b in [n for r in rows for n in (r, r)] + rows[::-1]:
        x = RNG.standard_normal((b, 6)).astype(np.float32)
        xt, wt = tg.tensor(x, requires_grad=True), tg.tensor(w, requires_grad=True)
        loss = f(xt, wt)
        loss.backward()
        want = _numpy_layer(x.astype(np.float64), w.astype(np.float64))
        for got, ref in zip((loss, xt.grad, wt.grad), want):
            np.testing.assert_allclose(got.detach().numpy(), ref, rtol=1e-4, atol=1e-4)
    # one trace, or two where the first batch has 1 row (a size-1 dim stays fixed, dynamic=True)
    assert f.stats()["traces"] == 1 + (rows[0] == 1), f.stats()


def _program(f, *leaves):
    """The forward program of compiled f's entry of the arguments' sizes, and that entry."""
    (entry,) = [e for es in f.symbolic.values() for e in es if e.shape_failure(list(leaves)) is None]
    got = entry.program_for(list(leaves))
    return got.programs[0], got


def test_a_hit_on_the_same_sizes_still_checks_each_new_array():
    """The program run of an entry (its sizes the default) refuses an array of another shape, also
    right after a call with the same sizes (the fast path), and also one whose first dim, which binds
    the symbol, disagrees with the sizes."""
    f = tg.compile(lambda x: (x * 2.0).sum(axis=1), dynamic=True)
    x = tg.tensor(RNG.standard_normal((5, 3)).astype(np.float32))
    np.testing.assert_allclose(f(x).numpy(), x.numpy().sum(1) * 2, rtol=1e-5)
    prog, entry = _program(f, x)
    run = entry.run_fwd
    np.testing.assert_allclose(run([x.numpy()])[0], x.numpy().sum(1) * 2, rtol=1e-5)
    for bad in ((5, 4), (6, 3), (3,)):
        with pytest.raises(ValueError, match="compiled kernel input"):
            run([np.ones(bad, np.float32)])
    np.testing.assert_allclose(run([x.numpy()])[0], x.numpy().sum(1) * 2, rtol=1e-5)


def test_a_size_pinned_for_one_kernel_is_a_constant_in_all():
    """Column centering of x.T: its column sums keep a vector over the whole kept axis, pinning the width
    (T == 64, ir/passes/sized.py's pin); the program's other kernels then read that width as a constant
    too (no kernel's space or strides read T at the call), the batch stays symbolic over batch sizes 1 and
    more, values as NumPy's."""
    def center(x, w):
        z = x.t()
        y = (z - z.mean(axis=1, keepdims=True)) * w[:, None]
        return (y * y).sum()
    f = tg.compile(center, dynamic=True)
    w = RNG.standard_normal(64).astype(np.float32)
    for b in (4096, 1, 0, 3000, 4096):
        x = RNG.standard_normal((b, 64)).astype(np.float32)
        xt, wt = tg.tensor(x, requires_grad=True), tg.tensor(w, requires_grad=True)
        loss = f(xt, wt)
        loss.backward()
        d = x.T.astype(np.float64) - (x.T.mean(axis=1, keepdims=True) if b else 0)
        y = d * w[:, None]
        dd = 2 * y * w[:, None]
        np.testing.assert_allclose(loss.item(), (y * y).sum(), rtol=1e-4, atol=1e-4)
        if b:
            np.testing.assert_allclose(xt.grad.numpy(), (dd - dd.mean(axis=1, keepdims=True)).T, rtol=1e-3,
                                       atol=1e-4)
            np.testing.assert_allclose(wt.grad.numpy(), (2 * y * d).sum(axis=1), rtol=1e-3, atol=1e-3)
    s = f.stats()
    # (the empty batch too: the mean over the batch divides by B as it is, NaN at 0, no guard B != 0)
    assert s["traces"] == 1 and s["retrace_reasons"] == [], s
    assert all("T == 64 (vectors over the kept axis compiled in)" in d["guards"] for d in s["dynamic"]), s
    prog, entry = _program(f, tg.tensor(np.zeros((4096, 64), np.float32)), tg.tensor(w))
    kernels = [k for p in entry.programs if p is not None for k in p.kernels]
    spaces = [d for k in kernels for d in [*k.shape, *(s for ld in k.args for s in ld.strides)]]
    assert kernels and all("T" not in d.expr.symbols() for d in spaces if hasattr(d, "expr")), spaces
    assert any("B" in d.expr.symbols() for k in kernels for d in k.shape if hasattr(d, "expr"))


def _layernorm(x, w, b, g):
    mean = x.mean(axis=1, keepdims=True)
    d = x - mean
    var = (d * d).mean(axis=1, keepdims=True)
    return ((d / (var + 1e-5).sqrt() * w + b) * g).sum()


@SETTINGS
@given(shapes=st.lists(st.tuples(st.sampled_from([0, 1, 2, 5]), st.sampled_from([0, 1, 2, 3, 16])), min_size=3,
                       max_size=6))
def test_factored_row_sums_over_symbolic_widths_match_eager(shapes):
    """A layer norm's backward sums factor (ir/passes/factor.py: s * sum(v), its sums then share walks) also
    where the row width T is known only at the call: over widths 0 and 1 (a mean of no element is NaN, a
    sum over none eager's 0) and more, loss and gradients as eager's, NaN where eager's are; over widths
    of 2 and more one trace whose guards pin no size (the rewrite decides nothing on the sizes)."""
    f = tg.compile(_layernorm, dynamic=True)
    for b, t in shapes:
        arrays = [RNG.standard_normal(s).astype(np.float32) for s in ((b, t), (t,), (t,), (b, t))]
        results = []
        for fn in (_layernorm, f):
            ts = [tg.tensor(a, requires_grad=k < 3) for k, a in enumerate(arrays)]
            loss = fn(*ts)
            loss.backward()
            results.append([loss.detach().numpy()] + [x.grad.numpy() for x in ts[:3]])
        for got, want in zip(results[1], results[0]):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    g = tg.compile(_layernorm, dynamic=True)           # widths of 2 and more: one trace, no size pinned
    for b, t in ((5, 16), (3, 7), (4, 2), (6, 33)):
        arrays = [tg.tensor(RNG.standard_normal(s).astype(np.float32), requires_grad=k < 3)
                  for k, s in enumerate(((b, t), (t,), (t,), (b, t)))]
        g(*arrays).backward()
    guards = [x for d in g.stats()["dynamic"] for x in d["guards"]]
    assert g.stats()["traces"] == 1 and not any(re.fullmatch(r"\w+ == \d+", x) for x in guards), guards


def test_symbolic_matmuls_run_blas_on_one_thread():
    """A matrix product whose sizes are known only at the call runs with the BLAS on one thread, whole or
    split over the pool by the call's sizes (its count restored after: OpenBLAS's own threads would spin
    after each call against the fused kernels), as a static product's chunks do; values as NumPy's over
    batch sizes 0, 1 and more (test_gemm.py: the split per call)."""
    from tracegrad.backends.cpu.driver import blas
    if blas() is None or not blas()[1].get("set_threads"):
        pytest.skip("no OpenBLAS thread control here")
    f = tg.compile(lambda x, w: (x @ w).relu(), dynamic=True)
    w = RNG.standard_normal((96, 80)).astype(np.float32)
    for b in (300, 1, 0, 7, 300):
        x = RNG.standard_normal((b, 96)).astype(np.float32)
        np.testing.assert_allclose(f(tg.tensor(x), tg.tensor(w)).numpy(), np.maximum(x @ w, 0), rtol=1e-4, atol=1e-4)
    text = f.ir(tg.tensor(x), tg.tensor(w), stage="llvm")
    assert re.search(r"call void %c\d+bts\w*\(i32 1\)", text), text[:2000]
