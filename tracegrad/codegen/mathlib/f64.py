"""The float64 routines: thin wrappers over the C library, and tanh (see the package docstring)."""
from __future__ import annotations

from .builder import D, I64, _Fn, _c


# --------------------------------------------------------------------------
# f64 functions: thin wrappers over the C library
# --------------------------------------------------------------------------

_H64 = "define internal double @tg_{}_f64(double %x)"


def _libm_f64(name: str) -> str:
    b = _Fn()
    y = b.op(f"call double @{name}(double %x)")
    return b.text(_H64.format(name), "double " + y)


def _exp_f64(): return _libm_f64("exp")
def _log_f64(): return _libm_f64("log")


def _tanh_f64() -> str:
    """glibc's tanh is up to 2 ulp off, so compute it from exp/expm1 (both < 1 ulp) with a
    compensated final division (Fast2Sum + fma residual), a = |x|:
      a <  0.35: t = expm1(-2a),  tanh = -t / (2 + t)   (error amplification <= 1.34)
      a >= 0.35: e = exp(-2a),    tanh = (1 - e) / (1 + e)   (amplification <= 1.33)
    both branches are evaluated, the sign is copied bitwise (tanh(-0) = -0)."""
    b = _Fn()
    bits = b.bitcast("%x", D, I64)
    a = b.bitcast(b.and_(I64, bits, str((1 << 63) - 1)), I64, D)
    m2a = b.fmul(D, a, _c(-2.0))
    t = b.op(f"call double @expm1(double {m2a})")
    e = b.op(f"call double @exp(double {m2a})")
    small = b.fcmp("olt", D, a, _c(0.35))
    # numerator n + nl and denominator d + dl, both exact sums (Fast2Sum: |big| >= |small|)
    one_or_two = b.select(small, D, _c(2.0), _c(1.0))
    num_hi = b.select(small, D, b.fneg(D, t), b.fsub(D, _c(1.0), e))
    num_lo = b.select(small, D, _c(0.0), b.fsub(D, b.fsub(D, _c(1.0), num_hi), e))
    v = b.select(small, D, t, e)
    den = b.fadd(D, one_or_two, v)
    den_lo = b.fadd(D, b.fsub(D, one_or_two, den), v)
    q = b.fdiv(D, num_hi, den)
    res = b.op(f"call double @llvm.fma.f64(double {b.fneg(D, q)}, double {den}, double {num_hi})")
    res = b.fsub(D, b.fadd(D, res, num_lo), b.fmul(D, q, den_lo))
    q = b.fadd(D, q, b.fdiv(D, res, den))
    q = b.select(b.fcmp("uno", D, a, a), D, a, q)
    sign = b.and_(I64, bits, str(-(1 << 63)))
    out = b.bitcast(b.or_(I64, b.bitcast(q, D, I64), sign), I64, D)
    return b.text(_H64.format("tanh"), "double " + out)


def _sin_f64(): return _libm_f64("sin")
def _cos_f64(): return _libm_f64("cos")
def _erf_f64(): return _libm_f64("erf")


def _sigmoid_f64() -> str:
    b = _Fn()
    e = b.op(f"call double @exp(double {b.fneg(D, '%x')})")
    y = b.fdiv(D, _c(1.0), b.fadd(D, _c(1.0), e))
    return b.text(_H64.format("sigmoid"), "double " + y)


def _pow_f64() -> str:
    b = _Fn()
    y = b.op("call double @pow(double %x, double %y)")
    return b.text("define internal double @tg_pow_f64(double %x, double %y)", "double " + y)


def _sqrt_f64() -> str:
    b = _Fn()
    y = b.op("call double @llvm.sqrt.f64(double %x)")
    return b.text(_H64.format("sqrt"), "double " + y)
