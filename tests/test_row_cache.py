"""The LLVM row kernel's scratch buffers (backends/cpu/rowcache.py): a value a later phase reads again is
kept in a row-sized stack buffer, and every such buffer is written before any phase reads it, also
when the phase that keeps a value reaches it only through another value an earlier phase kept (the
backward of exp(z - amax(z)) * |b| summed: the bug gave b.grad = nan). Checked on the emitted LLVM
IR (first access of each stack array is a store) and on values and gradients, compiled llvm against
eager, for amax / amin / softmax-like chains times another input over short rows.

TRACEGRAD_ROW_CACHE_EXAMPLES raises the hypothesis example count (default 25, for CI)."""
import os
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tracegrad as tg

EXAMPLES = int(os.environ.get("TRACEGRAD_ROW_CACHE_EXAMPLES", "25"))

CHAINS = {
    "amax_exp_abs": lambda z, b: ((z - z.amax(-1, keepdims=True)).exp() * b.abs()).sum(-1, keepdims=True),
    "amin_exp_mul": lambda z, b: ((z.amin(-1, keepdims=True) - z).exp() * b).sum(-1, keepdims=True),
    "softmax_mul": lambda z, b: (z - z.amax(-1, keepdims=True)).exp() / (z - z.amax(-1, keepdims=True)).exp()
    .sum(-1, keepdims=True) * b,
    "logsumexp_mul": lambda z, b: ((z - z.amax(-1, keepdims=True)).exp().sum(-1, keepdims=True).log()
                                   + z.amax(-1, keepdims=True)) * b.abs(),
    "amax_sq_mul": lambda z, b: ((z - z.amax(-1, keepdims=True)) ** 2 * b.abs()).sum(-1, keepdims=True),
    "amin_exp_abs_mean": lambda z, b: ((z - z.amin(-1, keepdims=True)).neg().exp() * b.abs()).mean(-1, keepdims=True),
}


def _run(fn, z0, b0, compiled):
    z, b = tg.tensor(z0, requires_grad=True), tg.tensor(b0, requires_grad=True)
    out = (tg.compile(fn, backend="llvm") if compiled else fn)(z, b)
    out.sum().backward()
    return out.detach().numpy(), z.grad.numpy(), b.grad.numpy()


def _check(fn, z0, b0):
    tol = dict(rtol=1e-4, atol=1e-5) if z0.dtype == np.float32 else dict(rtol=1e-10, atol=1e-12)
    for got, want, what in zip(_run(fn, z0, b0, True), _run(fn, z0, b0, False), ("value", "z.grad", "b.grad")):
        assert np.isfinite(got).all(), (what, got)
        np.testing.assert_allclose(got, want, err_msg=what, **tol)


def _unwritten_reads(text):
    """The stack arrays (alloca [N x T]) of the IR whose first access in program text is not a store."""
    bad = []
    for fn in text.split("\ndefine ")[1:]:
        arrays = re.findall(r"(%\w+) = alloca \[\d+ x \w+\]", fn)
        for a in arrays:
            geps = re.findall(rf"(%\w+) = getelementptr inbounds \w+, ptr {a}, ", fn)
            first = min((m.start(), m.group(0)) for g in geps
                        for m in re.finditer(rf"(load \w+, ptr {g}\b|store \w+ \S+, ptr {g}\b)", fn)) if geps else None
            if first is not None and not first[1].startswith("store"):
                bad.append((a, first[1]))
    return bad


def test_repro_b_grad_is_finite_and_matches_eager():
    z0 = np.array([[0.12573022, -0.13210486]], np.float32)
    b0 = np.array([[2.6404226, 2.1049001]], np.float32)
    out, zg, bg = _run(CHAINS["amax_exp_abs"], z0, b0, True)
    # eager: d/db sum(exp(z - max z) * |b|) = exp(z - max z) * sign(b)
    np.testing.assert_allclose(bg, np.exp(z0 - z0.max(-1, keepdims=True)) * np.sign(b0), rtol=1e-6)
    _check(CHAINS["amax_exp_abs"], z0, b0)


@pytest.mark.parametrize("name", sorted(CHAINS))
@pytest.mark.parametrize("n", [1, 2, 3, 7])
def test_every_scratch_buffer_is_written_before_it_is_read(name, n):
    rng = np.random.default_rng(n)
    z, b = (tg.tensor(rng.standard_normal((3, n)).astype(np.float32), requires_grad=True) for _ in "zb")
    text = tg.compile(CHAINS[name]).ir(z, b, stage="llvm")
    assert _unwritten_reads(text) == [], text


@pytest.mark.parametrize("name", sorted(CHAINS))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_chains_match_eager(name, dtype):
    rng = np.random.default_rng(1)
    for shape in [(1, 1), (1, 2), (4, 5), (2, 9)]:
        _check(CHAINS[name], rng.standard_normal(shape).astype(dtype), rng.standard_normal(shape).astype(dtype))


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(sorted(CHAINS)), rows=st.integers(1, 3), n=st.integers(1, 9),
       dtype=st.sampled_from([np.float32, np.float64]), seed=st.integers(0, 2**31 - 1))
def test_short_rows_match_eager(name, rows, n, dtype, seed):
    rng = np.random.default_rng(seed)
    z0, b0 = (rng.uniform(-3, 3, (rows, n)).astype(dtype) for _ in "zb")
    _check(CHAINS[name], z0, b0)
