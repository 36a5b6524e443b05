"""erf in the math library (backends/cpu/mathlib: f32._erf_f32, f64._erf_f64): branch-free straight-line
routines whose loops vectorize, within 1 ulp of the correctly rounded value in float32 (every float32
around the pieces' seams, the clamp and the denormals; math.erf in float64 rounded once as the
reference) and float64 (mpmath at 40 digits), odd bit for bit, special values; the coefficients are
fit.py's; compiled erf and exact GELU agree with the interpret backend and eager, values and
gradients."""
import math
import re

import numpy as np
import pytest

from test_mathlib import Jit, ulp_distance

import tracegrad as tg
from tracegrad.backends.cpu.mathlib import builder, f32, f64, fit


@pytest.fixture(scope="module")
def jit():
    return Jit([("erf", "f32"), ("erf", "f64")])


def erf64(x):
    return np.frompyfunc(math.erf, 1, 1)(x.astype(np.float64)).astype(np.float64)


def around(v, k):
    """The float32 bit patterns within k of float32 v (non-negative)."""
    i = int(np.array(v, np.float32).view(np.int32))
    return np.arange(max(0, i - k), i + k, dtype=np.int64).astype(np.int32).view(np.float32)


def test_f32_erf_within_one_ulp_at_its_seams_odd_bit_for_bit(jit):
    x = np.concatenate([np.arange(0, 1 << 16, dtype=np.int32).view(np.float32),      # denormals
                        around(2.0 ** -12, 1 << 15), around(builder.ERF_SPLIT, 1 << 17),
                        around(3.92, 1 << 16), around(builder.ERF_CLAMP, 1 << 15), around(0.5, 1 << 15),
                        np.linspace(0, 6, 200_001, dtype=np.float32), np.float32([1e30, 3.4e38, np.inf])])
    got, neg = jit("erf", "f32", x), jit("erf", "f32", -x)
    want = erf64(x).astype(np.float32)
    d = ulp_distance(got, want)
    assert d.max() <= 1, (d.max(), x[np.argmax(d)])
    assert np.array_equal(neg.view(np.uint32), got.view(np.uint32) ^ np.uint32(1 << 31))
    assert (np.abs(got) <= 1).all() and (got[x >= builder.ERF_CLAMP] == 1).all()
    nans = np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0xFFBFFFFF, 0x7FFFFFFF], np.uint32).view(np.float32)
    assert np.isnan(jit("erf", "f32", nans)).all()


def test_f64_erf_within_one_ulp_of_mpmath_vectorized(jit):
    mp = pytest.importorskip("mpmath")
    mp.mp.dps = 40
    rng = np.random.default_rng(3)
    (_, cut), (_, clamp) = builder.ERF64_PIECES
    x = np.concatenate([rng.uniform(0, 1, 6000), rng.uniform(1, cut, 6000), rng.uniform(cut, clamp + 1, 3000),
                        np.exp(rng.uniform(-745, 0, 2000)), 1 - np.arange(1, 40) * 2.0 ** -53,
                        1 + np.arange(40) * 2.0 ** -52, cut + np.arange(-20, 20) * 2.0 ** -51,
                        [5e-324, 2.2e-308, clamp, 5.87, 5.9, 1e300]])
    got = jit("erf", "f64", x)
    want = np.array([float(mp.erf(mp.mpf(v))) for v in x])
    d = ulp_distance(got, want)
    assert d.max() <= 1, (d.max(), x[np.argmax(d)])
    assert np.array_equal(jit("erf", "f64", -x).view(np.uint64), got.view(np.uint64) ^ np.uint64(1 << 63))
    sp = jit("erf", "f64", np.array([np.inf, -np.inf, -0.0, np.nan, 7.0, -1e300]))
    assert sp[0] == 1 and sp[1] == -1 and np.signbit(sp[2]) and sp[2] == 0 and np.isnan(sp[3])
    assert sp[4] == 1 and sp[5] == -1
    body = jit.function_ir("erf", "f64")
    assert re.search(r"<\d+ x double>", body), "the float64 erf loop did not vectorize"
    assert all(c.startswith("@llvm.") for c in re.findall(r"call [^@]*(@[\w.]+)", body))     # no erf call left


def test_f32_erf_coefficients_are_the_fit():
    small, large, e1, e2 = fit.erf_f32()
    assert e1 < 0.05 and e2 < 0.05
    assert small == f32._ERF_SMALL and large == f32._ERF_LARGE


def test_f64_erf_coefficients_are_consistent():
    """_ERF_LARGE's pieces are polynomials of G = log(erfc(t)) + t^2 about each piece's midpoint, an
    error dG moving erf by erfc(t) dG: within half an ulp of erf (math.erfc as the float64 oracle),
    and _ERF_SMALL's constant is 2/sqrt(pi) - 1 (the fit itself, mpmath, takes 30 s: fit.erf_f64)."""
    assert abs(f64._ERF_SMALL[0] - (2 / math.sqrt(math.pi) - 1)) < 1e-16
    for (lo, hi), coeffs, m in zip(builder.ERF64_PIECES, f64._ERF_LARGE, f64._ERF_MID):
        t = np.linspace(lo, hi, 501)
        g = np.polyval(np.array(coeffs)[::-1], t - m)
        erfc = np.array([math.erfc(v) for v in t])
        assert (np.abs(g - (np.log(erfc) + t * t)) * erfc).max() < 2.0 ** -54


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_compiled_erf_and_exact_gelu_agree_with_interpret_and_eager(dtype):
    rng = np.random.default_rng(4)
    x0 = np.concatenate([rng.standard_normal(3000) * 2, np.linspace(-7, 7, 1001), [0.0, -0.0, 1e-30]]).astype(dtype)
    g0 = rng.standard_normal(x0.size).astype(dtype)

    def step(x, g):
        y = tg.nn.functional.gelu(x)
        (y * g).sum().backward()
        return tg.nn.functional.erf(x), y, x.grad

    results = []
    for backend in ("llvm", "interpret", None):
        x = tg.tensor(x0, requires_grad=True)
        fn = tg.compile(step, backend=backend) if backend else step
        results.append([v.detach().numpy() for v in fn(x, tg.tensor(g0))])
    erf_ulps = ulp_distance(results[0][0], erf64(x0).astype(dtype))
    assert erf_ulps.max() <= 1
    tol = 1e-6 if dtype == np.float32 else 1e-14
    for other in results[1:]:
        assert ulp_distance(results[0][0], other[0]).max() <= 1
        for a, b in zip(results[0][1:], other[1:]):
            np.testing.assert_allclose(a, b, rtol=tol, atol=tol)


@pytest.mark.skipif("x86_64" not in __import__("platform").machine(), reason="x86-64 CPU names")
@pytest.mark.parametrize("build", ["native", "x86-64-v3"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_exact_gelu_rows_of_odd_lengths_on_both_builds(build, dtype, monkeypatch):
    """GELU(x + b) and its gradients (W12's MLP) in the AVX-512 and the AVX2 build, at row lengths
    around the vector widths (8 and 16 float32 lanes, 4 and 8 float64), against NumPy (math.erf)."""
    monkeypatch.setenv("TRACEGRAD_CPU", build)
    rng = np.random.default_rng(7)
    tol = 2e-6 if dtype == np.float32 else 1e-13
    for n in (1, 7, 63, 64, 65, 1024):
        x0, b0, g0 = (rng.standard_normal(s).astype(dtype) * 2.5 for s in ((5, n), (n,), (5, n)))
        x, b = tg.tensor(x0, requires_grad=True), tg.tensor(b0, requires_grad=True)

        @tg.compile
        def step(x, b, g):
            y = tg.nn.functional.gelu(x + b)
            (y * g).sum().backward()
            return y

        y = step(x, b, tg.tensor(g0)).detach().numpy()
        h = x0.astype(np.float64) + b0
        cdf = 0.5 * (1 + erf64(h / math.sqrt(2)))
        dh = g0 * (cdf + h * np.exp(-h * h / 2) / math.sqrt(2 * math.pi))
        np.testing.assert_allclose(y, h * cdf, rtol=tol, atol=tol)
        np.testing.assert_allclose(x.grad.numpy(), dh, rtol=tol, atol=tol)
        np.testing.assert_allclose(b.grad.numpy(), dh.sum(0), rtol=tol, atol=tol * 5)
