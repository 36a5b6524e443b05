"""The scalar-expression vocabulary: what a primitive's lowering is made of (one element of its
result from its operands a, b, c; for a reduction, how an element b joins the accumulator a).

A lowering is typed data, not text: `Arg`s (the operands), `Lit`s (numbers) and `Call`s of a
vocabulary function `Fn` built with Python's operators and calls (`a + b`, `exp(a - b)`,
`where(ne(b, b), b, a * log(b))`). Each `Fn` declares its arity, its cost class ("cheap": a few
instructions; "transcendental": a math-library polynomial) and how the targets compute it:
`routine`, the name of its float32 and float64 math-library routines (backends/cpu/mathlib: `_<routine>_f32`
and `_<routine>_f64`; None for the inline functions every generator writes itself), `cuda`, its
numba.cuda name (`math.<cuda>`; None: written inline, a `_fn_<name>` of backends/cuda/emit/expr.py), and `host`, the NumPy (or scalar) function
the cuda simulator stands in with. The LLVM and cuda expression lowerings walk these trees; the
scheduler matches them (`head`). `str(expr)` is the expression as Python would write it.

A new transcendental is one `fn(...)` here or beside its primitive, and its two math-library routines.
"""
import math

import numpy as np

COSTS = ("cheap", "transcendental")
FUNCS = {}          # name -> Fn: the whole vocabulary


class Fn:
    """A function of the vocabulary (the fields: the module docstring). `symbol`: how an operator is
    written infix ("+", "<", ...) or prefix ("-", "~"); None for a call."""
    __slots__ = ("name", "arity", "cost", "routine", "cuda", "host", "symbol")

    def __init__(self, name, arity, cost, routine=None, cuda=None, host=None, symbol=None):
        self.name, self.arity, self.cost, self.routine = name, arity, cost, routine
        self.cuda, self.host, self.symbol = cuda, host, symbol

    def __call__(self, *args):
        if len(args) != self.arity:
            raise TypeError(f"{self.name}() takes {self.arity} operands, got {len(args)}")
        return Call(self, tuple(map(lit, args)))

    def __repr__(self):
        return f"<scalar fn {self.name}>"


def fn(name, arity, cost, *, routine=None, cuda=None, host=None, symbol=None):
    """Declare vocabulary function `name` (see the module docstring) and return it."""
    if name in FUNCS:
        raise ValueError(f"scalar function {name} is declared twice")
    if cost not in COSTS:
        raise ValueError(f"scalar function {name}: cost {cost!r} is not one of {COSTS}")
    if cost == "transcendental" and routine is None or (cuda is None) != (host is None):
        raise ValueError(f"scalar function {name}: a transcendental names its math-library routine, and a "
                         f"function with a cuda name the host function the simulator runs for it")
    FUNCS[name] = f = Fn(name, arity, cost, routine, cuda, host, symbol)
    return f


class Expr:
    """A scalar expression; Python's arithmetic, comparison (<, <=, >, >=; `eq`/`ne` for == and !=)
    and logical (&, |, ~) operators build larger ones."""
    __slots__ = ()

    def __add__(self, o): return ADD(self, o)
    def __radd__(self, o): return ADD(o, self)
    def __sub__(self, o): return SUB(self, o)
    def __rsub__(self, o): return SUB(o, self)
    def __mul__(self, o): return MUL(self, o)
    def __rmul__(self, o): return MUL(o, self)
    def __truediv__(self, o): return DIV(self, o)
    def __rtruediv__(self, o): return DIV(o, self)
    def __neg__(self): return NEG(self)
    def __lt__(self, o): return LT(self, o)
    def __le__(self, o): return LE(self, o)
    def __gt__(self, o): return GT(self, o)
    def __ge__(self, o): return GE(self, o)
    def __and__(self, o): return AND(self, o)
    def __or__(self, o): return OR(self, o)
    def __invert__(self): return NOT(self)

    def __repr__(self):
        return f"<scalar {self}>"


class Arg(Expr):
    """Operand `index` of the primitive (named a, b, c)."""
    __slots__ = ("index", "name")

    def __init__(self, index):
        self.index, self.name = index, "abc"[index]

    def __str__(self):
        return self.name


class Lit(Expr):
    """A number, typed like the operand it meets (or the result)."""
    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def __str__(self):
        return repr(self.value)


class Call(Expr):
    """Vocabulary function `fn` applied to `args`."""
    __slots__ = ("fn", "args", "head")

    def __init__(self, fn, args):
        self.fn, self.args = fn, args
        self.head = fn if all(isinstance(x, Arg) and x.index == i for i, x in enumerate(args)) else None

    def __str__(self):
        s = self.fn.symbol
        if s is None:
            return f"{self.fn.name}({', '.join(map(str, self.args))})"
        parts = [f"({x})" if isinstance(x, Call) and x.fn.symbol and x.fn.arity == 2 else str(x) for x in self.args]
        return f"{s}{parts[0]}" if self.fn.arity == 1 else f"{parts[0]} {s} {parts[1]}"


def lit(x):
    """x as an expression (a Python number becomes a Lit)."""
    if isinstance(x, Expr):
        return x
    if isinstance(x, (bool, int, float)):
        return Lit(x)
    raise TypeError(f"a scalar expression is built of operands, numbers and vocabulary functions, not {x!r}")


def walk(expr):
    """Every node of `expr`, parents before their arguments."""
    stack = [expr]
    while stack:
        x = stack.pop()
        yield x
        if isinstance(x, Call):
            stack.extend(reversed(x.args))


def calls(expr):
    """The vocabulary functions `expr` applies."""
    return {x.fn for x in walk(expr) if isinstance(x, Call)}


def arity(expr):
    """How many operands (a, b, c) `expr` reads: one more than the highest it names."""
    return 1 + max((x.index for x in walk(expr) if isinstance(x, Arg)), default=-1)


def cost(expr):
    """"transcendental" when `expr` calls a math-library function, else "cheap"."""
    return "transcendental" if any(f.cost == "transcendental" for f in calls(expr)) else "cheap"


def head(expr):
    """The function when `expr` is one vocabulary function applied to the operands in order
    (`exp(a)`, `a - b`, `maximum(a, b)`): the matcher the scheduler and the reductions ask; else None."""
    return expr.head if isinstance(expr, Call) else None       # found once, when the Call is made


a, b, c = Arg(0), Arg(1), Arg(2)
ARGS = (a, b, c)

# operators (the generators write each as an instruction or two)
ADD, SUB, MUL, DIV = (fn(n, 2, "cheap", symbol=s) for n, s in (("add", "+"), ("sub", "-"), ("mul", "*"), ("div", "/")))
NEG, NOT = fn("neg", 1, "cheap", symbol="-"), fn("not", 1, "cheap", symbol="~")
AND, OR = fn("and", 2, "cheap", symbol="&"), fn("or", 2, "cheap", symbol="|")
LT, LE, GT, GE, EQ, NE = (fn(n, 2, "cheap", symbol=s) for n, s in (("lt", "<"), ("le", "<="), ("gt", ">"),
                                                                  ("ge", ">="), ("eq", "=="), ("ne", "!=")))
eq, ne = EQ, NE

# the inline functions: a few instructions each in every generator
where = fn("where", 3, "cheap")
cast = fn("cast", 1, "cheap")                 # to the result's dtype
maximum, minimum = fn("maximum", 2, "cheap"), fn("minimum", 2, "cheap")
abs, sign = fn("abs", 1, "cheap"), fn("sign", 1, "cheap")      # noqa: A001  (the vocabulary's name)
floor, ceil, trunc = fn("floor", 1, "cheap"), fn("ceil", 1, "cheap"), fn("trunc", 1, "cheap")
sqrt = fn("sqrt", 1, "cheap", routine="sqrt", cuda="sqrt", host=np.sqrt)     # one instruction
sigmoid = fn("sigmoid", 1, "transcendental", routine="sigmoid")          # numba.cuda: inline (expr.py)

# the math library's: a float32 and a float64 routine each (backends/cpu/mathlib), math.<cuda> on the GPU
exp = fn("exp", 1, "transcendental", routine="exp", cuda="exp", host=np.exp)
log = fn("log", 1, "transcendental", routine="log", cuda="log", host=np.log)
tanh = fn("tanh", 1, "transcendental", routine="tanh", cuda="tanh", host=np.tanh)
sin = fn("sin", 1, "transcendental", routine="sin", cuda="sin", host=np.sin)
cos = fn("cos", 1, "transcendental", routine="cos", cuda="cos", host=np.cos)
erf = fn("erf", 1, "transcendental", routine="erf", cuda="erf", host=math.erf)
pow = fn("pow", 2, "transcendental", routine="pow", cuda="pow", host=np.power)   # noqa: A001
