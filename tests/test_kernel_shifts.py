"""Kernels that differ only in where they read share one compiled body (backends/cpu/shifts.py): the
read-only buffers' constant offsets move into the pointers the calls pass. A recurrence unrolled over
T steps compiles as many bodies for T = 4 as for T = 8; values against NumPy for generated sizes, offsets
that are not multiples of the shift unit, reads of one buffer at several offsets, and gathers."""
import re

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tracegrad as tg

SETTINGS = settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _recurrence(steps):
    def f(x, w, idx):
        h = x[0] * 0
        for t in range(steps):      # step t reads x[t] at two places (one a gather) and w
            h = (x[t] + h @ w).tanh() + 0.5 * x[t][:, 1:].sum(1, keepdim=True) * x[t][:, idx]
        return h
    return f


def _numpy(x, w, idx, steps):
    h = x[0] * 0
    for t in range(steps):
        h = np.tanh(x[t] + h @ w) + 0.5 * x[t][:, 1:].sum(1, keepdims=True) * x[t][:, idx]
    return h


@SETTINGS
@given(steps=st.integers(2, 6), width=st.integers(1, 40), seed=st.integers(0, 2 ** 16))
def test_unrolled_steps_match_numpy(steps, width, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((steps, 3, width)).astype(np.float32)
    w = (rng.standard_normal((width, width)) / max(width, 1)).astype(np.float32)
    idx = rng.integers(0, width, width)
    f = tg.compile(_recurrence(steps))
    got = f(tg.tensor(x), tg.tensor(w), tg.tensor(idx)).numpy()
    np.testing.assert_allclose(got, _numpy(x, w, idx, steps), rtol=1e-5, atol=1e-5)


def test_bodies_do_not_grow_with_the_steps():
    counts = []
    for steps in (4, 8):
        rng = np.random.default_rng(steps)
        x = tg.tensor(rng.standard_normal((steps, 3, 32)).astype(np.float32))
        w = tg.tensor((rng.standard_normal((32, 32)) / 32).astype(np.float32))
        idx = tg.tensor(np.arange(32)[::-1].copy())
        f = tg.compile(_recurrence(steps))
        text = f.ir(x, w, idx, stage="llvm")
        counts.append(len(re.findall(r"^define internal void @\w+_body\(", text, re.M)))
        np.testing.assert_allclose(f(x, w, idx).numpy(), _numpy(x.numpy(), w.numpy(), idx.numpy(), steps),
                                   rtol=1e-5, atol=1e-5)
    assert counts[0] == counts[1], counts


def _body(skip, seed):
    x = np.random.default_rng(seed).standard_normal((256 + skip, 256)).astype(np.float32)
    f = tg.compile(lambda x: (x[skip:] * 2 + 1).T.exp())
    np.testing.assert_allclose(f(tg.tensor(x)).numpy(), np.exp((x[skip:] * 2 + 1).T), rtol=1e-6)
    return re.search(r"define internal void @forward_k0_body.*?\n}", f.ir(tg.tensor(x), stage="llvm"), re.S).group(0)


@SETTINGS
@given(skip=st.integers(1, 40), seed=st.integers(0, 2 ** 16))
def test_transposed_tiles_read_from_the_moved_pointer(skip, seed):
    """A map tiled as a transpose reads its tiles through the Loads its schedule names (transpose.py):
    those move with the tree's, so x[skip:].T (skip rows of 256: whole units) has the body of x.T, tiles
    transposed in registers included; values as NumPy's."""
    body = _body(skip, seed)
    assert "shufflevector" in body and body == _body(0, seed)
