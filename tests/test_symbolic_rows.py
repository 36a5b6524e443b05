"""Row kernels compiled with symbolic sizes keep the static compile's size-dependent code, taking the
size at the call: the next row's prefetch (backends/cpu/prefetch.py) over rows of a run-time length,
and float64 row sums within the row cache's capacity (plan/'s row_wide). Values against NumPy (and
the static compile's, bit for bit, at the traced size) over size sequences through 0, 1, odd sizes
and sizes beside the vector width, with one trace (another only where a size becomes 1)."""
import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st

import tracegrad as tg

PREFETCH = "call void @llvm.prefetch.p0(ptr"
SETTINGS = settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
SIZES = st.lists(st.sampled_from([0, 1, 2, 7, 13, 15, 16, 17, 63, 64, 65, 128, 1000, 1024, 1025]),
                 min_size=2, max_size=6)


def _centered_dot(x, g):
    """A row reduction reading two rows per row (x's and g's): it prefetches."""
    return ((x - x.mean(axis=1, keepdims=True)) * g).sum(axis=1)


def _center_loss(x, w):
    """W7's program (a centred transposed view), its mean over the rows a division by N per element."""
    z = x.T
    y = (z - z.mean(axis=1, keepdims=True)) * w[:, None]
    return (y * y).sum()


def _center_numpy(x, w):
    """loss, dx, dw of _center_loss in float64."""
    x, w = x.astype(np.float64), w.astype(np.float64)
    d = x - x.mean(axis=0, keepdims=True)
    y = d * w
    dd = 2 * y * w
    return (y * y).sum(), dd - dd.mean(axis=0, keepdims=True), (2 * y * d).sum(axis=0)


def _rand(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_symbolic_row_kernels_prefetch():
    """The LLVM of the dynamic compile prefetches as the static one does."""
    x, g = tg.from_numpy(_rand((32, 256), 0)), tg.from_numpy(_rand((32, 256), 1))
    assert PREFETCH in tg.compile(_centered_dot, dynamic=True).ir(x, g, stage="llvm")
    assert PREFETCH in tg.compile(_centered_dot).ir(x, g, stage="llvm")


@SETTINGS
@given(cols=SIZES, rows=st.sampled_from([0, 1, 3, 8]), seed=st.integers(0, 99))
def test_prefetching_row_kernel_over_row_lengths(cols, rows, seed):
    f = tg.compile(_centered_dot, dynamic=True)
    f(tg.from_numpy(_rand((4, 1024), 0)), tg.from_numpy(_rand((4, 1024), 1)))     # traced at 1024
    for n in cols:
        x, g = _rand((rows, n), seed), _rand((rows, n), seed + 1)
        got = f(tg.from_numpy(x), tg.from_numpy(g)).numpy()
        with np.errstate(invalid="ignore"):         # rows of 0: a mean of nothing, NaN as eager's
            want = ((x - x.sum(axis=1, keepdims=True, dtype=np.float64) / n) * g).sum(axis=1, dtype=np.float64)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * max(1, n), err_msg=f"rows of {n}")
    assert f.stats()["traces"] == 1


@SETTINGS
@given(rows=st.lists(st.sampled_from([1, 2, 7, 13, 16, 64, 100, 128, 1024]), min_size=2, max_size=5),
       seed=st.integers(0, 99))
def test_w7_program_and_gradients_over_row_counts(rows, seed):
    f = tg.compile(_center_loss, dynamic=True)
    for n in [64] + rows:
        xa, wa = _rand((n, 24), seed), _rand(24, seed + 1)
        x, w = tg.tensor(xa, requires_grad=True), tg.tensor(wa, requires_grad=True)
        loss = f(x, w)
        loss.backward()
        want = _center_numpy(xa, wa)
        for got, ref, name in zip((loss.detach().numpy(), x.grad.numpy(), w.grad.numpy()), want, ("loss", "dx", "dw")):
            np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4 * n, err_msg=f"{name} at {n} rows")
    assert f.stats()["traces"] <= 2         # one symbolic trace, maybe one more from the first call's grads


def _layer_norm_loss(x, w, b, g):
    mean = x.mean(axis=1, keepdims=True)
    d = x - mean
    return (d / ((d * d).mean(axis=1, keepdims=True) + 1e-5).sqrt() * w + b).mul(g).sum()


def _layer_norm_step(f, rows, n, seed):
    r = np.random.default_rng(seed)
    xa, ga = (r.standard_normal((rows, n)).astype(np.float32) + 3 for _ in range(2))
    wa, ba = (r.standard_normal(n).astype(np.float32) for _ in range(2))
    x, w, b = (tg.tensor(a, requires_grad=True) for a in (xa, wa, ba))
    loss = f(x, w, b, tg.from_numpy(ga))
    loss.backward()
    return [loss.detach().numpy(), x.grad.numpy(), w.grad.numpy(), b.grad.numpy()], (xa, wa, ba, ga)


def _layer_norm_numpy(xa, wa, ba, ga):
    X, W, B, G = (a.astype(np.float64) for a in (xa, wa, ba, ga))
    d = X - X.mean(axis=1, keepdims=True)
    rstd = 1 / np.sqrt((d * d).mean(axis=1, keepdims=True) + 1e-5)
    xhat, dxhat = d * rstd, G * W
    dx = rstd * (dxhat - dxhat.mean(axis=1, keepdims=True) - xhat * (dxhat * xhat).mean(axis=1, keepdims=True))
    return [((xhat * W + B) * G).sum(), dx, (G * xhat).sum(axis=0), G.sum(axis=0)]


def test_layer_norm_at_the_traced_size_is_the_static_compile():
    """W3's fused forward and backward: at the size it was traced at, the dynamic compile's kernels
    compute what the static one's do, bit for bit (its weight and bias gradients summed over the rows in
    float32 blocks joined in float64, as there)."""
    f = tg.compile(_layer_norm_loss, dynamic=True)
    got, _ = _layer_norm_step(f, 600, 256, 0)
    want, _ = _layer_norm_step(tg.compile(_layer_norm_loss, dynamic=False), 600, 256, 0)
    for g, w, name in zip(got, want, ("loss", "dx", "dw", "db")):
        np.testing.assert_array_equal(g, w, err_msg=name)


LAYER_NORM = tg.compile(_layer_norm_loss, dynamic=True)


@settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck))
@given(sizes=st.lists(st.tuples(st.sampled_from([1, 2, 7, 300]), st.sampled_from([1, 7, 13, 16, 17, 100, 256, 1000])),
                      min_size=2, max_size=4), seed=st.integers(0, 99))
def test_layer_norm_gradients_over_sizes(sizes, seed):
    f = LAYER_NORM
    for rows, n in [(64, 256)] + sizes:         # traced at 256 (a power of two)
        got, inputs = _layer_norm_step(f, rows, n, seed)
        for g, w, name in zip(got, _layer_norm_numpy(*inputs), ("loss", "dx", "dw", "db")):
            np.testing.assert_allclose(g, w, rtol=2e-3, atol=2e-3 * max(1.0, np.abs(w).max()),
                                       err_msg=f"{name} at {rows}x{n}")
    # retraced only where a size became 1 (a broadcasting path of its own: a guard, never a wrong hit)
    assert all(r.endswith("= 1)") for r in f.stats()["retrace_reasons"]), f.stats()["retrace_reasons"]

