"""Loop versioning on a symbolic innermost extent (backends/cpu/llvm.py's _versioned): a kernel traced
with a short symbolic row gets a copy for the traced size and a generic one, chosen at each call. Both
agree with NumPy and with the static compile over size sequences through the hint (0, 1, hint-1, hint,
hint+1 and others): maps, row reductions, column reductions and W6's program with its gradients."""
import numpy as np
from hypothesis import given, settings, strategies as st

import tracegrad as tg

H = 24      # the innermost extent when traced
SIZES = st.lists(st.sampled_from([0, 1, H - 1, H, H + 1]) | st.integers(0, 40), min_size=1, max_size=5)


def _map(x, w, c):
    return (x * w + c).tanh()


def _rows(x, w, c):
    return (x * w + c).sum(axis=1)


def _columns(x, w, c):
    return (x * w).sum(axis=0) + c


def _w6(a, b, c):
    return (a * b + c).tanh().sum()


def _numpy(name, x, w, c):
    x, w, c = (np.asarray(v, np.float64) for v in (x, w, c))
    return {"map": lambda: np.tanh(x * w + c), "rows": lambda: (x * w + c).sum(axis=1),
            "columns": lambda: (x * w).sum(axis=0) + c}[name]()


PROGRAMS = {"map": _map, "rows": _rows, "columns": _columns}
DYNAMIC = {}


def _dynamic(name):
    """One dynamic compile per program, traced at the hint H (kept across examples: later sizes reuse it)."""
    if name not in DYNAMIC:
        DYNAMIC[name] = tg.compile(PROGRAMS[name], dynamic=True)
        DYNAMIC[name](*_inputs(5, H, 0))
    return DYNAMIC[name]


def _inputs(rows, n, seed):
    r = np.random.default_rng(seed)
    return [tg.from_numpy(r.standard_normal(s).astype(np.float32)) for s in ((rows, n), (n,), (n,))]


def test_the_kernel_is_versioned_on_its_traced_extent():
    text = _dynamic("map").ir(*_inputs(5, H, 0), stage="llvm")
    assert "alwaysinline" in text and f"icmp eq i64 %ext, {H}" in text


@settings(max_examples=12, deadline=None)
@given(sizes=SIZES, rows=st.integers(1, 9), seed=st.integers(0, 99))
def test_versioned_kernels_agree_with_numpy_and_static(sizes, rows, seed):
    for name in PROGRAMS:
        for n in sizes:
            args = _inputs(rows, n, seed)
            got = _dynamic(name)(*args).numpy()
            want = tg.compile(PROGRAMS[name])(*args).numpy()
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=f"{name} at {n}")
            np.testing.assert_allclose(got, _numpy(name, *(a.numpy() for a in args)), rtol=1e-4, atol=1e-4,
                                       err_msg=f"{name} at {n}")


W6 = tg.compile(_w6, dynamic=True)


def _w6_step(f, n, seed):
    r = np.random.default_rng(seed)
    ts = [tg.tensor(r.standard_normal(s).astype(np.float32), requires_grad=True)
          for s in ((6, 1, n), (1, 4, n), (n,))]
    loss = f(*ts)
    loss.backward()
    return [loss.detach().numpy()] + [t.grad.numpy() for t in ts], [t.detach().numpy().astype(np.float64) for t in ts]


@settings(max_examples=10, deadline=None)
@given(sizes=SIZES, seed=st.integers(0, 99))
def test_w6_program_and_gradients_through_the_hint(sizes, seed):
    _w6_step(W6, H, 0)                  # traced at H
    for n in sizes:
        got, (a, b, c) = _w6_step(W6, n, seed)
        want, _ = _w6_step(tg.compile(_w6), n, seed)
        t = np.tanh(a * b + c)
        dz = 1.0 - t * t
        oracle = [t.sum(), (dz * b).sum(axis=1, keepdims=True), (dz * a).sum(axis=0, keepdims=True),
                  dz.sum(axis=(0, 1))]
        for g, w, o in zip(got, want, oracle):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5, err_msg=f"W6 at {n}")
            np.testing.assert_allclose(g, o, rtol=1e-4, atol=1e-4, err_msg=f"W6 at {n}")
