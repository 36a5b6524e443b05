"""The float32 routines: straight-line, branch-free, vectorizable (see the package docstring)."""
from __future__ import annotations

import math
import struct

from ..host import vector_bytes
from .builder import (D, ERF_CLAMP, ERF_SPLIT, F, I32, INF, TWO52, _Fn, _c, _exp_kernel, _log_kernel,
                      _sin_cos_poly, _trig_reduce)


# --------------------------------------------------------------------------
# f32 functions (one helper per function, each returns its IR text)
# --------------------------------------------------------------------------

_H32 = "define internal float @tg_{}_f32(float %x)"


def _f32(v: float) -> str:
    """LLVM literal of a float32 constant (the double holding the rounded value)."""
    return _c(struct.unpack("f", struct.pack("f", v))[0])


# exp in float arithmetic (the hot path of softmax): clamp, n = rint(x/ln2) by the
# magic-number add (its bits give n, no fptosi of nan), Cody-Waite r = x - n*ln2 with fma,
# e^r = 1 + (r + r^2 P5(r)) (Cephes' coefficients), 2^n applied as 2^(n>>1) * 2^(n - n>>1) so
# denormal results round once. At most 1 ulp from the correctly rounded value (dense sweep). A nan
# passes both clamps (ordered compares) and every step after them stays nan (nan * 2^n, ldexp(nan, n)):
# no test of its own (it cost 2 of the ~20 vector instructions, as a compare and a blend).
_EXP_P = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1,
          5.0000001201e-1)


def _fma(a: str, b: str, c: str) -> str:
    return f"call float @llvm.fma.f32(float {a}, float {b}, float {c})"


def _exp_f32_lines(x: str, p: str, normal: bool = False) -> tuple[list, str]:
    """IR lines computing exp(x). `normal`: the caller knows x lies in [-87, 88] (or is nan), where
    exp is a normal float: no clamps, and 2^n applied in one product (nan stays nan: n's bits are
    some float, nan times it is nan) -- 8 of the ~30 vector instructions, and on AVX2 the
    constants they hold, which its 16 registers cannot keep beside erf's polynomials."""
    f, L, P, m = _f32, [], _EXP_P, len(_EXP_P) - 1
    xc = f"%{p}xc"
    if normal:
        xc = x
    else:
        L += [f"%{p}hi = fcmp ogt float {x}, {f(88.8)}", f"%{p}x1 = select i1 %{p}hi, float {f(88.8)}, float {x}",
              f"%{p}lo = fcmp olt float %{p}x1, {f(-104.0)}",
              f"{xc} = select i1 %{p}lo, float {f(-104.0)}, float %{p}x1"]
    L += [f"%{p}t = {_fma(xc, f(1.44269504088896341), f(12582912.0))}",
          f"%{p}n = fsub float %{p}t, {f(12582912.0)}",
          f"%{p}r1 = {_fma(f'%{p}n', f(-0.693359375), xc)}",
          f"%{p}r = {_fma(f'%{p}n', f(2.12194440e-4), f'%{p}r1')}",
          f"%{p}q0 = {_fma(f(P[0]), f'%{p}r', f(P[1]))}"]
    for i in range(2, m + 1):
        L.append(f"%{p}q{i - 1} = {_fma(f'%{p}q{i - 2}', f'%{p}r', f(P[i]))}")
    L += [f"%{p}r2 = fmul float %{p}r, %{p}r", f"%{p}s1 = {_fma(f'%{p}q{m - 1}', f'%{p}r2', f'%{p}r')}",
          f"%{p}pp = fadd float %{p}s1, {f(1.0)}", f"%{p}tb = bitcast float %{p}t to i32"]
    if normal:      # (n + 127) << 23 from t's bits (n + 0x4B400000)
        L += [f"%{p}sb = sub i32 %{p}tb, 1262485377", f"%{p}sh = shl i32 %{p}sb, 23",
              f"%{p}sf = bitcast i32 %{p}sh to float", f"%{p}res = fmul float %{p}pp, %{p}sf"]
        return L, f"%{p}res"
    L += [f"%{p}ni = sub i32 %{p}tb, 1262485504",
          f"%{p}n1 = ashr i32 %{p}ni, 1", f"%{p}n2 = sub i32 %{p}ni, %{p}n1",
          f"%{p}e1 = add i32 %{p}n1, 127", f"%{p}e2 = add i32 %{p}n2, 127",
          f"%{p}b1 = shl i32 %{p}e1, 23", f"%{p}b2 = shl i32 %{p}e2, 23",
          f"%{p}s1f = bitcast i32 %{p}b1 to float", f"%{p}s2f = bitcast i32 %{p}b2 to float",
          f"%{p}m1 = fmul float %{p}pp, %{p}s1f", f"%{p}res = fmul float %{p}m1, %{p}s2f"]
    return L, f"%{p}res"


def _scalef() -> bool:
    """Whether the target (TRACEGRAD_CPU) has AVX-512, whose 64-byte vectors come with vscalefps:
    LLVM lowers a vectorized llvm.ldexp to it; elsewhere ldexp becomes a call per element, so 2^n is
    built from the exponent bits instead."""
    return vector_bytes() == 64


def _exp_f32() -> str:
    L, r = _exp_f32_lines("%x", "e")
    if _scalef():      # p * 2^n in one instruction, rounded once (also into the denormals)
        L = L[:L.index("%en1 = ashr i32 %eni, 1")] + ["%eres = call float @llvm.ldexp.f32.i32(float %epp, i32 %eni)"]
    body = "\n  ".join(L)
    return f"{_H32.format('exp')} #0 {{\nentry:\n  {body}\n  ret float {r}\n}}\n"


# tanh in float arithmetic, branch-free, 20 instructions per vector: of |x| clamped to 9.1 (tanh
# rounds to 1 from 13 ln2/2 = 9.0109), E = expm1(2|x|), tanh = E / (E + 2), the sign copied bitwise
# (tanh(-0) = -0). expm1(2a) = 2^(n+1) h(r) + (2^n - 1) in one fma: n = rint(2a/ln2) by the
# magic-number add (its bits give 2^(n+1)), r = a - n ln2/2 with one fma (the rounding of ln2/2 is
# damped by 2/(E + 2) where n is large), h(r) = (e^(2r) - 1)/2 = r + r^2 P4(r) (fit.py: 1.5e-8 off
# relative). n = 0 (|x| < 0.17): E = 2h and tanh = h (1 - tanh), one fma from the quotient, whose
# errors (E + 2 rounded, the division) it damps by h. From 9.0109 on E >= 2^26, so E + 2 rounds to
# E and tanh is exactly 1. A nan passes the clamp and stays nan. At most 2 ulp from the correctly
# rounded value (every float32 checked; 1 ulp up to x = 0.17 but for 1 in 10^5, 2 ulp in 1% of
# 0.17..0.52, 1 ulp beyond).
_TANH_H = (0.9999999403953552, 0.6666616797447205, 0.3333394527435303, 0.13387002050876617, 0.0443899892270565)


def _tanh_f32() -> str:
    f, P = _f32, _TANH_H
    L = ["%xb = bitcast float %x to i32", "%ab = and i32 %xb, 2147483647", "%sb = and i32 %xb, -2147483648",
         "%ax = bitcast i32 %ab to float", f"%big = fcmp ogt float %ax, {f(9.1)}",    # nan stays nan
         f"%a = select i1 %big, float {f(9.1)}, float %ax",
         f"%t = {_fma('%a', f(2 / math.log(2)), f(12582912.0))}", f"%n = fsub float %t, {f(12582912.0)}",
         f"%r = {_fma('%n', f(-math.log(2) / 2), '%a')}", f"%p0 = {_fma(f(P[4]), '%r', f(P[3]))}"]
    for i in (1, 2, 3):
        L.append(f"%p{i} = {_fma(f'%p{i - 1}', '%r', f(P[3 - i]))}")
    L += ["%r2 = fmul float %r, %r", f"%h = {_fma('%r2', '%p3', '%r')}",
          # 2^(n+1) from t's bits (n + 0x4B400000): (n + 128) << 23
          "%tb = bitcast float %t to i32", "%tn = sub i32 %tb, 1262485376", "%s2b = shl i32 %tn, 23",
          "%s2 = bitcast i32 %s2b to float", f"%m1 = {_fma('%s2', f(0.5), f(-1.0))}",   # 2^n - 1, exact
          f"%e = {_fma('%s2', '%h', '%m1')}", f"%d = fadd float %e, {f(2.0)}", "%q0 = fdiv float %e, %d",
          "%nh = fneg float %h", f"%q1 = {_fma('%nh', '%q0', '%h')}", "%n0 = fcmp oeq float %n, 0.0",
          "%q = select i1 %n0, float %q1, float %q0",      # n = 0: h (1 - tanh)
          "%qb = bitcast float %q to i32", "%ob = or i32 %qb, %sb", "%out = bitcast i32 %ob to float"]
    body = "\n  ".join(L)
    return f"{_H32.format('tanh')} #0 {{\nentry:\n  {body}\n  ret float %out\n}}\n"


def _log_f32() -> str:
    b = _Fn()
    y = _log_kernel(b, b.conv("fpext", "%x", F, D))
    return b.text(_H32.format("log"), "float " + b.conv("fptrunc", y, D, F))


def _sigmoid_f32() -> str:
    b = _Fn()
    e = _exp_kernel(b, b.fneg(D, b.conv("fpext", "%x", F, D)))
    y = b.fdiv(D, _c(1.0), b.fadd(D, _c(1.0), e))
    return b.text(_H32.format("sigmoid"), "float " + b.conv("fptrunc", y, D, F))


def _sincos_f32(name: str) -> str:
    b = _Fn()
    ax = b.bitcast(b.and_(I32, b.bitcast("%x", F, I32), str((1 << 31) - 1)), I32, F)
    finite = b.fcmp("olt", F, ax, _c(INF, F))
    axs = b.select(finite, F, ax, _c(0.0, F))
    r, q = _trig_reduce(b, axs)
    s, c = _sin_cos_poly(b, r)
    swap = b.icmp("ne", I32, b.and_(I32, q, "1"), "0")
    if name == "sin":
        v = b.select(swap, D, c, s)
        neg = b.icmp("ne", I32, b.and_(I32, q, "2"), "0")
    else:
        v = b.select(swap, D, s, c)
        neg = b.icmp("ne", I32, b.and_(I32, b.add(I32, q, "1"), "2"), "0")
    v = b.select(neg, D, b.fneg(D, v), v)
    m = b.conv("fptrunc", v, D, F)
    if name == "sin":
        m = b.copy_sign_f32(m, "%x")
    out = b.select(finite, F, m, _c(math.nan, F))
    return b.text(_H32.format(name), "float " + out)


def _sin_f32() -> str:
    return _sincos_f32("sin")


def _cos_f32() -> str:
    return _sincos_f32("cos")


def _pow_f32() -> str:
    b = _Fn()
    xd = b.conv("fpext", "%x", F, D)
    yd = b.conv("fpext", "%y", F, D)
    ax = b.fabs_d(xd)
    ay = b.fabs_d(yd)
    mag = _exp_kernel(b, b.fmul(D, yd, _log_kernel(b, ax, terms=11)), degree=11)

    def is_int(v):  # v >= 0 (or nan): v is an integer (inf counts as one)
        big = b.fcmp("oge", D, v, _c(TWO52))
        r = b.fsub(D, b.fadd(D, v, _c(TWO52)), _c(TWO52))
        return b.or_("i1", big, b.fcmp("oeq", D, r, v))

    yint = is_int(ay)
    yodd = b.and_("i1", yint, b.xor("i1", is_int(b.fmul(D, ay, _c(0.5))), "true"))
    xsign = b.icmp("slt", I32, b.bitcast("%x", F, I32), "0")
    res = b.select(b.and_("i1", xsign, yodd), D, b.fneg(D, mag), mag)
    # finite x < 0 with non-integer y -> nan
    xneg_fin = b.and_("i1", b.fcmp("olt", D, xd, _c(0.0)), b.fcmp("ogt", D, xd, _c(-INF)))
    res = b.select(b.and_("i1", xneg_fin, b.xor("i1", yint, "true")), D, _c(math.nan), res)
    # x**0 = 1, 1**y = 1, (-1)**(+-inf) = 1
    one = b.or_("i1", b.fcmp("oeq", D, yd, _c(0.0)), b.fcmp("oeq", D, xd, _c(1.0)))
    m1 = b.and_("i1", b.fcmp("oeq", D, xd, _c(-1.0)), b.fcmp("oeq", D, ay, _c(INF)))
    res = b.select(b.or_("i1", one, m1), D, _c(1.0), res)
    out = b.conv("fptrunc", res, D, F)
    return b.text("define internal float @tg_pow_f32(float %x, float %y)", "float " + out)


def _sqrt_f32() -> str:
    b = _Fn()
    y = b.op("call float @llvm.sqrt.f32(float %x)")
    return b.text(_H32.format("sqrt"), "float " + y)


# erf in float arithmetic, branch-free (both pieces computed, one selected): below ERF_SPLIT = 1,
# erf(x) = x + x P(x^2) (one fma from P, -0 and the denormals kept); from there, of t = |x| clamped to
# 4 (erf rounds to 1 from 3.92), erf = 1 - exp(E) with E = log(erfc(t)) = t (R(t) - 1) in one fma
# (Juffa's form: log erfc is smooth where erfc is not), the exp inlined (_exp_f32_lines, normal: E is in
# [-17.6, -1.8], so no clamps and one 2^n product, 8 fewer vector instructions) and the sign
# copied bitwise. P and R of degree 6 (fit.erf_f32: 0.03 and 0.01 ulp off). A nan passes the clamp
# and the exp and stays nan. At most 1 ulp from the correctly rounded value (dense sweep).
_ERF_SMALL = (0.12837916612625122, -0.3761262595653534, 0.11283578723669052, -0.026853347197175026,
              0.005187162198126316, -0.0007997853099368513, 7.806903158780187e-05)
_ERF_LARGE = (-0.12869659066200256, -0.6349604725837708, -0.10654570162296295, 0.024022730067372322,
              -0.0037634100299328566, 0.00035203853622078896, -1.4105711670708843e-05)


def _horner_f32(L, x, coeffs, p):
    """Append the lines of coeffs' polynomial at x (lowest degree first) in fma; returns its name."""
    acc = _f32(coeffs[-1])
    for i, c in enumerate(reversed(coeffs[:-1])):
        L.append(f"%{p}{i} = {_fma(acc, x, _f32(c))}")
        acc = f"%{p}{i}"
    return acc


def _erf_f32() -> str:
    f = _f32
    L = ["%xb = bitcast float %x to i32", "%ab = and i32 %xb, 2147483647", "%sb = and i32 %xb, -2147483648",
         "%a = bitcast i32 %ab to float", "%s = fmul float %x, %x"]
    small = _horner_f32(L, "%s", _ERF_SMALL, "p")
    L += [f"%lo = {_fma(small, '%x', '%x')}",
          f"%big = fcmp ogt float %a, {f(ERF_CLAMP)}", f"%t = select i1 %big, float {f(ERF_CLAMP)}, float %a"]
    large = _horner_f32(L, "%t", _ERF_LARGE, "r")
    L += ["%nt = fneg float %t", f"%E = {_fma(large, '%t', '%nt')}"]
    exp, e = _exp_f32_lines("%E", "e", normal=True)    # E in [-17.6, -1.8]
    L += exp + [f"%c = fsub float {f(1.0)}, {e}", "%cb = bitcast float %c to i32", "%hb = or i32 %cb, %sb",
                "%hi = bitcast i32 %hb to float", f"%near = fcmp olt float %a, {f(ERF_SPLIT)}",
                "%out = select i1 %near, float %lo, float %hi"]
    body = "\n  ".join(L)
    return f"{_H32.format('erf')} #0 {{\nentry:\n  {body}\n  ret float %out\n}}\n"
