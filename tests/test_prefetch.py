"""Row kernels that reduce along rows of two or more reads prefetch the next row (backends/cpu/prefetch.py):
the decision (in the LLVM text) and the values (against NumPy in float64), whatever the shape."""
import numpy as np
from hypothesis import given, settings, strategies as st

import tracegrad as tg

PREFETCH = "call void @llvm.prefetch.p0(ptr"


def centered_dot(x, g):
    """Reduces along rows reading two rows per row: x's and g's."""
    return ((x - x.mean(axis=1, keepdims=True)) * g).sum(axis=1)


def centered_dot_numpy(x, g):
    x, g = x.astype(np.float64), g.astype(np.float64)
    return ((x - x.mean(axis=1, keepdims=True)) * g).sum(axis=1)


def test_two_row_reads_prefetch_one_does_not():
    rng = np.random.default_rng(0)
    x, g = (tg.from_numpy(rng.standard_normal((64, 1024)).astype(np.float32)) for _ in range(2))
    assert PREFETCH in tg.compile(centered_dot).ir(x, g, stage="llvm")
    assert PREFETCH not in tg.compile(lambda x: x.softmax(dim=1)).ir(x, stage="llvm")     # one read
    assert PREFETCH not in tg.compile(lambda x, g: x * g + 1).ir(x, g, stage="llvm")      # no reduction


@settings(max_examples=25, deadline=None)
@given(rows=st.integers(1, 40), cols=st.integers(1, 300), f64=st.booleans(), seed=st.integers(0, 2 ** 16))
def test_values_of_prefetching_row_kernels(rows, cols, f64, seed):
    dtype = np.float64 if f64 else np.float32
    rng = np.random.default_rng(seed)
    x, g = (rng.standard_normal((rows, cols)).astype(dtype) for _ in range(2))
    got = tg.compile(centered_dot)(tg.from_numpy(x), tg.from_numpy(g)).numpy()
    want = centered_dot_numpy(x, g)
    tol = 1e-10 if f64 else 1e-4
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * max(1.0, float(np.abs(x).max() * np.abs(g).sum(axis=1).max())))


def test_layer_norm_fwd_bwd_with_prefetch_matches_numpy():
    """W3's fused layer-norm forward and backward, the kernel the prefetch is for: loss and gradients."""
    rng = np.random.default_rng(3)
    xa, ga = (rng.standard_normal((48, 1024)).astype(np.float32) for _ in range(2))
    wa = (1 + 0.1 * rng.standard_normal(1024)).astype(np.float32)
    x, w = tg.tensor(xa, requires_grad=True), tg.tensor(wa, requires_grad=True)

    def loss(x, w, g):
        mean = x.mean(axis=1, keepdims=True)
        d = x - mean
        return (d / ((d * d).mean(axis=1, keepdims=True) + 1e-5).sqrt() * w * g).sum()
    f = tg.compile(loss)
    assert PREFETCH in f.ir(x, w, tg.from_numpy(ga), stage="llvm")
    out = f(x, w, tg.from_numpy(ga))
    out.backward()
    X, G, W = (a.astype(np.float64) for a in (xa, ga, wa))
    d = X - X.mean(axis=1, keepdims=True)
    rstd = 1 / np.sqrt((d * d).mean(axis=1, keepdims=True) + 1e-5)
    xhat, dxhat = d * rstd, G * W
    dx = rstd * (dxhat - dxhat.mean(axis=1, keepdims=True) - xhat * (dxhat * xhat).mean(axis=1, keepdims=True))
    np.testing.assert_allclose(float(out.detach().numpy()), (xhat * W * G).sum(), rtol=1e-4)
    np.testing.assert_allclose(x.grad.numpy(), dx, rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(w.grad.numpy(), (G * xhat).sum(axis=0), rtol=1e-3, atol=1e-3)
