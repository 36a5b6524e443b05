"""How the float32 polynomial coefficients of f32.py are derived (NumPy, float64):
``python -m tracegrad.backends.cpu.mathlib.fit`` prints them.

A weighted minimax fit on a dense Chebyshev-spaced grid by Lawson's iteration (weighted least
squares, each point's weight multiplied by its error until the error levels out), then the
coefficients rounded to float32 one at a time from the lowest degree, the remaining ones refitted
after each rounding (so the rounding of one coefficient is absorbed by the others)."""
from __future__ import annotations

import numpy as np

from .builder import ERF64_PIECES, ERF_CLAMP, ERF_SPLIT

LN2 = 0.6931471805599453


def minimax(x, target, scale, degree, fixed=(), iters=100):
    """Coefficients c (lowest degree first) of the polynomial of `degree` minimizing
    max |sum c_k x^k - target| / scale over the points x; the first len(fixed) coefficients given.
    Returns (coefficients, that max)."""
    V = x[:, None] ** np.arange(degree + 1)
    nf = len(fixed)
    b = target - V[:, :nf] @ np.asarray(fixed, float)
    A, w = V[:, nf:], np.ones_like(x)
    for _ in range(iters):
        sw = np.sqrt(w) / scale
        sol = np.linalg.lstsq(A * sw[:, None], b * sw, rcond=None)[0]
        err = np.abs(A @ sol - b) / scale
        w = w * err + 1e-300
        w /= w.sum()
    return np.concatenate([np.asarray(fixed, float), sol]), err.max()


def rounded(x, target, scale, degree):
    """minimax() with float32 coefficients, rounded one at a time (lowest degree first) and the
    rest refitted; returns (coefficients, max error)."""
    fixed = []
    for k in range(degree + 1):
        c, err = minimax(x, target, scale, degree, fixed)
        fixed.append(float(np.float32(c[k])))
    return tuple(fixed), err


def chebyshev_grid(lo, hi, n=4001):
    return lo + (hi - lo) * (0.5 - 0.5 * np.cos(np.pi * np.arange(n) / (n - 1)))


def tanh_expm1():
    """f32._TANH_H: h(r) = (e^(2r) - 1) / 2 = r + r^2 P(r) on |r| <= ln2/4 (slightly widened), P of
    degree 4 fitted for the relative error of h."""
    r = chebyshev_grid(-1.01 * LN2 / 4, 1.01 * LN2 / 4)
    r = r[r != 0]
    h = np.expm1(2 * r) / 2
    return rounded(r, (h - r) / (r * r), np.abs(h) / (r * r), 4)


def _erf_parts(lo, hi):
    """Float64 grids and targets of erf's two pieces: (a, erf(a)/a - 1, erf(a)/a) on [0, ERF_SPLIT]
    and (t, log(erfc(t))/t + 1, erfc(t) t) on [ERF_SPLIT, hi] (math.erf/erfc)."""
    import math
    a = chebyshev_grid(lo, ERF_SPLIT * 1.001)
    e = np.array([math.erf(v) for v in a])
    t = chebyshev_grid(ERF_SPLIT * 0.999, hi)
    c = np.array([math.erfc(v) for v in t])
    return (a, e / a - 1, e / a), (t, np.log(c) / t + 1, c * t)


def erf_f32():
    """f32._ERF_SMALL, _ERF_LARGE and their errors in float32 ulps of erf (2^-24 relative): P of
    degree 6 in a^2 for erf(a) = a + a P(a^2), R of degree 6 in t for erfc(t) = exp(t (R(t) - 1)),
    an error dR moving erf by erfc(t) t dR."""
    (a, p, sp), (t, r, sr) = _erf_parts(1e-4, ERF_CLAMP)
    small, e1 = rounded(a * a, p, sp * 2.0 ** -24, 6)
    large, e2 = rounded(t, r, 2.0 ** -24 / sr, 6)
    return small, large, e1, e2


ERF64_SMALL_DEGREE, ERF64_LARGE_DEGREE = 12, 14


def _lawson_long(v, target, scale, degree, iters=30):
    """minimax() for float64 coefficients: Lawson's iteration in the Chebyshev basis of v (in [-1, 1])
    with residuals in long double (target: long double), each least-squares solution refined three
    times on its residual (float64 alone cannot resolve errors of 2^-60). Returns (Chebyshev
    coefficients as long doubles, max error / scale)."""
    from numpy.polynomial import chebyshev as C
    vl, A, w = v.astype(np.longdouble), C.chebvander(v, degree), np.ones_like(v)
    c = np.zeros(degree + 1, np.longdouble)
    for _ in range(iters):
        sw = np.sqrt(w) / scale
        for _ in range(3):
            r = ((target - C.chebval(vl, c)) * sw).astype(float)
            c = c + np.linalg.lstsq(A * sw[:, None], r, rcond=None)[0].astype(np.longdouble)
        err = np.abs((target - C.chebval(vl, c)).astype(float)) / scale
        w = w * err + 1e-300
        w /= w.sum()
    return c, err.max()


def _monomial(cheb, a, b):
    """The coefficients (lowest degree first, rounded to float64) in x of sum cheb_k T_k(a x + b),
    converted exactly (Fractions)."""
    from fractions import Fraction
    A, B = Fraction(a), Fraction(b)
    T = [[Fraction(1)], [B, A]]
    for k in range(2, len(cheb)):
        p = [2 * B * c for c in T[k - 1]] + [Fraction(0)]
        for i, c in enumerate(T[k - 1]):
            p[i + 1] += 2 * A * c
        for i, c in enumerate(T[k - 2]):
            p[i] -= c
        T.append(p)
    out = [Fraction(0)] * len(cheb)
    for c, t in zip(cheb, T):
        for i, x in enumerate(t):
            out[i] += Fraction(*np.longdouble(c).as_integer_ratio()) * x
    return tuple(float(c) for c in out)


def erf_f64():
    """f64._ERF_SMALL and _ERF_LARGE (mpmath references, long double residuals): erf(a) = a + a P(a^2)
    for a < ERF_SPLIT, P of degree 12 in s = a^2 (error relative to erf in 2^-53); erfc(t) =
    exp(-t^2 + G(t)), G = log(erfcx(t)) of degree 14 in u = t - m on each piece of ERF64_PIECES
    (an error dG moving erf by erfc(t) dG, in 2^-53). Returns (P, [G per piece], their errors)."""
    import mpmath as mp
    mp.mp.dps = 40

    def long(v):
        return np.longdouble(mp.nstr(v, 30))
    s = chebyshev_grid(0, ERF_SPLIT ** 2, 2000)
    p = np.array([long(mp.erf(mp.sqrt(v)) / mp.sqrt(v) - 1) if v else long(2 / mp.sqrt(mp.pi) - 1)
                  for v in map(mp.mpf, s)])
    scale = (p.astype(float) + 1) * 2.0 ** -53
    c, err = _lawson_long(2 * s / ERF_SPLIT ** 2 - 1, p, scale, ERF64_SMALL_DEGREE)
    small, errs, large = _monomial(c, 2 / ERF_SPLIT ** 2, -1), [err], []
    for lo, hi in ERF64_PIECES:
        t = chebyshev_grid(lo, hi, 2000)
        m, h = (lo + hi) / 2, (hi - lo) / 2
        g = np.array([long(mp.log(mp.erfc(v)) + v * v) for v in map(mp.mpf, t)])
        c, err = _lawson_long((t - m) / h, g, 2.0 ** -53 / np.array([float(mp.erfc(v)) for v in t]),
                              ERF64_LARGE_DEGREE)
        large.append(_monomial(c, 1 / h, 0))
        errs.append(err)
    return small, large, errs


if __name__ == "__main__":
    c, err = tanh_expm1()
    print(f"tanh: h(r) = r + r^2 P(r), P = {c}, max relative error of h {err:.3g}")
    small, large, e1, e2 = erf_f32()
    print(f"erf f32: P = {small} ({e1:.3g} ulp), R = {large} ({e2:.3g} ulp)")
    small, large, errs = erf_f64()
    print(f"erf f64: P = {small}\n G = {large}\n errors (ulp) {errs}")
