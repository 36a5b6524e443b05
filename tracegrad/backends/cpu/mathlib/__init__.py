"""Elementwise math library for the LLVM backend (LLVM IR text generator).

``definitions(names)`` returns LLVM IR text (opaque-pointer syntax, accepted
by ``llvmlite.binding.parse_assembly``) defining ``@tg_<name>_<ty>`` for each
requested ``(name, ty)``, ``ty`` in ``{"f32", "f64"}``.  All functions carry
attribute group ``#0`` (``alwaysinline nounwind willreturn memory(none)``) so
the kernel generator can call them freely and rely on inlining.

The routines are ``_<name>_f32()`` in f32.py and ``_<name>_f64()`` in f64.py (builder.py: the
constants and the IR text builder); FUNCS lists every name that has both, and the external
functions a routine calls (C library, LLVM intrinsics) are declared from its own text. A new
function of the scalar-lowering vocabulary is those two routines.

float32 (the hot path)
----------------------
Every f32 function is a single basic block of straight-line code: only
arithmetic, integer bit manipulation, compares and ``select`` -- no calls
(except ``llvm.sqrt``, which lowers to one instruction), no loops, no branches,
no memory accesses.  After inlining into ``for i: out[i] = f(in[i])`` the loop
vectorizer turns it into ``<8 x float>`` (AVX2/AVX-512) code under strict IEEE
semantics (no fast-math flags are used or needed).

Approach: exp, tanh and erf -- the hot path of softmax, gelu and activations -- are evaluated in
float arithmetic with fma (see _exp_f32 / _tanh_f32): exp at most 1 ulp, tanh at most 2 ulp from
the correctly rounded result (tanh traded its second ulp for a third of its instructions: gelu is
compute-bound on it), ~2x faster than the double route. NumPy's own float32 exp is up to 2 ulp
off, so at a few points (2 of 44M in the dense sweep) ours is 3 ulp from NumPy's; likewise tanh
(NumPy's within 1 ulp). The other functions widen the
argument to double and evaluate in double precision with a relative error far below 2**-24
(typically < 2**-40), then round once with ``fptrunc``: correctly rounded except for rare
near-halfway cases (< 0.51 ulp). Overflow to inf, gradual underflow to denormals and signed zeros
come out of the final ``fptrunc`` / sign handling automatically; inf / nan inputs are patched with
selects. Rounding tricks use the classic "add and subtract 1.5*2**52" idiom (valid and exact here
because all operands are bounded) instead of rounding intrinsics, so no SSE4.1 is required.

* exp     -- float: see above (the double kernel below serves sigmoid and pow):
             2**k * P(r), k = rint(x/ln2), r = x - k*ln2 (Cody-Waite, 2-part
             ln2), P = Taylor degree 9 (|r| <= 0.347, rel. err < 2**-38);
             2**k built by integer shift into the exponent field.
* log     -- x = 2**k * m, m in [sqrt(1/2), sqrt(2)); log m = 2*atanh(s),
             s = (m-1)/(m+1), odd series to s**17 (rel. err < 2**-44).
             float denormals are normal doubles, so they need no special care.
             log(0) = -inf, log(<0) = nan, log(inf) = inf.  Bound 0.5 ulp + eps.
* tanh    -- float: E/(E + 2), E = expm1(2|x|) (one reduction, no branch), |x| clamped
             to 9.1; the sign is copied bitwise (tanh(-0) = -0). <= 2 ulp (every float32).
* sigmoid -- 1/(1+exp(-x)) in double (exp kernel above).  Bound 0.5 ulp + eps.
* sin/cos -- reduction r = |x| - k*pi/2:
             |x| < 2**23: double Cody-Waite with a 3-part pi/2 (30+30+53 bits);
             k < 2**23 so k*C1, k*C2 and x - k*C1 are exact.
             |x| >= 2**23: branch-free Payne-Hanek: |x| = m' * 2**(8a), m' <
             2**31 an integer, so x*2/pi = m' * F_a (mod 4) with
             F_a = (2**(8a) * 2/pi) mod 4 (a = 0..13) stored as 22+22+22+53
             bits; the 4 constants are picked with select chains (no table
             loads / gathers); the partial products are exact and are reduced
             mod 4 exactly.  Then sin/cos Taylor polynomials (to r**11 / r**12,
             |r| <= pi/4, rel. err < 2**-36) and quadrant fix-up with selects.
             Valid for the whole float range (up to 3.4e38).  Bound 0.5 ulp + eps.
* pow     -- exp(y*log|x|) in double with the long log series (to s**23) and
             a degree-11 exp polynomial (|y*log|x|| error < 2**-40 before
             overflow), sign for negative x and odd integer y; special cases as
             C99/NumPy: x**0 = 1 and 1**y = 1 (even for nan), (-1)**(+-inf) = 1,
             x<0 finite and y non-integer -> nan, 0**neg -> inf, ...
             Bound 0.5 ulp + eps.
* sqrt    -- llvm.sqrt.f32 (correctly rounded).
* erf     -- float: x + x P6(x**2) below 1; beyond, 1 - exp(t (R6(t) - 1)) of t = |x| clamped
             to 4 (Juffa's form, log erfc being smooth), the exp inlined; both computed, one
             selected (f32._erf_f32; fit.erf_f32 derives P and R). At most 1 ulp from the
             correctly rounded value (every float32 in [0.25, 4.5) and every 97th pattern).

float64
-------
exp, log, sigmoid, tanh and erf are straight-line double arithmetic (f64.py), so a loop over them
vectorizes (``<4 x double>``; 2-4x fewer ns per element than the C library calls, gelu float64
fwd+bwd of (1024, 1024) on one thread 35.5 -> 8.1 ms): exp by Cody-Waite reduction and a degree-13
Taylor polynomial, within 1 ulp, 2**k applied in two exact halves (subnormal results round once);
log is fdlibm's (within 1 ulp); sigmoid and tanh from exp (and an expm1 polynomial) as unevaluated
sums with compensated divisions, within 1 ulp of the correctly rounded result and 2 of NumPy's
(glibc's tanh is up to 2 ulp off, 3 from NumPy's); erf from x + x P12(x**2) below 1 and
erfc = exp(-t**2 + G(t)), G = log(erfcx) on two pieces beyond (fit.erf_f64), within 1 ulp of the
correctly rounded value as glibc's (exact GELU's hot path). The others wrap the C library
(``sin``, ``cos``, ``pow``; glibc: < 1 ulp) and ``llvm.sqrt.f64``: correct for all special
values, not vectorized.
"""

from __future__ import annotations

import inspect
import re

from . import f32, f64

__all__ = ["FUNCS", "TYPES", "definitions", "symbol"]

TYPES = ("f32", "f64")
ATTRS = "attributes #0 = { alwaysinline nounwind willreturn memory(none) }"


def symbol(name: str, ty: str) -> str:
    """LLVM symbol (with the leading ``@``) of ``name`` for type ``ty``."""
    _check(name, ty)
    return f"@tg_{name}_{ty}"


def _check(name: str, ty: str) -> None:
    if name not in FUNCS:
        raise ValueError(f"unknown math function {name!r}")
    if ty not in TYPES:
        raise ValueError(f"unknown math type {ty!r}")


# the routines of f32.py and f64.py: _<name>_<ty>(), no arguments, for every name in FUNCS and ty in TYPES
_GEN = {(m[1], m[2]): v for module in (f32, f64) for k, v in vars(module).items()
        if (m := re.fullmatch(r"_([a-z]+)_(f32|f64)", k)) and not inspect.signature(v).parameters}
FUNCS = tuple(sorted({n for n, _ in _GEN}))
assert len(_GEN) == len(FUNCS) * len(TYPES), "every math function has a float32 and a float64 routine"
_CALL = re.compile(r"call (\w+) @([\w.]+)\(([^)]*)\)")


def _declarations(text: str) -> dict:
    """{name: `declare` line} of the external functions (C library, LLVM intrinsics) `text` calls."""
    return {name: f"declare {ret} @{name}({', '.join(a.split()[0] for a in args.split(', '))})"
            for ret, name, args in _CALL.findall(text) if not name.startswith("tg_")}


def definitions(names) -> str:
    """LLVM IR text defining ``@tg_<name>_<ty>`` for every ``(name, ty)`` in
    ``names``, plus the declarations and the attribute group ``#0`` they use.
    Returns "" for an empty request."""
    reqs = sorted(set(names))
    for n, t in reqs:
        _check(n, t)
    if not reqs:
        return ""
    bodies = [_GEN[r]() for r in reqs]
    decls = {k: d for body in bodies for k, d in _declarations(body).items()}
    parts = [decls[k] + "\n" for k in sorted(decls)]
    parts += bodies
    parts.append(ATTRS + "\n")
    return "\n".join(parts)
