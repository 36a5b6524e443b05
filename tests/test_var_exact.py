"""var/std of data constant along the reduced axes is exactly 0 — eager, interpret and llvm, any
length, axis and dtype — as PyTorch's Welford variance gives, so std's gradient there is NaN
everywhere alike (the fuzzer found the compiled mean of 17 equal values off by an ulp: std 1e-16,
gradient 0 where eager gave NaN). On random data var stays as accurate as a float64 two-pass
reference computed with math.fsum."""
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tracegrad as tg

BACKENDS = [None, "interpret", "llvm"]


def _fn(backend, axis, correction, kind):
    def f(x):
        return getattr(x, kind)(axis, correction=correction)
    return f if backend is None else tg.compile(f, backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
@settings(max_examples=8, deadline=None)
@given(c=st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False), rows=st.integers(1, 5),
       n=st.integers(2, 300), axis=st.sampled_from([1, 0]), correction=st.sampled_from([0, 1]),
       dtype=st.sampled_from(["float32", "float64"]))
def test_var_and_std_of_constant_data_are_exactly_zero(backend, c, rows, n, axis, correction, dtype):
    shape = (rows, n) if axis == 1 else (n, rows)
    x = tg.tensor(np.full(shape, c, dtype), requires_grad=True)
    assert not _fn(backend, axis, correction, "var")(x.detach()).numpy().any()
    s = _fn(backend, axis, correction, "std")(x)
    assert not s.detach().numpy().any()
    s.sum().backward()
    assert np.isnan(x.grad.numpy()).all()          # d std / dx = (x - mean) / ((N - c) std) = 0 / 0


@pytest.mark.parametrize("backend", BACKENDS)
@settings(max_examples=6, deadline=None)
@given(seed=st.integers(0, 2 ** 32 - 1), n=st.integers(2, 3000), shift=st.sampled_from([0.0, 1.0, 1e4]),
       dtype=st.sampled_from(["float32", "float64"]))
def test_var_matches_a_float64_two_pass_reference(backend, seed, n, shift, dtype):
    a = (np.random.default_rng(seed).standard_normal((3, n)) + shift).astype(dtype)
    got = _fn(backend, 1, 1, "var")(tg.tensor(a)).numpy()
    for row, v in zip(a.astype(np.float64), got):
        mean = math.fsum(row) / n
        want = math.fsum((row - mean) ** 2) / (n - 1)
        tol = 1e-12 if dtype == "float64" else 1e-5
        assert abs(v - want) <= tol * (want + shift * shift * (1e-16 if dtype == "float64" else 1e-7)), (v, want)
