"""Guards: decisions on symbolic sizes (`lhs OP rhs`) a traced program holds under, their text, and
which of them hold for every size in the symbols' ranges (no guard needed). symint.py records them."""
import math

from .symexpr import Expr

OPS = {"==": lambda v: v == 0, "!=": lambda v: v != 0, "<": lambda v: v < 0, "<=": lambda v: v <= 0,
       ">": lambda v: v > 0, ">=": lambda v: v >= 0}
NEGATE = {"==": "!=", "!=": "==", "<": ">=", "<=": ">", ">": "<=", ">=": "<"}


def provable(diff, op, ranges):
    """Whether `diff OP 0` holds for every value in the ranges."""
    if diff.is_const():
        return OPS[op](diff.constant())
    lo, hi = diff.bounds(ranges)
    if op == "==":
        return False
    if op == "!=":
        step = math.gcd(*(c for m, c in diff.terms if m))      # 2*B - 1 is odd: never 0
        return (lo is not None and lo > 0) or (hi is not None and hi < 0) or diff.constant() % step != 0
    if op in (">", ">="):
        return lo is not None and OPS[op](lo)
    return hi is not None and OPS[op](hi)


def modular_text(env, diff, op):
    """`diff OP 0` as `E % k OP c` when diff is +-(E - k*(E//k)) + c (a divisibility test), else None."""
    names = [n for n in diff.symbols() if n in env.derived]
    if len(names) != 1:
        return None
    expr, k = env.derived[names[0]]
    q = Expr.symbol(names[0])
    for sign in (1, -1):
        c = diff - (expr - q * Expr.const(k)) * Expr.const(sign)
        if c.is_const():
            return f"{expr} % {k} {op if sign == 1 else FLIP[op]} {-sign * c.constant()}"
    return None


class Guard:
    """A decision `lhs OP rhs` on sizes that must hold for a program traced under it to apply."""
    __slots__ = ("lhs", "op", "rhs", "kind", "text")

    def __init__(self, lhs, op, rhs, kind="compare", text=None):
        lhs, op, rhs = _tidy(lhs, rhs, op)
        self.lhs, self.op, self.rhs, self.kind = lhs, op, rhs, kind
        self.text = text or f"{lhs} {op} {rhs}"

    def holds(self, env):
        return OPS[self.op](self.lhs.evaluate(env) - self.rhs.evaluate(env))

    def symbols(self):
        return self.lhs.symbols() | self.rhs.symbols()

    def __repr__(self):
        return f"Guard({self.text})"


def _tidy(lhs, rhs, op):
    """`lhs OP rhs` with symbols on the left, constants on the right: B - 1 > 0 reads B > 1, 3 - B > 0
    reads B < 3, B - S1 == 0 reads B == S1."""
    diff = lhs - rhs
    if all(c < 0 for m, c in diff.terms if m):
        diff, op = -diff, FLIP[op]
    left = Expr({m: c for m, c in diff.terms if m and c > 0})
    return left, op, left - diff


FLIP = {"==": "==", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


def narrow(rng, op, c):
    """A symbol's range (lo, hi; hi None: unbounded) narrowed by the guard `symbol op c`."""
    lo, hi = rng
    if op == "==":
        return c, c
    if op == "!=":
        return (lo + 1 if c == lo else lo), (hi - 1 if hi is not None and c == hi else hi)
    if op in (">", ">="):
        return max(lo, c + (op == ">")), hi
    bound = c - (op == "<")
    return lo, bound if hi is None else min(hi, bound)


def unification(lhs, rhs):
    """(symbol, expression) that records lhs == rhs as a replacement where lhs is one symbol (T == 6,
    B == S0) or a multiple of one equal to a constant it divides (16*S0 == 16: S0 == 1), else None."""
    names = lhs.symbols()
    if len(names) != 1 or (name := next(iter(names))) in rhs.symbols():
        return None
    if lhs == Expr.symbol(name):
        return name, rhs
    c = lhs.exact_div(Expr.symbol(name))
    if rhs.is_const() and c is not None and c.is_const() and c.constant() and rhs.constant() % c.constant() == 0:
        return name, Expr.const(rhs.constant() // c.constant())
    return None
