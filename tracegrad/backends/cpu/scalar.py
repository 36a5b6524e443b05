"""One element of a kernel in LLVM IR: the types, literals, loads and stores, and the lowering of
an expression tree (the primitives' target-neutral scalar expressions) to instructions."""
import math
import struct

import numpy as np

from ... import dtypes as D
from ... import scalar as S
from ...ir.divisors import BROADCAST_DIV
from ...ir.kernels import Checked, Const, Gather, Iota, Load, known
from ...symint import is_sym
from . import mathlib
from .sizes import NAME as SIZES
from .sizes import operand

# float16 and the 8/16-bit integers have no lowerings (core.ALL): kernels only copy them and fill
# constants of them; their arithmetic runs in NumPy host kernels, rounding as eager does.
LL = {"float16": "half", "float32": "float", "float64": "double", "uint8": "i8", "int8": "i8", "int16": "i16",
      "int32": "i32", "int64": "i64", "bool": "i8"}
SHORT = {"float32": "f32", "float64": "f64"}


INDEX_ERROR = "tracegrad_index_error"     # [4 x i64]: an index out of range (backends/cpu/runtime.py raises)


def lltype(dtype):
    return LL[dtype.name]


def regtype(dtype):
    return "i1" if dtype.name == "bool" else LL[dtype.name]


def fconst(value, dtype):
    """An LLVM float/double literal (hex of the double that holds the exactly rounded value)."""
    v = float(value)
    if dtype.name == "float16":        # LLVM's half literal: 0xH and the IEEE bits (inf beyond 65504)
        with np.errstate(over="ignore"):
            return "0xH%04X" % int(np.array(v, np.float16).view(np.uint16))
    if dtype.name == "float32":
        try:
            v = struct.unpack("f", struct.pack("f", v))[0]
        except OverflowError:          # beyond float32's range: NumPy rounds it to +-inf
            v = math.copysign(math.inf, v)
    return "0x%016X" % struct.unpack("<Q", struct.pack("<d", v))[0]


def const_text(value, dtype):
    if dtype.is_floating_point:
        return fconst(value, dtype)
    if dtype.name == "bool":
        return "true" if value else "false"
    return str(int(value))


class Fn:
    """An LLVM function body under construction."""

    def __init__(self, symbol_index=None):
        self.lines, self.n, self.allocas = [], 0, []
        self.symbol_index, self.size_regs = symbol_index or {}, {}    # symbolic sizes (sizes.py)

    def entry(self, line):
        """An instruction of the entry block, before any other (a symbolic size's computation)."""
        self.allocas.append(line)

    def sizes_array(self):
        """The function's argument holding the call's symbol values (sizes.py); it must take one."""
        return f"%{SIZES}"

    def uses_sizes(self):
        return bool(self.size_regs)

    def size(self, d):
        """The i64 operand of size d: its literal, or a symbolic size's register (sizes.py)."""
        return operand(self, d)

    def tmp(self):
        self.n += 1
        return f"%v{self.n}"

    def label(self):
        self.n += 1
        return f"L{self.n}"

    def emit(self, text):
        self.lines.append("  " + text)

    def assign(self, text):
        t = self.tmp()
        self.emit(f"{t} = {text}")
        return t

    def block(self, name):
        self.lines.append(f"{name}:")

    def alloca(self, ty):
        """A stack slot of LLVM type `ty`; an array (a row cache, a vector of partial sums) starts on
        a cache line, so that no vector access to it straddles two lines."""
        t = self.tmp()
        self.allocas.append(f"  {t} = alloca {ty}" + (", align 64" if ty.startswith("[") else ""))
        return t


def linear(f, idx, strides, offset=0):
    """The i64 offset + sum(idx[d] * strides[d]); strides and offset may be symbolic sizes."""
    terms = [(i, s) for i, s in zip(idx, strides) if is_sym(s) or s]
    acc = f.size(offset)
    for i, s in terms:
        m = i if known(s, 1) else f.assign(f"mul nsw i64 {i}, {f.size(s)}")
        acc = m if acc == "0" else f.assign(f"add nsw i64 {acc}, {m}")
    return acc


def load(f, ptrs, ld, idx):
    off = linear(f, idx, ld.strides, ld.offset)
    ty = lltype(ld.dtype)
    p = f.assign(f"getelementptr inbounds {ty}, ptr {ptrs[id(ld.buf)]}, i64 {off}")
    v = f.assign(f"load {ty}, ptr {p}")
    if ld.dtype.name == "bool":
        v = f.assign(f"icmp ne i8 {v}, 0")
    return v


def store(f, ptrs, buf, off, val):
    ty = lltype(buf.dtype)
    if buf.dtype.name == "bool":
        val = f.assign(f"zext i1 {val} to i8")
    p = f.assign(f"getelementptr inbounds {ty}, ptr {ptrs[id(buf)]}, i64 {off}")
    f.emit(f"store {ty} {val}, ptr {p}")


# ------------------------------------------------------------------ expressions


class Emitter:
    """Emit a tree's value for one loop-body index (each distinct node once). Every kernel lowers an
    expression to the same arithmetic, whatever its loops: a value recomputed in two kernels (a
    softmax where its maximum is taken and where it is subtracted) is the same value bit for bit.
    So how a division lowers follows its expression, never the kernel's loops: fusion's
    BROADCAST_DIV (a divisor broadcast along the result, by the graph's shapes) multiplies by the
    divisor's reciprocal (_by_reciprocal) in every kernel, any other division is an `fdiv`."""

    def __init__(self, mb, f, ptrs, idx):
        self.mb, self.f, self.ptrs, self.idx, self.memo = mb, f, ptrs, idx, {}

    def read(self, ld):
        """The value Load ld reads at this index (a subclass may read it elsewhere)."""
        return load(self.f, self.ptrs, ld, self.idx)

    def value(self, t):
        """The LLVM value of tree t: its nodes not yet emitted, each after its arguments (no
        recursion, so trees of any depth)."""
        memo = self.memo
        stack = [(t, False)]
        while stack:
            x, ready = stack.pop()
            if id(x) in memo:
                continue
            if isinstance(x, Load):
                memo[id(x)] = self.read(x)
            elif isinstance(x, Const) and is_sym(x.value):     # a size as a value (a mean's count)
                memo[id(x)] = _cast(self.f, self.f.size(x.value), D.int64, x.dtype)
            elif isinstance(x, Const):
                memo[id(x)] = const_text(x.value, x.dtype)
            elif isinstance(x, Iota):
                memo[id(x)] = _cast(self.f, linear(self.f, self.idx, x.strides, x.offset), D.int64, x.dtype)
            elif ready:
                memo[id(x)] = self.gather(x) if isinstance(x, Gather) else \
                    self.checked(x) if isinstance(x, Checked) else self.op(x)
            else:
                stack.append((x, True))
                stack.extend((a, False) for a in reversed(x.args) if id(a) not in memo)
        return memo[id(t)]

    def gather(self, t):
        """A Gather's element: its source's affine address plus each checked index times its stride."""
        f = self.f
        off = linear(f, self.idx, t.src.strides, t.src.offset)
        for a, s in zip(t.args, t.strides):
            m = self.memo[id(a)] if known(s, 1) else f.assign(f"mul nsw i64 {self.memo[id(a)]}, {f.size(s)}")
            off = f.assign(f"add nsw i64 {off}, {m}")
        ty = lltype(t.dtype)
        v = f.assign(f"load {ty}, ptr {f.assign(f'getelementptr inbounds {ty}, ptr {self.ptrs[id(t.src.buf)]}, i64 {off}')}")
        return f.assign(f"icmp ne i8 {v}, 0") if t.dtype.name == "bool" else v

    def checked(self, t):
        """A Checked index: wrapped when negative (t.wrap); out of [0, size) it records the error (INDEX_ERROR:
        flag, the index, its axis, the size; the runtime raises after the call) and reads 0."""
        f, (a,) = self.f, t.args
        i, size = _cast(f, self.memo[id(a)], a.dtype, D.int64), f.size(t.size)
        w = f.assign(f"select i1 {f.assign(f'icmp slt i64 {i}, 0')}, i64 {f.assign(f'add nsw i64 {i}, {size}')}, "
                     f"i64 {i}") if t.wrap else i
        ok = f.assign(f"icmp ult i64 {w}, {size}")
        bad, good = f.label(), f.label()
        f.emit(f"br i1 {ok}, label %{good}, label %{bad}")
        f.block(bad)
        self.mb.index_error = True
        for k, val in enumerate(("1", i, str(t.dim), size)):
            f.emit(f"store i64 {val}, ptr getelementptr inbounds ([4 x i64], ptr @{INDEX_ERROR}, i64 0, i64 {k})")
        f.emit(f"br label %{good}")
        f.block(good)
        return f.assign(f"select i1 {ok}, i64 {w}, i64 0")

    def op(self, t):
        v, d = self._expr(t.lower, t.args, t)
        if v is None:                      # the whole lowering is a literal
            return const_text(d, t.dtype)
        return _cast(self.f, v, d, t.dtype) if d is not t.dtype and d.name != t.dtype.name else v

    def _expr(self, node, args, t):
        """(LLVM value, dtype) of scalar expression `node` over the Op's arguments; a bare literal is
        (None, its value) until the operand it meets types it."""
        if isinstance(node, S.Arg):
            arg = args[node.index]
            return (self.value(arg), arg.dtype)
        if isinstance(node, S.Lit):
            return None, node.value
        fn = node.fn
        emit = _OPERATORS.get(fn)
        if emit is not None:
            return emit(self, node, args, t)
        return self._call(fn, node.args, args, t)

    def _unary(self, node, args, t):
        f = self.f
        v, d = self._val(node.args[0], args, t)
        if node.fn is S.NEG:
            return (f.assign(f"fneg {regtype(d)} {v}") if d.is_floating_point else
                    f.assign(f"sub {regtype(d)} 0, {v}")), d
        return f.assign(f"xor i1 {v}, true"), d

    def _binary(self, node, args, t):
        f, fn = self.f, node.fn
        a, d = self._val(node.args[0], args, t)
        b, db = self._val(node.args[1], args, t, d)
        if fn in (S.AND, S.OR) and d.name != "bool":        # to the result: logical or bitwise
            a, b, d = _cast(f, a, d, t.dtype), _cast(f, b, db, t.dtype), t.dtype
        fl = d.is_floating_point
        if d.name == "bool" and fn is S.ADD:                # NumPy: bool + bool is or
            fn = S.OR
        if fn is S.DIV and fl and node is t.lower is BROADCAST_DIV:
            return _by_reciprocal(f, a, b, d), d
        op = {S.ADD: ("fadd", "add"), S.SUB: ("fsub", "sub"), S.MUL: ("fmul", "mul"),
              S.DIV: ("fdiv", None), S.AND: (None, "and"), S.OR: (None, "or")}[fn]
        return f.assign(f"{op[0] if fl else op[1]} {regtype(d)} {a}, {b}"), d

    def _compare(self, node, args, t):
        f, fn = self.f, node.fn
        a, d = self._val(node.args[0], args, t)
        b, _ = self._val(node.args[1], args, t, d)
        if d.is_floating_point:
            pred = {S.LT: "olt", S.LE: "ole", S.GT: "ogt", S.GE: "oge", S.EQ: "oeq", S.NE: "une"}[fn]
            return f.assign(f"fcmp {pred} {regtype(d)} {a}, {b}"), t.dtype
        signed = d.name != "bool"
        pred = {S.LT: "slt" if signed else "ult", S.LE: "sle" if signed else "ule",
                S.GT: "sgt" if signed else "ugt", S.GE: "sge" if signed else "uge", S.EQ: "eq", S.NE: "ne"}[fn]
        return f.assign(f"icmp {pred} {regtype(d)} {a}, {b}"), t.dtype

    def _val(self, node, args, t, like=None):
        v, d = self._expr(node, args, t)
        if v is None:                       # a literal: typed like the other operand
            d = like or t.dtype
            return const_text(node.value, d), d
        return v, d

    def _call(self, fn, nodes, args, t):
        f = self.f
        vals = [self._expr(a, args, t) for a in nodes]
        like = _literal_type(vals)
        vals = [(const_text(d, like) if v is None else v, like if v is None else d) for v, d in vals]
        inline = getattr(self, "_fn_" + fn.name, None)
        if inline is not None:
            return inline(f, vals, t)
        if fn.routine is None:
            raise RuntimeError(f"the LLVM generator has no lowering of the scalar function {fn.name} "
                               f"(in {t.lower} of {t.op}): it needs a math-library routine or an _fn_{fn.name}")
        (a, d) = vals[0]      # the math library's routines, inlined and vectorized
        ty = regtype(d)
        key = (fn.routine, SHORT[d.name])
        self.mb.math.add(key)
        argtext = ", ".join(f"{ty} {v}" for v, _ in vals)
        return f.assign(f"call {ty} {mathlib.symbol(*key)}({argtext})"), d

    def _fn_pow(self, f, vals, t):
        """x ** 0.5 for a literal 0.5 is sqrt(x), as NumPy and PyTorch compute it (sqrt(-inf) is NaN
        where the C library's pow(-inf, 0.5) is inf); other powers call pow."""
        key = ("sqrt" if isinstance(t.args[1], Const) and t.args[1].value == 0.5 else "pow", SHORT[vals[0][1].name])
        self.mb.math.add(key)
        ty = regtype(vals[0][1])
        args = ", ".join(f"{ty} {v}" for v, _ in vals[:1 if key[0] == "sqrt" else 2])
        return f.assign(f"call {ty} {mathlib.symbol(*key)}({args})"), vals[0][1]

    # the vocabulary's functions that are a few instructions each: where, cast, maximum, minimum, abs, sign,
    # floor, ceil, trunc
    @staticmethod
    def _fn_where(f, vals, t):
        (a, _), (b, db), (c, _) = vals
        return f.assign(f"select i1 {a}, {regtype(db)} {b}, {regtype(db)} {c}"), db

    @staticmethod
    def _fn_cast(f, vals, t):
        (a, d), = vals
        return _cast(f, a, d, t.dtype), t.dtype

    @staticmethod
    def _fn_maximum(f, vals, t):
        return _extreme(f, "maximum", vals)

    @staticmethod
    def _fn_minimum(f, vals, t):
        return _extreme(f, "minimum", vals)

    @staticmethod
    def _fn_abs(f, vals, t):
        (a, d), = vals
        ty = regtype(d)
        if d.is_floating_point:
            return f.assign(f"call {ty} @llvm.fabs.{SHORT[d.name]}({ty} {a})"), d
        neg = f.assign(f"sub {ty} 0, {a}")
        c = f.assign(f"icmp slt {ty} {a}, 0")
        return f.assign(f"select i1 {c}, {ty} {neg}, {ty} {a}"), d

    _fn_floor = staticmethod(lambda f, vals, t: _rounded(f, "floor", vals))
    _fn_ceil = staticmethod(lambda f, vals, t: _rounded(f, "ceil", vals))
    _fn_trunc = staticmethod(lambda f, vals, t: _rounded(f, "trunc", vals))

    @staticmethod
    def _fn_sign(f, vals, t):
        (a, d), = vals
        ty = regtype(d)
        if d.is_floating_point:
            one, mone, zero = fconst(1, d), fconst(-1, d), fconst(0, d)
            gt = f.assign(f"fcmp ogt {ty} {a}, {zero}")
            lt = f.assign(f"fcmp olt {ty} {a}, {zero}")
            s1 = f.assign(f"select i1 {lt}, {ty} {mone}, {ty} {zero}")     # +0 for +-0 and NaN, as PyTorch
            return f.assign(f"select i1 {gt}, {ty} {one}, {ty} {s1}"), d
        gt = f.assign(f"icmp sgt {ty} {a}, 0")
        lt = f.assign(f"icmp slt {ty} {a}, 0")
        s1 = f.assign(f"select i1 {lt}, {ty} -1, {ty} 0")
        return f.assign(f"select i1 {gt}, {ty} 1, {ty} {s1}"), d


def _by_reciprocal(f, a, b, d):
    """a / b as a * (1 / (b * s)) * s, for b broadcast along the result (one per row: LLVM hoists the
    reciprocal and the power of two s out of the row's loop), so each element costs two multiplies and
    two roundings, as PyTorch's softmax and layer norm compute it, instead of a division (a tenth of a
    softmax row's time on an AVX-512 Zen 4). s scales a subnormal b into the normal range, where 1 / b
    is finite (a plain reciprocal would be inf there, turning a / b into inf or NaN), and a b of the top
    binade down (whose reciprocal would be subnormal, losing bits); b = 0, +-inf and NaN give what a / b
    gives."""
    ty, info = regtype(d), np.finfo(d.name)
    mag = f.assign(f"call {ty} @llvm.fabs.{SHORT[d.name]}({ty} {b})")
    tiny = f.assign(f"fcmp olt {ty} {mag}, {fconst(float(info.tiny), d)}")
    big = f.assign(f"fcmp oge {ty} {mag}, {fconst(2.0 ** (info.maxexp - 2), d)}")
    down = f.assign(f"select i1 {big}, {ty} {fconst(0.25, d)}, {ty} {fconst(1, d)}")
    s = f.assign(f"select i1 {tiny}, {ty} {fconst(2.0 ** info.nmant, d)}, {ty} {down}")
    r = f.assign(f"fdiv {ty} {fconst(1, d)}, {f.assign(f'fmul {ty} {b}, {s}')}")
    return f.assign(f"fmul {ty} {f.assign(f'fmul {ty} {a}, {r}')}, {s}")


def _literal_type(vals):
    """The dtype a call's literal operands take: its first value operand's that is not a bool (where(c, 0, x):
    x's), else its first operand's."""
    typed = [d for v, d in vals if v is not None]
    return next((d for d in typed if d.name != "bool"), typed[0] if typed else None)


_OPERATORS = {fn: Emitter._unary for fn in (S.NEG, S.NOT)}
_OPERATORS.update({fn: Emitter._binary for fn in (S.ADD, S.SUB, S.MUL, S.DIV, S.AND, S.OR)})
_OPERATORS.update({fn: Emitter._compare for fn in (S.LT, S.LE, S.GT, S.GE, S.EQ, S.NE)})


def _rounded(f, fn, vals):
    """floor, ceil or trunc of a float (LLVM's intrinsic: one instruction with SSE4.1, vectorized)."""
    (a, d), = vals
    ty = regtype(d)
    return f.assign(f"call {ty} @llvm.{fn}.{SHORT[d.name]}({ty} {a})"), d


def _extreme(f, fn, vals):
    """maximum/minimum of two values (NaN-propagating for floats, as NumPy)."""
    (a, d), (b, _) = vals
    ty = regtype(d)
    if d.is_floating_point:
        return f.assign(f"call {ty} @llvm.{fn}.{SHORT[d.name]}({ty} {a}, {ty} {b})"), d
    pred = "sgt" if fn == "maximum" else "slt"
    if d.name == "bool":
        pred = "ugt" if fn == "maximum" else "ult"
    c = f.assign(f"icmp {pred} {ty} {a}, {b}")
    return f.assign(f"select i1 {c}, {ty} {a}, {ty} {b}"), d


def _cast(f, v, src, dst):
    s, d = regtype(src), regtype(dst)
    if src is dst or s == d:
        return v
    if dst.name == "bool":
        if src.is_floating_point:
            return f.assign(f"fcmp une {s} {v}, 0.0")
        return f.assign(f"icmp ne {s} {v}, 0")
    if src.name == "bool":
        return f.assign(f"uitofp i1 {v} to {d}") if dst.is_floating_point else f.assign(f"zext i1 {v} to {d}")
    if src.is_floating_point and dst.is_floating_point:
        return f.assign(f"{'fpext' if src.itemsize < dst.itemsize else 'fptrunc'} {s} {v} to {d}")
    if src.is_floating_point:
        return f.assign(f"fptosi {s} {v} to {d}")
    if dst.is_floating_point:
        return f.assign(f"sitofp {s} {v} to {d}")
    return f.assign(f"{'sext' if src.itemsize < dst.itemsize else 'trunc'} {s} {v} to {d}")


# ------------------------------------------------------------------ kernels
