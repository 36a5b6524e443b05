"""The constants of the math library and a tiny builder of straight-line LLVM IR text."""
from __future__ import annotations

import math
import struct
from fractions import Fraction

D, F, I32, I64 = "double", "float", "i32", "i64"

# --------------------------------------------------------------------------
# constants
# --------------------------------------------------------------------------

SHIFT = 6755399441055744.0            # 1.5 * 2**52: (v + SHIFT) - SHIFT == rint(v)
TWO52 = 4503599627370496.0            # 2**52
LOG2E = 1.4426950408889634
LN2_HI = 6.93147180369123816490e-01   # 0x3FE62E42FEE00000: 32 significant bits
LN2_LO = 1.90821492927058770002e-10   # ln2 - LN2_HI
SQRT_HALF_BITS = 0x3FE6A09E667F3BCD   # bits of sqrt(0.5)
INF = math.inf
NAN_BITS_D = 0x7FF8000000000000

# 2/pi * 2**256 (floor) and pi/2 * 2**126 (floor), from mpmath at 120 digits.
_TWO_OVER_PI = 0xA2F9836E4E441529FC2757D1F534DDC0DB6295993C439041FE5163ABDEBBC561
_PI_OVER_2 = 0x6487ED5110B4611A62633145C06E0E68

# Cody-Waite pi/2 = PIO2_1 + PIO2_2 + PIO2_3 (30 + 30 + 53 significant bits).
PIO2_1 = math.ldexp(_PI_OVER_2 >> 97, 97 - 126)
PIO2_2 = math.ldexp((_PI_OVER_2 >> 67) & ((1 << 30) - 1), 67 - 126)
PIO2_3 = float(Fraction(_PI_OVER_2 & ((1 << 67) - 1), 1 << 126))
PIO2 = float(Fraction(_PI_OVER_2, 1 << 126))
TWO_OVER_PI = float(Fraction(_TWO_OVER_PI, 1 << 256))


def _payne_hanek_table():
    """F_a = (2**(8a) * 2/pi) mod 4 for a = 0..13 as (h, c1, c2, l):
    h, c1, c2 are 22-bit chunks with lsb 2**-20, 2**-42, 2**-64 (so that
    m' * chunk is exact for m' < 2**31); l is the rest rounded to double."""
    rows = []
    for a in range(14):
        g = (_TWO_OVER_PI >> (192 - 8 * a)) & ((1 << 66) - 1)   # F_a * 2**64
        mask = (1 << 22) - 1
        h = math.ldexp(g >> 44, -20)
        c1 = math.ldexp((g >> 22) & mask, -42)
        c2 = math.ldexp(g & mask, -64)
        rest = _TWO_OVER_PI & ((1 << (192 - 8 * a)) - 1)
        l = float(Fraction(rest, 1 << (256 - 8 * a)))
        rows.append((h, c1, c2, l))
    return rows


PH_TABLE = _payne_hanek_table()

ERF_SPLIT = 1.0     # erf: x + x P(x^2) below, 1 - exp(t (R(t) - 1)) from here (t = |x|; fit.py)
ERF_CLAMP = 4.0     # float32 erf rounds to 1 from 3.92 (erfc < 2^-25): t clamped here
ERF64_PIECES = ((1.0, 2.5), (2.5, 6.0))    # float64 erf's pieces of t (rounds to 1 from 5.87)


def _inv_fact(n: int) -> float:
    return 1.0 / math.factorial(n)


EXP_TAYLOR = tuple(_inv_fact(n) for n in range(12))                     # e**r
SIN_TAYLOR = tuple((-1) ** n * _inv_fact(2 * n + 1) for n in range(6))  # sin r / r in r**2
COS_TAYLOR = tuple((-1) ** n * _inv_fact(2 * n) for n in range(7))      # cos r in r**2
ATANH_SERIES = tuple(1.0 / (2 * n + 1) for n in range(1, 12))           # 1/3, 1/5, ...


# --------------------------------------------------------------------------
# a tiny SSA text builder
# --------------------------------------------------------------------------

def _c(value: float, ty: str = D) -> str:
    """LLVM literal of a floating constant (hex double form, exact)."""
    if ty == F and float(struct.unpack("<f", struct.pack("<f", value))[0]) != value \
            and not math.isnan(value):
        raise ValueError(f"{value!r} is not representable as float")
    if math.isnan(value):
        return "0x7FF8000000000000"
    return "0x%016X" % struct.unpack("<Q", struct.pack("<d", value))[0]


class _Fn:
    """Accumulates the body of one straight-line function."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.n = 0

    def op(self, text: str) -> str:
        name = f"%v{self.n}"
        self.n += 1
        self.lines.append(f"  {name} = {text}")
        return name

    # floating point
    def fadd(self, t, a, b): return self.op(f"fadd {t} {a}, {b}")
    def fsub(self, t, a, b): return self.op(f"fsub {t} {a}, {b}")
    def fmul(self, t, a, b): return self.op(f"fmul {t} {a}, {b}")
    def fdiv(self, t, a, b): return self.op(f"fdiv {t} {a}, {b}")
    def fneg(self, t, a): return self.op(f"fneg {t} {a}")
    def fcmp(self, pred, t, a, b): return self.op(f"fcmp {pred} {t} {a}, {b}")
    def select(self, c, t, a, b): return self.op(f"select i1 {c}, {t} {a}, {t} {b}")
    # integer / bits
    def add(self, t, a, b): return self.op(f"add {t} {a}, {b}")
    def sub(self, t, a, b): return self.op(f"sub {t} {a}, {b}")
    def and_(self, t, a, b): return self.op(f"and {t} {a}, {b}")
    def or_(self, t, a, b): return self.op(f"or {t} {a}, {b}")
    def xor(self, t, a, b): return self.op(f"xor {t} {a}, {b}")
    def shl(self, t, a, b): return self.op(f"shl {t} {a}, {b}")
    def lshr(self, t, a, b): return self.op(f"lshr {t} {a}, {b}")
    def ashr(self, t, a, b): return self.op(f"ashr {t} {a}, {b}")
    def icmp(self, pred, t, a, b): return self.op(f"icmp {pred} {t} {a}, {b}")
    def bitcast(self, a, t1, t2): return self.op(f"bitcast {t1} {a} to {t2}")
    def conv(self, kind, a, t1, t2): return self.op(f"{kind} {t1} {a} to {t2}")

    # helpers
    def horner(self, x: str, coeffs) -> str:
        """c0 + x*(c1 + x*(c2 + ...)) in double."""
        acc = _c(coeffs[-1])
        for cf in reversed(coeffs[:-1]):
            acc = self.fadd(D, self.fmul(D, acc, x), _c(cf))
        return acc

    def rint(self, v: str) -> str:
        """Round-to-nearest-even of a double with |v| < 2**51."""
        return self.fsub(D, self.fadd(D, v, _c(SHIFT)), _c(SHIFT))

    def floor(self, v: str) -> str:
        """floor of a double with |v| < 2**51."""
        r = self.rint(v)
        return self.fsub(D, r, self.select(self.fcmp("ogt", D, r, v), D, _c(1.0), _c(0.0)))

    def fabs_d(self, v: str) -> str:
        b = self.bitcast(v, D, I64)
        return self.bitcast(self.and_(I64, b, str((1 << 63) - 1)), I64, D)

    def clamp(self, v: str, lo: float, hi: float) -> str:
        """Clamp a double to [lo, hi]; nan passes through unchanged."""
        v = self.select(self.fcmp("ogt", D, v, _c(hi)), D, _c(hi), v)
        return self.select(self.fcmp("olt", D, v, _c(lo)), D, _c(lo), v)

    def pick(self, idx: str, values, ty: str = D) -> str:
        """values[idx] for an i32 idx, as a chain of selects (idx out of
        range -> values[0])."""
        acc = _c(values[0], ty)
        for j in range(1, len(values)):
            acc = self.select(self.icmp("eq", I32, idx, str(j)), ty, _c(values[j], ty), acc)
        return acc

    def copy_sign_f32(self, mag: str, x: str) -> str:
        """Flip the sign of float `mag` if float `x` has its sign bit set."""
        xs = self.and_(I32, self.bitcast(x, F, I32), "-2147483648")
        r = self.xor(I32, self.bitcast(mag, F, I32), xs)
        return self.bitcast(r, I32, F)

    def text(self, header: str, ret: str) -> str:
        return header + " #0 {\nentry:\n" + "\n".join(self.lines) + f"\n  ret {ret}\n}}\n"


# --------------------------------------------------------------------------
# double-precision kernels shared by the f32 functions (emitted inline)
# --------------------------------------------------------------------------

def _exp_kernel(b: _Fn, z: str, degree: int = 9) -> str:
    """e**z for a double z (any value; clamped to [-300, 300], nan -> nan)."""
    z = b.clamp(z, -300.0, 300.0)
    t = b.fadd(D, b.fmul(D, z, _c(LOG2E)), _c(SHIFT))   # low bits of t hold k
    kd = b.fsub(D, t, _c(SHIFT))
    r = b.fsub(D, z, b.fmul(D, kd, _c(LN2_HI)))          # exact
    r = b.fsub(D, r, b.fmul(D, kd, _c(LN2_LO)))
    p = b.horner(r, EXP_TAYLOR[: degree + 1])
    scale = b.add(I64, b.shl(I64, b.bitcast(t, D, I64), "52"), str(1023 << 52))
    return b.fmul(D, p, b.bitcast(scale, I64, D))


def _log_kernel(b: _Fn, x: str, terms: int = 8) -> str:
    """log(x) for a double x; 0 -> -inf, <0 -> nan, inf -> inf, nan -> nan.
    (x must not be a double denormal -- never the case for float inputs.)"""
    bits = b.bitcast(x, D, I64)
    ix = b.sub(I64, bits, str(SQRT_HALF_BITS))
    k = b.ashr(I64, ix, "52")
    m = b.bitcast(b.sub(I64, bits, b.shl(I64, k, "52")), I64, D)   # [sqrt.5, sqrt2)
    f = b.fsub(D, m, _c(1.0))
    s = b.fdiv(D, f, b.fadd(D, f, _c(2.0)))
    s2 = b.fmul(D, s, s)
    r = b.fmul(D, s2, b.horner(s2, ATANH_SERIES[:terms]))
    two_s = b.fadd(D, s, s)
    logm = b.fadd(D, two_s, b.fmul(D, two_s, r))
    kd = b.conv("sitofp", b.conv("trunc", k, I64, I32), I32, D)
    res = b.fadd(D, b.fmul(D, kd, _c(LN2_HI)), b.fadd(D, logm, b.fmul(D, kd, _c(LN2_LO))))
    res = b.select(b.fcmp("oeq", D, x, _c(0.0)), D, _c(-INF), res)
    res = b.select(b.fcmp("olt", D, x, _c(0.0)), D, _c(math.nan), res)
    res = b.select(b.fcmp("oeq", D, x, _c(INF)), D, _c(INF), res)
    return b.select(b.fcmp("uno", D, x, x), D, x, res)


def _trig_reduce(b: _Fn, ax: str) -> tuple[str, str]:
    """For a finite float ax >= 0 return (r, q): ax = (4j + q)*pi/2 + r,
    r a double with |r| <= ~pi/4, q an i32 in 0..3."""
    xd = b.conv("fpext", ax, F, D)
    # |x| < 2**23: Cody-Waite
    k = b.rint(b.fmul(D, xd, _c(TWO_OVER_PI)))
    r = b.fsub(D, xd, b.fmul(D, k, _c(PIO2_1)))
    r = b.fsub(D, r, b.fmul(D, k, _c(PIO2_2)))
    r_cw = b.fsub(D, r, b.fmul(D, k, _c(PIO2_3)))
    q_cw = b.conv("fptosi", k, D, I32)
    # |x| >= 2**23: Payne-Hanek.  ax = m * 2**e, e = 8a + sh (e in 0..104).
    bits = b.bitcast(ax, F, I32)
    e = b.sub(I32, b.lshr(I32, bits, "23"), "150")
    a = b.ashr(I32, e, "3")
    sh = b.and_(I32, e, "7")
    mant = b.or_(I32, b.and_(I32, bits, str((1 << 23) - 1)), str(1 << 23))
    md = b.conv("sitofp", b.shl(I32, mant, sh), I32, D)          # m' < 2**31
    h, c1, c2, lo = (b.pick(a, [row[i] for row in PH_TABLE]) for i in range(4))

    def mod4(v):  # exact for v >= 0 a multiple of 2**-42, v < 2**35
        return b.fsub(D, v, b.fmul(D, b.floor(b.fmul(D, v, _c(0.25))), _c(4.0)))

    s = b.fadd(D, mod4(b.fmul(D, md, h)), mod4(b.fmul(D, md, c1)))   # exact, < 8
    p3 = b.fmul(D, md, c2)                                            # exact
    p4 = b.fmul(D, md, lo)
    kk = b.rint(b.fadd(D, s, p3))
    frac = b.fadd(D, b.fadd(D, b.fsub(D, s, kk), p3), p4)            # in quarter turns
    r_ph = b.fmul(D, frac, _c(PIO2))
    q_ph = b.conv("fptosi", kk, D, I32)
    large = b.fcmp("oge", F, ax, _c(8388608.0, F))
    r = b.select(large, D, r_ph, r_cw)
    q = b.and_(I32, b.select(large, I32, q_ph, q_cw), "3")
    return r, q


def _sin_cos_poly(b: _Fn, r: str) -> tuple[str, str]:
    r2 = b.fmul(D, r, r)
    s = b.fadd(D, r, b.fmul(D, b.fmul(D, r, r2), b.horner(r2, SIN_TAYLOR[1:])))
    c = b.horner(r2, COS_TAYLOR)
    return s, c
