"""One element of a kernel as numba.cuda (Python) source: literals, casts, and the translation of
the primitives' target-neutral scalar lowerings (tracegrad/scalar.py's vocabulary) into statements.

Every value is held in a variable of its own dtype: each op's result is wrapped in its dtype's
constructor (`float32(...)`, `int32(...)`) and literals are typed like the operand they meet, so
float32 math stays float32 on the GPU (numba would otherwise widen `x * 0.5` to float64) and int32
arithmetic wraps as NumPy's does. The math library's functions are `math.<cuda>` (their `Fn.cuda`),
which numba.cuda compiles to libdevice's float or double routine by the argument's type; the few-
operation functions of the vocabulary are the `_fn_<name>` methods, as in the LLVM generator.

float16 values are held in float32 variables (`held`): a float16 buffer's element is read as
float32, an op with a float16 result computes in float32 (float64 when an operand is float64: a
cast) and rounds its result to float16 once, as NumPy's float16 loops do; a store converts exactly.
"""
import math

import numpy as np

from .... import scalar as S
from ....ir.kernels import Const, Load
from ....symint import is_sym
from .. import sizes

CTOR = {"float32": "float32", "float64": "float64", "int32": "int32", "int64": "int64", "bool": "boolean"}
FLOATS = ("float32", "float64")


def _name(dtype):
    return dtype if isinstance(dtype, str) else dtype.name


def held(dtype):
    """The dtype a kernel holds values of `dtype` in (float16: float32)."""
    d = _name(dtype)
    return "float32" if d == "float16" else d


def to_half(text):
    """Source text of a float value rounded once to float16, held as float32."""
    return f"float32(float16({text}))"


def literal(value, dtype):
    """Source text of `value` as a constant of `dtype` (exactly rounded once, as the CPU's); a symbolic
    size (a count used as a value: a mean's divisor) is computed from the kernel's size arguments."""
    d = _name(dtype)
    if is_sym(value):
        return f"{CTOR.get(d, 'float32')}({sizes.text(value)})"
    if d == "bool":
        return "True" if value else "False"
    if d == "float16":
        with np.errstate(over="ignore"):
            return literal(float(np.float16(value)), "float32")
    if d in FLOATS:
        v = float(value)
        text = ("math.nan" if math.isnan(v) else ("-math.inf" if v < 0 else "math.inf") if math.isinf(v)
                else repr(v))
        return f"{d}({text})"
    if d not in CTOR:
        raise NotImplementedError(f"the CUDA code generator has no {d} values")
    return f"{d}({int(value)})"


def cast(text, src, dst):
    """Source text converting `text` (of dtype src) to dst, as NumPy's astype does."""
    src, dst = _name(src), _name(dst)
    if src == dst:
        return text
    if dst == "bool":
        return f"({text} != {literal(0, src)})"
    if src == "bool":
        return f"({literal(1, dst)} if {text} else {literal(0, dst)})"
    return f"{CTOR[dst]}({text})"


class Lines:
    """Python source under construction: indented lines and fresh variable names."""

    def __init__(self):
        self.lines, self.n, self.depth = [], 0, 1

    def tmp(self, stem="v"):
        self.n += 1
        return f"{stem}{self.n}"

    def emit(self, text):
        self.lines.append("    " * self.depth + text)

    def assign(self, text, stem="v"):
        t = self.tmp(stem)
        self.emit(f"{t} = {text}")
        return t

    def block(self, head):
        """`with src.block("while i < n:"):` emits the head and indents the body."""
        return _Indent(self, head)

    def text(self):
        return "\n".join(self.lines)


class _Indent:
    def __init__(self, src, head):
        self.src, self.head = src, head

    def __enter__(self):
        self.src.emit(self.head)
        self.src.depth += 1

    def __exit__(self, *exc):
        self.src.depth -= 1


def dtype_of(t):
    """The dtype a kernel holds node t's value in."""
    return held(t.dtype)


class Emitter:
    """Emit the value of expression trees (kernel IR Ops over Loads and Consts) into `src`, each
    distinct node once. `load(ld) -> source text` reads a Load; `memo` may be seeded with values
    already held (id(node) -> variable). `invariant(tree)`: whether a tree's value is the same at
    every element of the loop being emitted (a row's: it reads only row results); a float division by
    such an argument multiplies by its reciprocal instead (as the CPU's backends/cpu/scalar.py does for
    divisors fusion marks BROADCAST_DIV, ir/divisors.py), which
    the compiler hoists out of the loop: one multiply per element instead of an IEEE divide."""

    def __init__(self, src, load, memo=None, invariant=None):
        self.src, self.load, self.memo, self.invariant = src, load, dict(memo or {}), invariant

    def value(self, tree):
        for x in self._unheld(tree):
            if isinstance(x, Load):
                text = self.load(x)
                self.memo[id(x)] = self.src.assign(f"float32({text})" if x.dtype.name == "float16" else text, "x")
            elif isinstance(x, Const):
                self.memo[id(x)] = literal(x.value, x.dtype)
            elif x.dtype.name == "float16":
                args = [(self.memo[id(a)], dtype_of(a)) for a in x.args]
                wide = "float64" if any(d == "float64" for _, d in args) else "float32"
                self.memo[id(x)] = self.src.assign(to_half(self.op(x.op, x.lower, args, wide)))
            else:
                fixed = {n for n, a in zip("abc", x.args) if self.invariant(a)} if self.invariant else ()
                self.memo[id(x)] = self.op(x.op, x.lower, [(self.memo[id(a)], dtype_of(a)) for a in x.args],
                                           dtype_of(x), fixed)
        return self.memo[id(tree)]

    def _unheld(self, tree):
        """The nodes of `tree` not held yet, each after its arguments (none under a held node)."""
        memo, out, done = self.memo, [], set()
        stack = [(tree, False)]
        while stack:
            x, ready = stack.pop()
            if id(x) in memo or id(x) in done:
                continue
            if ready or isinstance(x, (Load, Const)):
                done.add(id(x))
                out.append(x)
            else:
                stack.append((x, True))
                stack.extend((a, False) for a in reversed(x.args))
        return out

    def op(self, name, lower, args, out, fixed=()):
        """A variable holding primitive `name`'s lowering applied to args [(text, dtype)] -> dtype out;
        `fixed`: the argument names (a, b, c) whose values are loop-invariant."""
        names = dict(zip("abc", args))
        text, d = _Translate(self.src, name, lower, names, out, fixed).expr(lower)
        if text is None:                                # the lowering is a literal
            return literal(d, out)
        if d == out and text.isidentifier():
            return text
        return self.src.assign(_wrap(cast(text, d, out), out))


def _wrap(text, d):
    """`text` held in dtype d (numba widens int32 and mixed arithmetic; this narrows it back)."""
    return text if d == "bool" or text.startswith(CTOR[d] + "(") else f"{CTOR[d]}({text})"


class _Translate:
    """The typed walk over one lowering's AST: (source text, dtype) of each subexpression; a bare
    literal is (None, value) until the operand it meets gives it a type."""

    def __init__(self, src, name, lower, names, out, fixed=()):
        self.src, self.name, self.lower, self.names, self.out, self.fixed = src, name, lower, names, out, fixed

    def fail(self, what):
        raise NotImplementedError(f"the CUDA code generator does not understand {what} in the scalar lowering "
                                  f"{self.lower} of {self.name} (tracegrad/ops)")

    def expr(self, node):
        if isinstance(node, S.Arg):
            return self.names[node.name]
        if isinstance(node, S.Lit):
            return None, node.value
        fn = node.fn
        if fn is S.NEG:
            v, d = self.typed(node.args[0])
            return self.hold(f"-{v}", d), d
        if fn is S.NOT:
            v, d = self.typed(node.args[0])
            return f"(not {cast(v, d, 'bool')})", "bool"
        if fn in _COMPARE:
            a, d = self.typed(node.args[0])
            b, _ = self.typed(node.args[1], d)
            return f"({a} {fn.symbol} {b})", "bool"
        if fn in _ARITHMETIC:
            return self.binop(node)
        return self.call(fn, node.args)

    def typed(self, node, like=None):
        v, d = self.expr(node)
        if v is None:
            d2 = like or self.out
            return literal(d, d2), d2
        return v, d

    def hold(self, text, d):
        return self.src.assign(_wrap(text, d))

    def binop(self, node):
        a, d = self.typed(node.args[0])
        b, db = self.typed(node.args[1], d)
        fn = node.fn
        if fn in (S.AND, S.OR):      # logical to a bool result, bitwise to an integer one (as LLVM's)
            out = "bool" if self.out in FLOATS else self.out
            text = f"({cast(a, d, out)} {fn.symbol} {cast(b, db, out)})"
            return (text, "bool") if out == "bool" else (self.hold(text, out), out)
        if d == "bool":                                    # NumPy: bool + bool is or, bool * bool is and
            if fn in (S.ADD, S.MUL):
                return f"({a} {'|' if fn is S.ADD else '&'} {b})", "bool"
            self.fail("arithmetic on bool")
        if fn is S.DIV and d not in FLOATS:
            self.fail(f"{fn.name} on {d}")
        right = node.args[1]
        if fn is S.DIV and isinstance(right, S.Arg) and right.name in self.fixed and db == d:
            return self.by_reciprocal(a, b, d), d
        return self.hold(f"{a} {fn.symbol} {b}", d), d

    def by_reciprocal(self, a, b, d):
        """a / b as a * (1 / (b * s)) * s, for b loop-invariant (the reciprocal and the power of two s
        are then hoisted): two multiplies and two roundings an element, as PyTorch's softmax and layer
        norm. s scales a subnormal b into the normal range, where 1 / b is finite, and a b of the top
        binade down (its reciprocal would be subnormal); b = 0, +-inf and NaN give what a / b gives
        (backends/cpu/scalar.py's _by_reciprocal, the same arithmetic)."""
        info = np.finfo(d)
        down = self.src.assign(f"{literal(0.25, d)} if abs({b}) >= {literal(2.0 ** (info.maxexp - 2), d)} "
                               f"else {literal(1, d)}", "s")
        s = self.src.assign(f"{literal(2.0 ** info.nmant, d)} if abs({b}) < {literal(float(info.tiny), d)} "
                            f"else {down}", "s")
        r = self.src.assign(f"{d}({literal(1, d)} / {d}({b} * {s}))", "rcp")
        return self.hold(f"{d}({a} * {r}) * {s}", d)

    def call(self, fn, args):
        vals = [self.expr(a) for a in args]
        typed = [d for v, d in vals if v is not None]        # literals: typed as the LLVM generator's
        like = next((d for d in typed if d != "bool"), typed[0] if typed else self.out)
        vals = [(literal(d, like), like) if v is None else (v, d) for v, d in vals]
        inline = getattr(self, "_fn_" + fn.name, None)
        if inline is not None:
            return inline(vals)
        (a, d) = vals[0]
        if fn.cuda is None:
            self.fail(f"the function {fn.name}()")
        if d not in FLOATS:
            self.fail(f"{fn.name}() of {d}")
        return self.hold(f"math.{fn.cuda}({', '.join(v for v, _ in vals)})", d), d

    # the vocabulary's functions that are a few operations each; the math library's are math.<name>
    def _fn_where(self, vals):
        (c, dc), (b, d), (e, _) = vals
        return self.hold(f"{b} if {cast(c, dc, 'bool')} else {e}", d), d

    def _fn_cast(self, vals):
        (v, d), = vals
        return cast(v, d, self.out), self.out

    def _fn_maximum(self, vals):
        (a, d), (b, _) = vals
        return self.hold(extreme("maximum", a, b, d), d), d

    def _fn_minimum(self, vals):
        (a, d), (b, _) = vals
        return self.hold(extreme("minimum", a, b, d), d), d

    def _fn_abs(self, vals):
        (a, d), = vals
        return (a, d) if d == "bool" else (self.hold(f"abs({a})", d), d)

    _fn_floor = lambda self, vals: self._rounded("floor", vals)     # noqa: E731
    _fn_ceil = lambda self, vals: self._rounded("ceil", vals)       # noqa: E731
    _fn_trunc = lambda self, vals: self._rounded("trunc", vals)     # noqa: E731

    def _rounded(self, fn, vals):
        """math.<fn> (an integer in numba) back in the float's dtype with the float's sign (-0.0 as
        NumPy's); values of 2**52 and beyond, infinities and NaN are whole already."""
        (a, d), = vals
        whole = f"math.copysign({d}(math.{fn}({a})), {a})"
        return self.hold(f"{whole} if abs({a}) < {literal(2.0 ** 52, d)} else {a}", d), d

    def _fn_sign(self, vals):
        (a, d), = vals
        one, mone, zero = literal(1, d), literal(-1, d), literal(0, d)
        return self.hold(f"{one} if {a} > {zero} else ({mone} if {a} < {zero} else {zero})", d), d  # +0 at +-0, NaN

    def _fn_sigmoid(self, vals):
        """1/(1+e^-x), as e^x/(1+e^x) below 0 (tiny values kept, no overflow)."""
        (a, d), = vals
        if d not in FLOATS:
            self.fail(f"sigmoid() of {d}")
        one, zero = literal(1, d), literal(0, d)
        e = self.hold(f"math.exp(-abs({a}))", d)
        return self.hold(f"{one} / ({one} + {e}) if {a} >= {zero} else {e} / ({one} + {e})", d), d


_COMPARE = (S.LT, S.LE, S.GT, S.GE, S.EQ, S.NE)
_ARITHMETIC = (S.ADD, S.SUB, S.MUL, S.DIV, S.AND, S.OR)


def extreme(fn, a, b, d):
    """maximum/minimum of a and b as source text (NaN-propagating for floats, as NumPy's)."""
    cmp = ">" if fn == "maximum" else "<"
    if d in FLOATS:
        return f"{a} if ({a} {cmp} {b} or {a} != {a}) else {b}"
    return f"{a} if {a} {cmp} {b} else {b}"
