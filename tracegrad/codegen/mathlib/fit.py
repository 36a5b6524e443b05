"""How the float32 polynomial coefficients of f32.py are derived (NumPy, float64):
``python -m tracegrad.codegen.mathlib.fit`` prints them.

A weighted minimax fit on a dense Chebyshev-spaced grid by Lawson's iteration (weighted least
squares, each point's weight multiplied by its error until the error levels out), then the
coefficients rounded to float32 one at a time from the lowest degree, the remaining ones refitted
after each rounding (so the rounding of one coefficient is absorbed by the others)."""
from __future__ import annotations

import numpy as np

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


if __name__ == "__main__":
    c, err = tanh_expm1()
    print(f"tanh: h(r) = r + r^2 P(r), P = {c}, max relative error of h {err:.3g}")
