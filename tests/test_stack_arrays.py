"""Every stack array of the generated LLVM code (row caches, vectors of partial sums, a row kernel's
sums over its rows) starts on a cache line (`alloca [N x T], align 64`), read from `stage="llvm"`
for kernels of each kind that keeps one; values against NumPy in float64."""
import re

import numpy as np
import pytest

import tracegrad as tg

PROGRAMS = {
    "softmax_rows": (lambda x, w: (lambda e: e / e.sum(-1, keepdims=True))((x - x.amax(-1, keepdims=True)).exp()) * w,
                     lambda x, w: (lambda e: e / e.sum(-1, keepdims=True))(np.exp(x - x.max(-1, keepdims=True))) * w),
    "row_and_column_sums": (lambda x, w: ((x - x.mean(-1, keepdims=True)) * w).sum(0),
                            lambda x, w: ((x - x.mean(-1, keepdims=True)) * w).sum(0)),
    "across_tiles": (lambda x, w: ((x.T - x.T.mean(1, keepdims=True)) ** 2).sum(1),
                     lambda x, w: ((x.T - x.T.mean(1, keepdims=True)) ** 2).sum(1)),
    "across_rows": (lambda x, w: (x.T * w[:, None]).sum(1), lambda x, w: (x.T * w[:, None]).sum(1)),
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_stack_arrays_start_on_a_cache_line(name):
    fn, oracle = PROGRAMS[name]
    rng = np.random.default_rng(0)
    x0 = rng.standard_normal((67, 45)).astype(np.float32)
    w0 = rng.standard_normal(45).astype(np.float32)
    x, w = tg.tensor(x0), tg.tensor(w0)
    f = tg.compile(fn)
    allocas = re.findall(r"= alloca \[\d+ x \w+\][^\n]*", f.ir(x, w, stage="llvm"))
    assert allocas and all(a.endswith(", align 64") for a in allocas), allocas
    want = oracle(x0.astype(np.float64), w0.astype(np.float64))
    np.testing.assert_allclose(f(x, w).numpy(), want, rtol=2e-5, atol=2e-5 * np.abs(want).max())
