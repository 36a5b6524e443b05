"""The native driver (backends/cpu/driver.py): matrix products through NumPy's BLAS from native code, runs
of kernels as one native segment, host kernels between segments; compiled == NumPy / interpret."""
import re

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tracegrad as tg
from tracegrad.backends.cpu import driver
from threads import run_threads


def llvm_text(cf, *args):
    return cf.ir(*args, stage="llvm")


def close(got, want, dtype):
    rtol = 1e-4 if dtype == np.float32 else 1e-10
    want = np.asarray(want, np.float64)
    scale = max(1.0, float(np.abs(want).max())) if want.size else 1.0
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=rtol, atol=rtol * scale)


def operand(rng, shape, dtype, layout):
    """An array of `shape` laid out as asked: "c" contiguous, "t" a transposed view, "rows" every
    other row of a bigger array (row stride > columns), "cols" every other column (no unit stride)."""
    if layout == "t":
        return np.ascontiguousarray(rng.standard_normal(shape[::-1]).astype(dtype)).T
    if layout == "rows":
        return rng.standard_normal((2 * shape[0], shape[1])).astype(dtype)[::2]
    if layout == "cols":
        return rng.standard_normal((shape[0], 2 * shape[1])).astype(dtype)[:, ::2]
    return rng.standard_normal(shape).astype(dtype)


def test_blas_is_found():
    """The bench machine's NumPy ships OpenBLAS: products must take the native path there."""
    assert driver.blas() is not None


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (3, 4, 5), (128, 32, 32), (130, 257, 67)])
@pytest.mark.parametrize("la,lb", [("c", "c"), ("t", "c"), ("c", "t"), ("t", "t"), ("rows", "c"), ("c", "cols")])
def test_matmul_matches_numpy(dtype, m, k, n, la, lb):
    rng = np.random.default_rng(m * 1000 + k * 10 + n)
    a, b = operand(rng, (m, k), dtype, la), operand(rng, (k, n), dtype, lb)
    f = tg.compile(lambda x, y: x @ y)
    x, y = tg.from_numpy(a), tg.from_numpy(b)
    close(f(x, y).numpy(), a.astype(np.float64) @ b.astype(np.float64), dtype)


def test_transposed_operands_reach_blas_without_copies():
    """x.T @ y and x @ y.T: a transposed view is a BLAS operand (trans flag), not a copy kernel."""
    f = tg.compile(lambda x, y: (x.T @ y, x @ y.T))
    x, y = tg.randn(6, 4), tg.randn(6, 4)
    segment = re.search(r"define void @forward_s0\(.*?\n}", llvm_text(f, x, y), re.S).group(0)
    assert len(re.findall(r"call void %c\d+fn\(i32 101, i32 112, i32 111", segment)) == 1     # x.T @ y
    assert len(re.findall(r"call void %c\d+fn\(i32 101, i32 111, i32 112", segment)) == 1     # x @ y.T
    assert "_body(" not in segment                                                     # no copy kernel
    got = f(x, y)
    close(got[0].numpy(), x.numpy().T.astype(np.float64) @ y.numpy(), np.float32)
    close(got[1].numpy(), x.numpy().astype(np.float64) @ y.numpy().T, np.float32)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_batched_broadcast_matmul(dtype):
    rng = np.random.default_rng(3)
    a = rng.standard_normal((2, 3, 5, 4)).astype(dtype)
    b = rng.standard_normal((3, 4, 6)).astype(dtype)[:, :, ::-1].copy().transpose(0, 2, 1).transpose(0, 2, 1)
    c = rng.standard_normal((1, 3, 4, 6)).astype(dtype).transpose(0, 1, 3, 2)     # batch and matrix transposed
    f = tg.compile(lambda x, y, z: (x @ y, x @ z.transpose(-1, -2)))
    got = f(tg.from_numpy(a), tg.from_numpy(b), tg.from_numpy(c))
    close(got[0].numpy(), a.astype(np.float64) @ b, dtype)
    close(got[1].numpy(), a.astype(np.float64) @ np.swapaxes(c, -1, -2), dtype)


def test_integer_matmul_stays_numpy():
    """BLAS has no integer product: it runs NumPy's, between native segments, exactly."""
    a = np.arange(12, dtype=np.int64).reshape(3, 4)
    b = np.arange(20, dtype=np.int64).reshape(4, 5) - 7
    f = tg.compile(lambda x, y: (x @ y) * 2 + 1)
    assert "fn(i32 101" not in llvm_text(f, tg.from_numpy(a), tg.from_numpy(b))
    np.testing.assert_array_equal(f(tg.from_numpy(a), tg.from_numpy(b)).numpy(), (a @ b) * 2 + 1)


@settings(max_examples=25, deadline=None)
@given(m=st.integers(1, 40), k=st.integers(1, 40), n=st.integers(1, 40),
       la=st.sampled_from(["c", "t", "rows", "cols"]), lb=st.sampled_from(["c", "t", "rows", "cols"]),
       dtype=st.sampled_from([np.float32, np.float64]), batch=st.sampled_from([(), (2,), (3, 1)]))
def test_generated_products_match_numpy(m, k, n, la, lb, dtype, batch):
    rng = np.random.default_rng(m + 41 * k + 1681 * n)
    a = np.stack([operand(rng, (m, k), dtype, la) for _ in range(int(np.prod(batch)))]).reshape(batch + (m, k)) \
        if batch else operand(rng, (m, k), dtype, la)
    b = operand(rng, (k, n), dtype, lb)
    f = tg.compile(lambda x, y: x @ y + 1.0)
    close(f(tg.from_numpy(a), tg.from_numpy(b)).numpy(), a.astype(np.float64) @ b + 1.0, dtype)


def mlp_with_host_kernel(x, w1, w2, w3):
    """Many kernels, products in a chain, a host kernel (cumsum) in the middle."""
    h = (x @ w1).tanh() * 0.5 + 0.1
    h = h.cumsum(1) / h.shape[1]
    h = (h @ w2).relu() - (h * h).mean(1, keepdim=True)
    return ((h @ w3).exp().sum(1).log() + h.sum(1)).mean()


def test_segments_around_host_kernels():
    """Native kernels on both sides of a host kernel: two segments in the forward, values equal to
    the interpreter's, gradients too."""
    rng = np.random.default_rng(7)
    arrays = [rng.standard_normal(s).astype(np.float32) * 0.3 for s in ((16, 8), (8, 12), (12, 10), (10, 6))]
    compiled = tg.compile(mlp_with_host_kernel)
    oracle = tg.compile(mlp_with_host_kernel, backend="interpret")
    results = []
    for f in (compiled, oracle):
        ts = [tg.from_numpy(a.copy()).requires_grad_() for a in arrays]
        loss = f(*ts)
        loss.backward()
        results.append([loss.detach().numpy()] + [t.grad.numpy() for t in ts])
    text = llvm_text(compiled, *[tg.from_numpy(a) for a in arrays])
    assert "define void @forward_s0(" in text and "define void @forward_s1(" in text
    for got, want in zip(*results):
        close(got, want, np.float32)


def test_many_kernels_and_check_mode():
    """A long program: one native segment per run of kernels; check mode (kernel by kernel, against
    the interpreter) agrees with the normal call."""
    def f(x, w):
        for _ in range(6):
            x = (x @ w).tanh() + x.sum(0, keepdim=True) * 0.01
        return x
    rng = np.random.default_rng(1)
    x, w = (tg.from_numpy(rng.standard_normal(s).astype(np.float32) * 0.5) for s in ((9, 7), (7, 7)))
    fast, checked = tg.compile(f), tg.compile(f, check=True)
    oracle = tg.compile(f, backend="interpret")
    want = oracle(x, w).numpy()
    close(fast(x, w).numpy(), want, np.float32)
    close(checked(x, w).numpy(), want, np.float32)


def test_threads_share_a_program_with_products():
    """Threads calling one compiled function with matrix products (BLAS from native code, the
    program's shared pointer table) each get their own correct result."""
    f = tg.compile(lambda x, w: ((x @ w).relu() @ w.T).sum(1))
    rng = np.random.default_rng(11)
    w = tg.from_numpy(rng.standard_normal((24, 24)).astype(np.float32))
    xs = [tg.from_numpy(rng.standard_normal((32, 24)).astype(np.float32)) for _ in range(4)]
    wants = [(np.maximum(x.numpy().astype(np.float64) @ w.numpy(), 0) @ w.numpy().T).sum(1) for x in xs]
    errors = []

    def work(i):
        for _ in range(30):
            got = f(xs[i], w).numpy()
            if not np.allclose(got, wants[i], rtol=1e-4, atol=1e-3):
                errors.append(i)
    run_threads(work, 4)
    assert not errors


def test_profile_after_calls_runs_the_same_kernels():
    """The kernel-by-kernel module (profiles, check mode) is compiled on first use; its results
    equal a normal call's."""
    f = tg.compile(lambda x, w: ((x @ w).tanh().cumsum(1) @ w).exp().sum())
    rng = np.random.default_rng(5)
    x, w = (tg.from_numpy(rng.standard_normal(s).astype(np.float32) * 0.3) for s in ((6, 5), (5, 5)))
    before = f(x, w).numpy()
    rows = f.profile(x, w)
    assert [r["kind"] for r in rows].count("extern") == 2 and any(r["kind"] == "host" for r in rows)
    close(f(x, w).numpy(), before, np.float32)
    close(tg.compile(f.fn, check=True)(x, w).numpy(), before, np.float32)
