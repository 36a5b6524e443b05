"""Integer polynomials over symbol names (the expressions of symbolic sizes, symint.py) and their
text: `B*T+1`, `T-1`, `2*B`, `B**2`. A leaf: imports nothing of tracegrad."""
import hashlib
import re


class Expr:
    """An integer polynomial: terms {monomial: coefficient}, a monomial a sorted tuple of (name, power)."""
    __slots__ = ("terms", "_hash")

    def __init__(self, terms):
        self.terms = tuple(sorted((m, c) for m, c in dict(terms).items() if c))
        self._hash = hash(self.terms)

    @staticmethod
    def const(c):
        return Expr({(): int(c)})

    @staticmethod
    def symbol(name):
        return Expr({((name, 1),): 1})

    def is_const(self):
        return all(m == () for m, _ in self.terms)

    def constant(self):
        """The constant term."""
        return dict(self.terms).get((), 0)

    def symbols(self):
        return frozenset(n for m, _ in self.terms for n, _ in m)

    def __add__(self, other):
        out = dict(self.terms)
        for m, c in other.terms:
            out[m] = out.get(m, 0) + c
        return Expr(out)

    def __neg__(self):
        return Expr({m: -c for m, c in self.terms})

    def __sub__(self, other):
        return self + (-other)

    def __mul__(self, other):
        out = {}
        for m1, c1 in self.terms:
            for m2, c2 in other.terms:
                powers = dict(m1)
                for n, p in m2:
                    powers[n] = powers.get(n, 0) + p
                m = tuple(sorted(powers.items()))
                out[m] = out.get(m, 0) + c1 * c2
        return Expr(out)

    def exact_div(self, other):
        """self / other when `other` is one term dividing every term of self exactly, else None."""
        if len(other.terms) != 1:
            return None if self != other else Expr.const(1)
        (dm, dc), = other.terms
        out = {}
        for m, c in self.terms:
            powers = dict(m)
            for n, p in dm:
                if powers.get(n, 0) < p:
                    return None
                powers[n] -= p
            if c % dc:
                return None
            out[tuple(sorted((n, p) for n, p in powers.items() if p))] = c // dc
        return Expr(out)

    def subs(self, mapping):
        """The polynomial with the symbols in `mapping` {name: Expr} replaced."""
        out = Expr({})
        for m, c in self.terms:
            term = Expr.const(c)
            for n, p in m:
                base = mapping.get(n) or Expr.symbol(n)
                for _ in range(p):
                    term = term * base
            out = out + term
        return out

    def evaluate(self, env):
        """The value under bindings {name: int}; a derived symbol (B_div2) not bound is worked out."""
        total = 0
        for m, c in self.terms:
            v = c
            for n, p in m:
                if n in env:
                    v *= env[n] ** p
                elif n in DERIVED:
                    v *= (DERIVED[n][0].evaluate(env) // DERIVED[n][1]) ** p
                else:
                    raise KeyError(f"symbol {n} of {self} is not bound (bound: {sorted(env)})")
            total += v
        return total

    def bounds(self, ranges):
        """(lo, hi) of the polynomial over the symbols' ranges {name: (lo, hi|None)}; None = unbounded."""
        lo_t = hi_t = 0
        for m, c in self.terms:
            lo, hi = c, c
            for n, p in m:
                for _ in range(p):
                    lo, hi = _mul_iv((lo, hi), ranges.get(n, (0, None)))
            lo_t = None if lo_t is None or lo is None else lo_t + lo
            hi_t = None if hi_t is None or hi is None else hi_t + hi
        return lo_t, hi_t

    def __eq__(self, other):
        return isinstance(other, Expr) and self.terms == other.terms

    def __hash__(self):
        return self._hash

    def __str__(self):
        if not self.terms:
            return "0"
        parts = []
        order = sorted(self.terms, key=lambda t: (-sum(p for _, p in t[0]), t[0]))
        for m, c in order:
            names = "*".join(n if p == 1 else f"{n}**{p}" for n, p in m)
            body = str(abs(c)) if not names else names if abs(c) == 1 else f"{abs(c)}*{names}"
            parts.append(("-" if c < 0 else "+") + body)
        text = "".join(parts)
        return text[1:] if text[0] == "+" else text

    __repr__ = __str__


DERIVED = {}     # name -> (Expr, k): the symbol that is Expr // k, for every process-wide name (derived_name)


def derived_name(expr, k):
    """The symbol name of expr // k (k > 0), the same for the same pair: B_div2, B_p2_div3 for (B+2)//3."""
    text = str(expr).replace("**", "_pow").replace("+", "_p").replace("-", "_m").replace("*", "_x")
    name = f"{text if text.isidentifier() else 'D_' + text}_div{k}"
    if not name.isidentifier() or DERIVED.get(name, (expr, k)) != (expr, k):
        name = f"D{hashlib.sha1(f'{expr}//{k}'.encode()).hexdigest()[:8]}_div{k}"
    DERIVED[name] = (expr, k)
    return name


def _mul_iv(a, b):
    """Product of intervals whose ends may be None (unbounded); the second is a symbol's (lo >= 0)."""
    (alo, ahi), (blo, bhi) = a, b
    if blo < 0:
        raise ValueError("symbol ranges start at 0 or above")
    # b >= 0: the product's low end is alo*blo if alo >= 0 else alo*bhi; high end likewise
    def prod(x, y):
        if x == 0 or y == 0:
            return 0
        return None if x is None or y is None else x * y
    lo = prod(alo, blo) if alo is not None and alo >= 0 else (None if alo is None else prod(alo, bhi))
    hi = prod(ahi, bhi) if ahi is None or ahi >= 0 else prod(ahi, blo)
    return lo, hi


_TOKEN = re.compile(r"\s*(?:(\d+)|([A-Za-z_]\w*)|(\*\*|[-+*()]))")


def parse_expr(text):
    """The Expr that str(expr) prints: integers, names, + - * ** and parentheses."""
    tokens, pos = [], 0
    text = text.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise ValueError(f"cannot read the size expression {text!r} at {pos}")
        tokens.append(m.group(1) or m.group(2) or m.group(3))
        pos = m.end()
    tokens.append(None)
    i = 0

    def peek():
        return tokens[i]

    def take():
        nonlocal i
        i += 1
        return tokens[i - 1]

    def atom():
        t = take()
        if t == "(":
            e = summ()
            if take() != ")":
                raise ValueError(f"unbalanced parentheses in {text!r}")
            return e
        if t == "-":
            return -factor()
        if t is None or not (t.isdigit() or t[0].isalpha() or t[0] == "_"):
            raise ValueError(f"cannot read the size expression {text!r}")
        return Expr.const(int(t)) if t.isdigit() else Expr.symbol(t)

    def factor():
        base = atom()
        if peek() == "**":
            take()
            p = take()
            if p is None or not p.isdigit():
                raise ValueError(f"powers must be integers in {text!r}")
            out = Expr.const(1)
            for _ in range(int(p)):
                out = out * base
            return out
        return base

    def product():
        e = factor()
        while peek() == "*":
            take()
            e = e * factor()
        return e

    def summ():
        e = product()
        while peek() in ("+", "-"):
            e = e + product() if take() == "+" else e - product()
        return e

    e = summ()
    if peek() is not None:
        raise ValueError(f"cannot read the size expression {text!r}")
    return e
