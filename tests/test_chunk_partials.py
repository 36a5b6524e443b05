"""A kernel that accumulates over its outer loop (a sum, maximum or minimum over the rows, a row
kernel's weight-gradient sums) is split into at most regions.ACC_CHUNKS chunks; chunk i > 0 reduces
into row i - 1 of one private array per output, a cache line apart from its neighbours, and the
partials are joined natively in chunk order (regions.py). Checked against NumPy in float64 (and exact integer
sums) with every kernel split, on odd sizes, float32, float64 and int64, scalar and array results,
transposed and sliced inputs."""
import numpy as np
import pytest

import tracegrad as tg
from tracegrad.backends.cpu import regions


@pytest.fixture
def split_everything(monkeypatch):
    monkeypatch.setenv("TRACEGRAD_THRESHOLDS", "parallel_min_work=1")


def _chunked(f, *args):
    """The parallel regions (regions.Region) of f's programs for these arguments."""
    entry, _ = f._entry_for(args, {})
    return [r for prog in entry.programs if prog is not None for r in prog.regions]


PROGRAMS = {
    # fn(x, w) -> outputs, numpy oracle on float64 copies
    "col_sum": (lambda x, w: (x * w).sum(axis=0), lambda x, w: (x * w).sum(axis=0)),
    "total": (lambda x, w: (x * w).sum(), lambda x, w: (x * w).sum()),
    "col_max": (lambda x, w: (x - w).amax(axis=0), lambda x, w: (x - w).max(axis=0)),
    "col_min": (lambda x, w: (x * w).amin(axis=0), lambda x, w: (x * w).min(axis=0)),
    "row_kernel_col_sums": (lambda x, w: ((x - x.mean(-1, keepdims=True)) * w).sum(0) + (x * x).sum(0),
                            lambda x, w: ((x - x.mean(-1, keepdims=True)) * w).sum(0) + (x * x).sum(0)),
}


def _layout(a, how):
    if how == "transposed":
        return np.ascontiguousarray(a.T).T
    if how == "sliced":
        big = np.zeros((a.shape[0] + 1, 2 * a.shape[1]), a.dtype)
        big[1:, 1::2] = a
        return big[1:, 1::2]
    return a


@pytest.mark.parametrize("name", sorted(PROGRAMS))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape,layout", [((1031, 7), "contiguous"), ((333, 65), "transposed"),
                                          ((2049, 3), "sliced")])
def test_split_accumulations_match_numpy(split_everything, name, dtype, shape, layout):
    fn, oracle = PROGRAMS[name]
    rng = np.random.default_rng(shape[0])
    x0 = _layout(rng.standard_normal(shape).astype(dtype), layout)
    w0 = rng.standard_normal(shape[1]).astype(dtype)
    f = tg.compile(fn)
    x, w = tg.tensor(x0), tg.tensor(w0)
    want = oracle(x0.astype(np.float64), w0.astype(np.float64))
    for _ in range(2):                       # the private partials are reused call after call
        got = f(x, w).numpy()
        tol = 1e-5 if dtype == np.float32 else 1e-12
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.abs(want).max())
    chunks = _chunked(f, x, w)
    accumulating = [c for c in chunks if c.chunks.outs]
    assert accumulating and all(2 <= c.chunks.n <= regions.ACC_CHUNKS for c in accumulating), [c.chunks.n for c in chunks]
    for c in accumulating:
        for o, p in enumerate(c.partials):   # rows a cache line apart: no line written by two threads
            used = int(c.desc[c.chunks.count_word(o)]) * p.itemsize      # the elements the call writes
            assert p.shape[0] == c.chunks.n - 1 and p.strides[0] >= used + 64


def test_integer_sums_are_exact(split_everything):
    x0 = np.random.default_rng(5).integers(-2 ** 40, 2 ** 40, (4097, 3), dtype=np.int64)
    f = tg.compile(lambda x: (x.sum(axis=0), x.sum(), x.amax(axis=0)))
    x = tg.tensor(x0)
    for got, want in zip(f(x), (x0.sum(0), x0.sum(), x0.max(0))):
        np.testing.assert_array_equal(got.numpy(), want)
    assert any(c.chunks.outs for c in _chunked(f, x))


def test_layer_norm_parameter_gradients_when_split(split_everything):
    """A row kernel's accumulated weight and bias gradient sums, split over the rows."""
    rng = np.random.default_rng(3)
    x0, g0 = rng.standard_normal((601, 33)), rng.standard_normal((601, 33))
    w0, b0 = rng.standard_normal(33), rng.standard_normal(33)
    x, w, b = (tg.tensor(a, requires_grad=True) for a in (x0, w0, b0))

    def loss(x, w, b, g):
        d = x - x.mean(-1, keepdims=True)
        return ((d / ((d * d).mean(-1, keepdims=True) + 1e-5).sqrt() * w + b) * g).sum()
    tg.compile(loss)(x, w, b, tg.tensor(g0)).backward()
    xhat = (x0 - x0.mean(-1, keepdims=True)) / np.sqrt(x0.var(-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(w.grad.numpy(), (g0 * xhat).sum(0), rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(b.grad.numpy(), g0.sum(0), rtol=1e-10, atol=1e-10)
