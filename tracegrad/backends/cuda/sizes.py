"""Sizes known only at the call (symbolic dimensions, tracegrad/symint.py) in the cuda target.

A graph traced with symbolic sizes (`B`, `T`) is planned and emitted once; its generated kernels take
each symbol they read as an int64 argument after their buffers (`n_B`), so loop bounds, strides and
offsets come from the call's sizes, and the launch grids, the intermediates, the fresh outputs and
the partial results of split reductions are sized per call from them (`at`). Nothing here compares
a symbolic size (that would record a guard): the planner's choices of speed look at hints.
"""
from ...ir.graph import bind_sizes
from ...symint import evaluate, free_symbols, is_sym

PREFIX = "n_"        # a generated kernel's argument holding symbol S: n_S


def text(d):
    """Python source text of size d: a literal, or the expression over the kernel's size arguments."""
    if not is_sym(d):
        return str(int(d))
    terms = []
    for mono, coef in d.expr.terms:
        factors = [f"{PREFIX}{s}" for s, power in mono for _ in range(power)]
        if coef != 1 or not factors:
            factors.insert(0, str(coef))
        terms.append(" * ".join(factors))
    return "(" + " + ".join(terms).replace("+ -", "- ") + ")"


def symbols(sizes):
    """The symbol names in the sizes `sizes` (ints and SymInts), sorted: a kernel's size arguments."""
    return sorted(free_symbols(tuple(d for d in sizes if is_sym(d))))


def at(env, x):
    """x (an int, a SymInt, a tuple or list of them, a dict of such values) with every symbol bound by
    `env` {name: int}; anything else as it is."""
    if isinstance(x, dict):
        return {k: bind_sizes(v, env) for k, v in x.items()}
    return bind_sizes(x, env)


class Blocks:
    """Blocks of a launch over `n` items (a symbolic size), `per` a block: ceil(n / per), at least 1
    (the kernels loop over an empty space), at most `most`; counted at the call (`at`)."""
    __slots__ = ("n", "per", "most")

    def __init__(self, n, per, most):
        self.n, self.per, self.most = n, per, most

    def at(self, env):
        return max(1, min(-(-evaluate(self.n, env) // self.per), self.most))

    def __repr__(self):
        return f"ceil({self.n}/{self.per})"


def grid_at(grid, env):
    """A launch's grid (an int, a Blocks, or a tuple of them) under the call's sizes."""
    if isinstance(grid, tuple):
        return tuple(grid_at(g, env) for g in grid)
    return grid.at(env) if isinstance(grid, Blocks) else grid
