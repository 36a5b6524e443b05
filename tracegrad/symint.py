"""Symbolic sizes: an int that records every decision made on it (imports only symexpr.py, a leaf).

A `SymInt` is a size with a hint (the size seen when traced) and an `expr`, an integer polynomial over
symbol names (`B*T+1`). Arithmetic keeps the expression; a comparison is decided on the hints and, unless it
holds for every value in the symbols' ranges, recorded as a guard in the active `ShapeEnv`. Concretizing
(`int()`, `float()`, `hash()`, `__index__`: range(n), [0] * n, NumPy shapes, "%d") specializes: it records
`sym == hint`. A SymInt is NOT an `int` subclass (as torch's), so no C code reads its value unguarded; code
that accepts sizes tests `is_size(d)`, and code that wants the number for speed only reads `hint(d)`.
"""
import math
import numbers
import operator
import threading

from .symexpr import Expr, derived_name, parse_expr
from .symguard import NEGATE, OPS, Guard, modular_text, narrow, provable, unification

__all__ = ["Expr", "SymInt", "Guard", "ShapeEnv", "sym", "is_sym", "hint", "hints", "same_size", "same_shape",
           "slice_bounds", "slice_length", "evaluate", "bind", "free_symbols", "substitute", "active", "using",
           "parse_expr", "as_expr", "is_size", "as_size", "specialize"]


def as_size(d):
    """`d` as a size: a SymInt as it is, any other integer as an int (TypeError if it is none)."""
    return d if isinstance(d, SymInt) else operator.index(d)


def is_size(d):
    """Whether `d` is an integer usable as a size or an index: an int (not a bool), a NumPy integer, a SymInt."""
    return isinstance(d, (SymInt, numbers.Integral)) and not isinstance(d, bool)


def as_expr(d):
    return d.expr if isinstance(d, SymInt) else Expr.const(int(d))


def _make(expr, hint_value):
    """A SymInt, or a plain int when the expression is constant."""
    if expr.is_const():
        return expr.constant()
    return SymInt(expr, hint_value)


def _arith(op, reflected=False):
    """A SymInt method applying `op` (+ - *) to the expressions and to the hints."""
    def method(self, other):
        a, b = (other, self) if reflected else (self, other)
        if isinstance(other, float):            # a float result: the size's value, specialized
            return op(float(a), float(b))
        if not is_size(other):
            return NotImplemented
        return _make(op(as_expr(a), as_expr(b)), op(hint(a), hint(b)))
    return method


def _on_int(op, reflected=False):
    """A SymInt method applying `op` to its specialized value (a guard sym == hint)."""
    def method(self, other):
        if not is_size(other):
            return NotImplemented
        return op(int(other), int(self)) if reflected else op(int(self), int(other))
    return method


def _comparison(op):
    return lambda self, other: _compare(self, other, op)


class SymInt:
    """A size: the polynomial `expr` over symbol names and its value at the traced sizes (the hint)."""
    __slots__ = ("expr", "_hint")

    def __init__(self, expr, hint_value):
        self.expr, self._hint = expr, int(hint_value)

    def __reduce__(self):
        return (SymInt, (self.expr, self._hint))

    # arithmetic: the expression and the hint alike
    __add__, __radd__ = _arith(operator.add), _arith(operator.add, True)
    __sub__, __rsub__ = _arith(operator.sub), _arith(operator.sub, True)
    __mul__, __rmul__ = _arith(operator.mul), _arith(operator.mul, True)

    def __neg__(self):
        return _make(-self.expr, -hint(self))

    def __pos__(self):
        return self

    def __abs__(self):
        return self if self >= 0 else -self

    def __floordiv__(self, o):
        return _divide(self, o, False)

    def __rfloordiv__(self, o):
        return _divide(o, self, False) if is_size(o) else NotImplemented

    def __mod__(self, o):
        return _divide(self, o, True)

    def __rmod__(self, o):
        return _divide(o, self, True) if is_size(o) else NotImplemented

    def __divmod__(self, o):
        return self // o, self % o

    def __truediv__(self, o):
        return float(self) / o if isinstance(o, (numbers.Number, SymInt)) else NotImplemented

    def __rtruediv__(self, o):
        return o / float(self) if isinstance(o, numbers.Number) else NotImplemented

    def __pow__(self, o):
        if isinstance(o, numbers.Integral) and o >= 0:
            out = Expr.const(1)
            for _ in range(o):
                out = out * self.expr
            return _make(out, hint(self) ** o)
        return int(self) ** o if isinstance(o, (numbers.Number, SymInt)) else NotImplemented

    def __rpow__(self, o):
        return o ** int(self) if isinstance(o, numbers.Number) else NotImplemented

    # comparisons: decided on the hints, recorded as guards unless provable
    __eq__, __ne__, __lt__ = _comparison("=="), _comparison("!="), _comparison("<")
    __le__, __gt__, __ge__ = _comparison("<="), _comparison(">"), _comparison(">=")

    def __bool__(self):
        return _compare(self, 0, "!=")

    # concretizing: specialize
    def __int__(self):
        return _specialize(self)

    def __index__(self):
        return _specialize(self)

    __trunc__ = __int__
    __floor__ = __int__
    __ceil__ = __int__

    # bitwise operators and bit_length: on the number, specialized
    __and__, __rand__ = _on_int(operator.and_), _on_int(operator.and_, True)
    __or__, __ror__ = _on_int(operator.or_), _on_int(operator.or_, True)
    __xor__, __rxor__ = _on_int(operator.xor), _on_int(operator.xor, True)
    __lshift__, __rlshift__ = _on_int(operator.lshift), _on_int(operator.lshift, True)
    __rshift__, __rrshift__ = _on_int(operator.rshift), _on_int(operator.rshift, True)

    def __invert__(self):
        return ~int(self)

    def bit_length(self):
        return int(self).bit_length()

    def __round__(self, ndigits=None):
        return _specialize(self)

    def __float__(self):
        return float(_specialize(self))

    def __hash__(self):
        return hash(_specialize(self))

    def __format__(self, spec):
        return str(self) if not spec or spec in ("s",) else format(_specialize(self), spec)

    def __str__(self):
        return str(self.expr)

    __repr__ = __str__


def hint(d):
    """The plain int value of a size (its hint for a SymInt); no guard recorded."""
    return d._hint if isinstance(d, SymInt) else int(d)


def is_sym(d):
    return isinstance(d, SymInt)


def slice_bounds(sl, size):
    """`sl.indices(size)` (Python's rule) where the size or the bounds may be symbolic: each decision
    a guard (x[:n-1] with n = B records B >= 1)."""
    if not any(map(is_sym, (sl.start, sl.stop, sl.step, size))):
        return sl.indices(size)
    step = 1 if sl.step is None else int(sl.step)
    if step == 0:
        raise ValueError("slice step cannot be zero")
    lower, upper = (-1, size - 1) if step < 0 else (0, size)

    def adjust(v, default):
        if v is None:
            return default
        if v < 0:
            v = v + size
            return lower if v < lower else v
        return upper if v > upper else v   # v == upper slices the same: the guard is v <= upper
    return adjust(sl.start, upper if step < 0 else lower), adjust(sl.stop, lower if step < 0 else upper), step


def slice_length(start, stop, step):
    """len(range(start, stop, step)) where the bounds may be symbolic (step > 0)."""
    if not (is_sym(start) or is_sym(stop)):
        return len(range(start, stop, step))
    d = stop - start
    if not d >= 0:
        return 0
    return d if step == 1 else (d + step - 1) // step


def same_size(a, b):
    """Whether two sizes are equal for every value of their symbols that passes the active env's
    guards (records no guard)."""
    if not isinstance(a, SymInt) and not isinstance(b, SymInt):     # plain sizes: no expression to build
        return a == b
    diff = as_expr(a) - as_expr(b)
    env = active()
    return not (diff if env is None else env.simplify(diff)).terms


def same_shape(a, b):
    """Whether two shapes are equal for every value of their symbols (records no guard)."""
    return len(a) == len(b) and all(map(same_size, a, b))


def hints(x):
    """A size, shape or attribute (tuples and lists item by item) with each SymInt as its hint."""
    if isinstance(x, SymInt):
        return x._hint
    if type(x) in (tuple, list):
        return type(x)(hints(a) for a in x)
    if type(x) is dict:
        return {k: hints(v) for k, v in x.items()}
    return x


def _specialize(s, why=None):
    v = hint(s)
    _decide(s.expr - Expr.const(v), "==", True, kind="specialize", lhs=s.expr, rhs=Expr.const(v), why=why)
    return v


def specialize(d, why):
    """int(d), its guard `d == hint` naming `why` (the retrace reason says why a size is compiled in)."""
    return _specialize(d, why) if isinstance(d, SymInt) else int(d)


def _divide(a, b, mod):
    env = active()
    ea, eb = (e if env is None else env.simplify(e) for e in (as_expr(a), as_expr(b)))   # B*T // 2*B with T == 6
    if hint(b) == 0:
        raise ZeroDivisionError("integer division or modulo by zero")
    if not isinstance(b, SymInt) and int(b) < 0:         # a // -c == -a // c, a % -c == -(-a % c)
        r = _divide(-a, -int(b), mod)
        return -r if mod else r
    q = ea.exact_div(eb)
    if q is not None and (not isinstance(b, SymInt) or b > 0):
        return 0 if mod else _make(q, hint(a) // hint(b))
    if not isinstance(b, SymInt) and isinstance(a, SymInt) and env is not None:    # B // 2: a derived symbol
        k = int(b)
        whole = Expr({m: c // k for m, c in ea.terms})                           # ea == k*whole + rest
        rest = Expr({m: c % k for m, c in ea.terms})
        if rest.is_const():
            q = _make(whole + Expr.const(rest.constant() // k), hint(a) // k)
        else:
            q = _make(whole + as_expr(env.floordiv(rest, k)), hint(a) // k)
        return a - k * q if mod else q
    if isinstance(b, SymInt) and 0 <= hint(a) < hint(b) and a >= 0 and a < b:     # guards: roll(2) of B rows
        return a if mod else 0
    if isinstance(b, SymInt) and -hint(b) < hint(a) < 0 and a < 0 and a + b > 0:   # roll(-1): -1 % B == B-1
        return a + b if mod else -1
    a, b = (int(a) if isinstance(a, SymInt) else a), (int(b) if isinstance(b, SymInt) else b)
    return a % b if mod else a // b




def _compare(a, b, op):
    if isinstance(b, float) and math.isfinite(b):     # an int against a float: the int bound it means
        if b != math.floor(b) and op in ("==", "!="):
            return op == "!="
        b = math.floor(b) if op in (">", "<=") else math.ceil(b)
    elif isinstance(b, float):
        return OPS[op](0.0 - b) if not math.isnan(b) else op == "!="      # +-inf, nan: whatever the size
    if not is_size(b):
        return NotImplemented
    ea, eb = as_expr(a), as_expr(b)
    answer = OPS[op](hint(a) - hint(b))
    final = op if answer else NEGATE[op]
    _decide(ea - eb, final, answer, kind="compare", lhs=ea, rhs=eb)
    return answer


def _decide(diff, op, answer, kind, lhs, rhs, why=None):
    """Record `lhs OP rhs` (true under the hints) in the active env unless provable over the ranges;
    `why` (a specialization's cause) follows the guard's text."""
    env = active()
    ranges = env.ranges() if env is not None else {}
    if provable(diff if env is None else env.simplify(diff), op, ranges):
        return
    if env is None:
        raise RuntimeError(f"a decision on symbolic sizes ({lhs} {op} {rhs}) outside any ShapeEnv: no compile "
                           f"is recording guards, so no one could check it")
    guard = Guard(lhs, op, rhs, kind, modular_text(env, lhs - rhs, op))
    if why:
        guard.text = f"{guard.text} ({why})"
    env.add_guard(guard)


class LateGuard(RuntimeError):
    """A new guard asked of a sealed ShapeEnv: decided on the trace's sizes after calls of other sizes
    were checked against the guards (or while one runs), so no one would check it for them. The
    compile asking takes a choice that holds for every size instead (joined.py, entry.py)."""


class ShapeEnv:
    """One compile's symbols (name -> (lo, hi, source)) and the guards recorded on them. Sealed
    (dynamic.py, once the symbolic graphs are lowered), it refuses a new guard: LateGuard."""

    def __init__(self):
        self.symbols = {}
        self.guards = []
        self.sealed = False
        self._texts = set()
        self.extra_sources = {}          # name -> further (input, dim) sources that share the symbol
        self.replacements = {}           # name -> the Expr an equality guard made it (unification)
        self.hints = {}                  # name -> the size seen when traced
        self.derived = {}                # name -> (Expr, k): a symbol that is Expr // k (B // 2), bound per call

    def sym(self, name, hint_value, lo=0, hi=None, source=None):
        if name in self.symbols:
            raise ValueError(f"symbol {name} already exists in this ShapeEnv")
        if lo < 0 or hint_value < lo or (hi is not None and hint_value > hi):
            raise ValueError(f"symbol {name}: hint {hint_value} outside its range [{lo}, {hi}]")
        self.symbols[name] = (lo, hi, source)
        self.hints[name] = hint_value
        return SymInt(Expr.symbol(name), hint_value)

    def floordiv(self, expr, k):
        """The symbol that is `expr // k` (k > 0): made once per (expr, k), its value worked out from the
        others' at each call (`derive`), so B // 2 and B % 2 == B - 2*(B//2) stay expressions."""
        name = derived_name(expr, k)
        if name in self.symbols:
            raise ValueError(f"the symbol {name} of {expr} // {k} is an input's symbol too")
        if name not in self.derived:
            self.derived[name], self.hints[name] = (expr, k), expr.evaluate(self.hints) // k
        return SymInt(Expr.symbol(name), self.hints[name])

    def derive(self, env):
        """`env` {name: int} of the input symbols with the derived ones (B_div2) added."""
        env = dict(env)
        for name, (expr, k) in self.derived.items():
            if name not in env:
                env[name] = expr.evaluate(env) // k
        return env

    def add_source(self, name, source):
        """Another input dim that takes the same symbol (checked equal at each call)."""
        self.extra_sources.setdefault(name, []).append(source)

    def add_guard(self, guard):
        if guard.text not in self._texts and self.sealed:
            raise LateGuard(f"the decision {guard.text} on symbolic sizes was asked after the guards were fixed "
                            f"(decided on the trace's sizes, no call of other sizes would check it)")
        if guard.text not in self._texts:
            self._texts.add(guard.text)
            self.guards.append(guard)
            if guard.op == "==":           # in the terms of the earlier unifications: S0 == 1, then S0 == B: B == 1
                lhs, rhs = self.simplify(guard.lhs), self.simplify(guard.rhs)
                found = (unification(lhs, rhs) or unification(rhs, lhs)) if lhs != rhs else None
                if found:
                    self.replacements[found[0]] = found[1]

    def simplify(self, expr):
        """`expr` with each symbol an equality guard ties to another expression replaced by it."""
        for _ in range(len(self.replacements)):
            if not expr.symbols() & set(self.replacements):
                break
            expr = expr.subs(self.replacements)
        return expr

    def ranges(self):
        """Each symbol's range narrowed by the guards on it alone (B != 0 with lo 0 gives lo 1)."""
        out = {n: (lo, hi) for n, (lo, hi, _) in self.symbols.items()}
        for name, (expr, k) in self.derived.items():      # expr's terms have coefficients in [0, k): lo >= 0
            lo, hi = expr.bounds(out)
            out[name] = (lo // k, None if hi is None else hi // k)
        for g in self.guards:
            names = g.lhs.symbols()
            if len(names) == 1 and g.rhs.is_const() and g.lhs == Expr.symbol(next(iter(names))):
                name = next(iter(names))
                out[name] = narrow(out.get(name, (0, None)), g.op, g.rhs.constant())
        return out

    def bind(self, shapes):
        """Symbol values from a call's input shapes {input name: shape}."""
        env = {}
        for name, (_, _, source) in self.symbols.items():
            if source is not None and source[0] in shapes:
                env[name] = hint(shapes[source[0]][source[1]])
        return env

    def check(self, env, shapes=None):
        """The text of the first condition that fails under env (a range, a shared size, a guard), or None."""
        env = self.derive(env)
        for name, (lo, hi, _) in self.symbols.items():
            if name in env and (env[name] < lo or (hi is not None and env[name] > hi)):
                return f"{name} = {env[name]} outside [{lo}, {'inf' if hi is None else hi}]"
        for name, sources in self.extra_sources.items():
            for inp, dim in sources:
                if shapes is not None and inp in shapes and shapes[inp][dim] != env.get(name):
                    return f"{inp}.shape[{dim}] == {name} failed ({shapes[inp][dim]} != {env.get(name)})"
        for g in self.guards:
            if not g.holds(env):
                return f"{g.text} failed ({', '.join(f'{n} = {env[n]}' for n in sorted(g.symbols()))})"
        return None

    def specializations(self):
        return [g for g in self.guards if g.kind == "specialize"]

    def pinned(self):
        """{symbol: value} of the symbols an equality guard fixed to a number (T == 784)."""
        fixed = {n: self.simplify(Expr.symbol(n)) for n in self.replacements}       # through chains: T -> S1 -> 64
        return {n: e.constant() for n, e in fixed.items() if e.is_const()}


_local = threading.local()


def active():
    """The ShapeEnv recording guards on this thread, or None."""
    stack = getattr(_local, "stack", None)
    return stack[-1] if stack else None


class using:
    """`with using(env):` makes env the active ShapeEnv on this thread (None: no env)."""

    def __init__(self, env):
        self.env = env

    def __enter__(self):
        if not hasattr(_local, "stack"):
            _local.stack = []
        _local.stack.append(self.env)
        return self.env

    def __exit__(self, *exc):
        _local.stack.pop()


def sym(name, hint_value, lo=0, hi=None, source=None):
    """A fresh symbol `name` valued `hint_value` in the active ShapeEnv (range [lo, hi])."""
    env = active()
    if env is None:
        raise RuntimeError(f"sym({name!r}): no active ShapeEnv (use `with using(ShapeEnv()):`)")
    return env.sym(name, hint_value, lo, hi, source)


def evaluate(d, env):
    """The value of an int or SymInt under bindings {name: int}."""
    return d.expr.evaluate(env) if isinstance(d, SymInt) else int(d)


def bind(d, env):
    """An int or SymInt with the symbols `env` {name: int} binds replaced: an int once none is left."""
    if not isinstance(d, SymInt):
        return d
    if d.expr.symbols() <= set(env):
        return d.expr.evaluate(env)
    return _make(d.expr.subs({n: Expr.const(v) for n, v in env.items()}), hint(d))


def free_symbols(x):
    """The symbol names in a dim or a shape (any nesting of tuples/lists)."""
    if isinstance(x, SymInt):
        return x.expr.symbols()
    if isinstance(x, (tuple, list)):
        return frozenset().union(*(free_symbols(d) for d in x)) if x else frozenset()
    return frozenset()


def substitute(shape, env):
    """`shape` with every symbol bound: a tuple of plain ints."""
    return tuple(evaluate(d, env) for d in shape)
