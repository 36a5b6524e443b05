"""The float64 routines: exp, log, sigmoid, tanh and erf in straight-line double arithmetic (they
vectorize), the others thin wrappers over the C library (see the package docstring)."""
from __future__ import annotations

import math

from .builder import D, ERF64_PIECES, ERF_SPLIT, I64, LN2_HI, LN2_LO, LOG2E, SHIFT, _c, _Fn, _inv_fact

EXP_TAYLOR_13 = tuple(_inv_fact(n) for n in range(14))             # e**r, |r| <= ln2/2: < 2**-57
EXPM1_TAYLOR_16 = tuple(_inv_fact(n) for n in range(1, 17))        # expm1(z)/z, |z| <= 0.7: < 2**-56


# --------------------------------------------------------------------------
# f64 functions: thin wrappers over the C library
# --------------------------------------------------------------------------

_H64 = "define internal double @tg_{}_f64(double %x)"


def _libm_f64(name: str) -> str:
    b = _Fn()
    y = b.op(f"call double @{name}(double %x)")
    return b.text(_H64.format(name), "double " + y)


def exp_kernel_f64(b: _Fn, x: str, parts: bool = False):
    """e**x for a double x, within 1 ulp: x = k ln2 + r (Cody-Waite, |r| <= ln2/2), e**r = 1 + r q(r)
    by its Taylor polynomial of degree 13, times 2**k as 2**(k//2) * 2**(k - k//2) (exact, then one
    rounding: subnormal results round once); x clamped to [-746, 710] (0 and inf beyond), nan
    passes. parts=True: (hi, lo), hi the result and lo the rounding error of 1 + r q (Fast2Sum),
    scaled alike (tanh's compensated division). Straight-line: a loop over it vectorizes, which
    glibc's exp call does not (2.4x fewer ns per element than the call, one thread)."""
    z = b.clamp(x, -746.0, 710.0)
    t = b.fadd(D, b.fmul(D, z, _c(LOG2E)), _c(SHIFT))
    kd = b.fsub(D, t, _c(SHIFT))
    r = b.fsub(D, b.fsub(D, z, b.fmul(D, kd, _c(LN2_HI))), b.fmul(D, kd, _c(LN2_LO)))
    rq = b.fmul(D, r, b.horner(r, EXP_TAYLOR_13[1:]))
    hi = b.fadd(D, _c(1.0), rq)
    k = b.sub(I64, b.bitcast(t, D, I64), str(_bits(SHIFT)))       # k, exactly
    k1 = b.ashr(I64, k, "1")
    s1 = b.bitcast(b.shl(I64, b.add(I64, k1, "1023"), "52"), I64, D)
    s2 = b.bitcast(b.shl(I64, b.add(I64, b.sub(I64, k, k1), "1023"), "52"), I64, D)
    out = b.fmul(D, b.fmul(D, hi, s1), s2)
    if not parts:
        return out
    lo = b.fadd(D, b.fsub(D, _c(1.0), hi), rq)
    return out, b.fmul(D, b.fmul(D, lo, s1), s2)


def _bits(v: float) -> int:
    return int(_c(v), 16)


def _exp_f64() -> str:
    b = _Fn()
    return b.text(_H64.format("exp"), "double " + exp_kernel_f64(b, "%x"))


# fdlibm's minimax coefficients of (log(1+f) - 2s)/s - ... in s**2, s = f/(2+f)
LG = (6.666666666666735130e-01, 3.999999999940941908e-01, 2.857142874366239149e-01, 2.222219843214978396e-01,
      1.818357216161805012e-01, 1.531383769920937332e-01, 1.479819860511658591e-01)


def _log_f64() -> str:
    """fdlibm's log (within 1 ulp) in straight-line code, so a loop over it vectorizes: x = 2**k (1+f),
    sqrt(2)/2 < 1+f < sqrt(2) (subnormal x scaled by 2**54 first), s = f/(2+f),
    log = k ln2_hi - ((f**2/2 - (s (f**2/2 + R(s**2)) + k ln2_lo)) - f); 0 -> -inf, < 0 -> nan,
    inf and nan pass."""
    b = _Fn()
    sub = b.fcmp("olt", D, b.fabs_d("%x"), _c(2.2250738585072014e-308))
    x = b.select(sub, D, b.fmul(D, "%x", _c(2.0 ** 54)), "%x")
    hx = b.add(I64, b.lshr(I64, b.bitcast(x, D, I64), "32"), str(0x3FF00000 - 0x3FE6A09E))
    k = b.sub(I64, b.sub(I64, b.lshr(I64, hx, "20"), str(0x3FF)), b.select(sub, I64, "54", "0"))
    hi = b.add(I64, b.and_(I64, hx, str(0x000FFFFF)), str(0x3FE6A09E))
    m = b.or_(I64, b.shl(I64, hi, "32"), b.and_(I64, b.bitcast(x, D, I64), str(0xFFFFFFFF)))
    f = b.fsub(D, b.bitcast(m, I64, D), _c(1.0))
    hfsq = b.fmul(D, b.fmul(D, _c(0.5), f), f)
    sv = b.fdiv(D, f, b.fadd(D, _c(2.0), f))
    z = b.fmul(D, sv, sv)
    w = b.fmul(D, z, z)
    t1 = b.fmul(D, w, b.horner(w, (LG[1], LG[3], LG[5])))
    t2 = b.fmul(D, z, b.horner(w, (LG[0], LG[2], LG[4], LG[6])))
    dk = b.conv("sitofp", k, I64, D)
    r = b.fadd(D, b.fmul(D, sv, b.fadd(D, hfsq, b.fadd(D, t2, t1))), b.fmul(D, dk, _c(LN2_LO)))
    y = b.fadd(D, b.fadd(D, b.fsub(D, r, hfsq), f), b.fmul(D, dk, _c(LN2_HI)))
    y = b.select(b.fcmp("oeq", D, x, _c(0.0)), D, _c(-math.inf), y)
    y = b.select(b.fcmp("olt", D, x, _c(0.0)), D, _c(math.nan), y)
    y = b.select(b.fcmp("oeq", D, x, _c(math.inf)), D, _c(math.inf), y)
    y = b.select(b.fcmp("uno", D, x, x), D, x, y)
    return b.text(_H64.format("log"), "double " + y)


def _tanh_f64() -> str:
    """From expm1(-2a) and e**-2a (a = |x|), each as an unevaluated sum hi + lo (a Taylor
    polynomial of expm1, exp_kernel_f64: straight-line, so a loop over it vectorizes), with a
    compensated final division (Fast2Sum sums, fma residual):
      a <  0.35: t = expm1(-2a),  tanh = -t / (2 + t)
      a >= 0.35: e = exp(-2a),    tanh = (1 - e) / (1 + e)
    within 1 ulp of the correctly rounded result; both branches are evaluated, the sign is copied
    bitwise (tanh(-0) = -0)."""
    b = _Fn()
    bits = b.bitcast("%x", D, I64)
    a = b.bitcast(b.and_(I64, bits, str((1 << 63) - 1)), I64, D)
    m2a = b.fmul(D, a, _c(-2.0))
    small = b.fcmp("olt", D, a, _c(0.35))
    z = b.select(small, D, m2a, _c(0.0))
    w = b.fmul(D, b.fmul(D, z, z), b.horner(z, EXPM1_TAYLOR_16[1:]))    # expm1(z) = z + w
    t_hi = b.fadd(D, z, w)
    t_lo = b.fadd(D, b.fsub(D, z, t_hi), w)
    e_hi, e_lo = exp_kernel_f64(b, m2a, parts=True)
    # numerator and denominator as exact sums hi + lo (Fast2Sum: |1|, |2| >= |t|, |e|)
    one_or_two = b.select(small, D, _c(2.0), _c(1.0))
    v_hi, v_lo = b.select(small, D, t_hi, e_hi), b.select(small, D, t_lo, e_lo)
    e_num = b.fsub(D, _c(1.0), e_hi)
    num_hi = b.select(small, D, b.fneg(D, t_hi), e_num)
    num_lo = b.select(small, D, b.fneg(D, t_lo), b.fsub(D, b.fsub(D, b.fsub(D, _c(1.0), e_num), e_hi), e_lo))
    den = b.fadd(D, one_or_two, v_hi)
    den_lo = b.fadd(D, b.fadd(D, b.fsub(D, one_or_two, den), v_hi), v_lo)
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
# erf, branch-free (every piece computed, one selected): below ERF_SPLIT = 1, erf(x) = x + x P(x^2)
# (one fma from P, -0 and the denormals kept); from there, of t = |x| clamped to 6 (erf rounds to 1
# from 5.87), erfc(t) = exp(-t^2 + G(t)) with G = log(erfcx(t)) smooth, its coefficients on [1, 2.5)
# or [2.5, 6] picked by one select each and evaluated in u = t - midpoint (exact: Sterbenz), -t^2 +
# G in one fma (rounded once), the exp as hi + lo (exp_kernel_f64) and 1 - hi - lo by Fast2Sum, the
# sign copied bitwise. P of degree 12, G of degree 14 (fit.erf_f64: 0.002 and 0.05 ulp off). A nan
# passes the clamp and stays nan. Within 1 ulp of the correctly rounded value (tests/test_mathlib.py:
# mpmath on a dense sample), where glibc's erf call did not vectorize.
_ERF_SMALL = (0.1283791670955126, -0.3761263890318375, 0.1128379167095486, -0.026866170645073108,
              0.005223977624781906, -0.0008548326978760529, 0.00012055331036455586,
              -1.492559347573274e-05, 1.6460972058299925e-06, -1.635001497423014e-07,
              1.4657798827888747e-08, -1.1365314358574204e-09, 5.944612964198896e-11)
_ERF_LARGE = (  # [1, 2.5), [2.5, 6]
    (
        -1.2553635254332225, -0.4596109008134075, 0.09005983350327325, -0.02053884038216425,
        0.004624930497633359, -0.0009640986402814132, 0.00017452308935960985,
        -2.3741517141322625e-05, 8.273308188469481e-07, 8.909851066821257e-07,
        -4.012627474746665e-07, 1.1310485568908678e-07, -2.4199993468655474e-08,
        2.5036124116610457e-09, 1.0276801722433215e-09),
    (
        -2.045269901466617, -0.22377571554329362, 0.02391542321215489, -0.0032637459620992056,
        0.00048052575047906625, -7.238082948140638e-05, 1.0884554876278249e-05,
        -1.5967288869112428e-06, 2.3763093346704435e-07, -3.0829350066353964e-08,
        7.91595609793686e-10, -3.4030166004379382e-09, -1.210965186125281e-09,
        -2.8963493056199664e-10, -2.98209565029778e-11))
_ERF_MID = tuple((lo + hi) / 2 for lo, hi in ERF64_PIECES)


def _erf_f64() -> str:
    b = _Fn()
    fma = lambda x, y, z: b.op(f"call double @llvm.fma.f64(double {x}, double {y}, double {z})")  # noqa: E731
    bits = b.bitcast("%x", D, I64)
    a = b.bitcast(b.and_(I64, bits, str((1 << 63) - 1)), I64, D)
    s = b.fmul(D, "%x", "%x")
    acc = _c(_ERF_SMALL[-1])
    for c in reversed(_ERF_SMALL[:-1]):
        acc = fma(acc, s, _c(c))
    small = fma(acc, "%x", "%x")
    (_, cut), (_, clamp) = ERF64_PIECES
    t = b.select(b.fcmp("ogt", D, a, _c(clamp)), D, _c(clamp), a)
    far = b.fcmp("oge", D, t, _c(cut))
    u = b.fsub(D, t, b.select(far, D, _c(_ERF_MID[1]), _c(_ERF_MID[0])))
    near, away = _ERF_LARGE
    acc = b.select(far, D, _c(away[-1]), _c(near[-1]))
    for c0, c1 in zip(reversed(near[:-1]), reversed(away[:-1])):
        acc = fma(acc, u, b.select(far, D, _c(c1), _c(c0)))
    e_hi, e_lo = exp_kernel_f64(b, fma(b.fneg(D, t), t, acc), parts=True)
    d = b.fsub(D, _c(1.0), e_hi)
    err = b.fsub(D, b.fsub(D, _c(1.0), d), e_hi)                   # 1 - e_hi = d + err exactly
    c = b.fadd(D, d, b.fsub(D, err, e_lo))
    big = b.bitcast(b.or_(I64, b.bitcast(c, D, I64), b.and_(I64, bits, str(-(1 << 63)))), I64, D)
    out = b.select(b.fcmp("olt", D, a, _c(ERF_SPLIT)), D, small, big)
    return b.text(_H64.format("erf"), "double " + out)


def _sigmoid_f64() -> str:
    """1/(1 + e), e = e**-x as hi + lo (exp_kernel_f64), 1 + e summed exactly (TwoSum) and the
    quotient corrected by its fma residual; e = inf (x < -709.78) gives 0, as 1/(1 + inf)."""
    b = _Fn()
    e_hi, e_lo = exp_kernel_f64(b, b.fneg(D, "%x"), parts=True)
    den = b.fadd(D, _c(1.0), e_hi)
    bb = b.fsub(D, den, _c(1.0))
    den_lo = b.fadd(D, b.fadd(D, b.fsub(D, _c(1.0), b.fsub(D, den, bb)), b.fsub(D, e_hi, bb)), e_lo)
    y = b.fdiv(D, _c(1.0), den)
    res = b.op(f"call double @llvm.fma.f64(double {b.fneg(D, y)}, double {den}, double {_c(1.0)})")
    y = b.fadd(D, y, b.fmul(D, y, b.fsub(D, res, b.fmul(D, y, den_lo))))
    y = b.select(b.fcmp("oeq", D, den, _c(math.inf)), D, _c(0.0), y)
    return b.text(_H64.format("sigmoid"), "double " + y)


def _pow_f64() -> str:
    b = _Fn()
    y = b.op("call double @pow(double %x, double %y)")
    return b.text("define internal double @tg_pow_f64(double %x, double %y)", "double " + y)


def _sqrt_f64() -> str:
    b = _Fn()
    y = b.op("call double @llvm.sqrt.f64(double %x)")
    return b.text(_H64.format("sqrt"), "double " + y)
