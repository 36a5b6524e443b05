"""Sizes known only at the call: symbolic dimensions (tracegrad/symint.py) in the CPU code.

A graph traced with symbolic sizes (`B`, `T`) compiles once into one LLVM module; each call binds the
symbols from its input arrays' shapes (`Binder`) and writes their values into the program's sizes array,
an i64 per symbol of the module (`Symbols`: sorted by name) whose address sits in the pointer table
(driver.sizes_slot). Generated code reads a size through `operand`: a plain int is its literal, a symbolic
one (an integer polynomial over the symbols: `B*T`, `T-1`) a register computed once at the function's
entry from the array (`%sizes` in a kernel body, the table's slot in a driver segment). So loop
bounds, strides, offsets, extents and the BLAS call's M/N/K come from the call's sizes, and a new size
runs the same machine code.

Emitters must never format a SymInt into LLVM text (str gives `B*T`: invalid LLVM, a loud error) nor
decide on one with a comparison (that records a guard, pinning the program to a size range): they ask
`known(d, value)` (a plain int equal to value) or `hint(d)` (a heuristic's guess that changes speed, never
results). A strategy that needs a size compiled in is chosen on symbolic kernels only through
ir/passes/sized.py's `pin`, which records the guards `S == hint` and substitutes the hints.
"""
from ...ir.kernels import Tiles
from ...symint import evaluate, free_symbols, is_sym

NAME = "sizes"       # a kernel body's i64 array argument of the call's symbol values


class Symbols:
    """The symbols of one module's graphs, in the order of the sizes array."""

    def __init__(self, graphs):
        names = set()
        for g in graphs:
            if g is not None:
                for v in [*g.inputs, *(n.out for n in g.nodes)]:
                    names |= free_symbols(v.shape)
        self.names = sorted(names)
        self.index = {n: i for i, n in enumerate(self.names)}


def operand(f, d):
    """The i64 operand of size d in function f (scalar.Fn): a literal, or the register holding a
    symbolic size, computed once in f's entry block from its sizes array (f.sizes_array). A string is an
    operand already (a register)."""
    if isinstance(d, str):
        return d
    if not is_sym(d):
        return str(int(d))
    key = d.expr
    if key not in f.size_regs:
        f.size_regs[key] = expression(f.entry, f.sizes_array(), f.symbol_index, d.expr, f"%sz{len(f.size_regs)}")
    return f.size_regs[key]


def driver_operand(lines, c, d, symbol_index, sizes_slot):
    """operand() for driver code (a segment's lines, `%table` the program's pointer table): lines computing
    symbolic size d (or Tiles of one) are appended to `lines` (registers named after `c`); returns the
    operand."""
    if isinstance(d, Tiles):
        n = driver_operand(lines, c, d.n, symbol_index, sizes_slot)
        t = sum(1 for line in lines if line.startswith(f"  %{c}t"))
        lines += [f"  %{c}t{t}a = add nsw i64 {n}, {d.tile - 1}", f"  %{c}t{t} = sdiv i64 %{c}t{t}a, {d.tile}"]
        return f"%{c}t{t}"
    if not is_sym(d):
        return str(int(d))
    base = f"%{c}sizes"
    if not any(line.startswith(f"  {base} = ") for line in lines):
        lines += [f"  {base}p = getelementptr ptr, ptr %table, i64 {sizes_slot}", f"  {base} = load ptr, ptr {base}p"]
    n = sum(1 for line in lines if line.startswith(f"  %{c}z"))
    return expression(lines.append, base, symbol_index, d.expr, f"%{c}z{n}")


def expression(emit, array, index, expr, name):
    """Emit (through emit(line)) the i64 value of polynomial `expr` over the symbols in `array`;
    returns its register (`name`, or names derived from it)."""
    regs, n = {}, [0]

    def fresh():
        n[0] += 1
        return f"{name}.{n[0]}"

    def symbol(s):
        if s not in regs:
            p, r = fresh(), fresh()
            emit(f"  {p} = getelementptr i64, ptr {array}, i64 {index[s]}")
            emit(f"  {r} = load i64, ptr {p}")
            regs[s] = r
        return regs[s]

    total = None
    for mono, coef in expr.terms:
        term = None
        for s, power in mono:
            for _ in range(power):
                r = symbol(s)
                term = r if term is None else _assign(emit, fresh(), f"mul nsw i64 {term}, {r}")
        if term is None:
            term = str(coef)
        elif coef != 1:
            term = _assign(emit, fresh(), f"mul nsw i64 {term}, {coef}")
        total = term if total is None else _assign(emit, fresh(), f"add nsw i64 {total}, {term}")
    return _assign(emit, name, f"add nsw i64 {total or 0}, 0")


def _assign(emit, reg, text):
    emit(f"  {reg} = {text}")
    return reg


def value(d, env):
    """Size d (an int, a SymInt or Tiles of one) under the call's symbol values `env`."""
    if isinstance(d, Tiles):
        return -(-evaluate(d.n, env) // d.tile)
    return evaluate(d, env) if is_sym(d) else d


def varies(d):
    """Whether size d (an int, a SymInt or Tiles of one) is known only at the call."""
    return is_sym(d) or isinstance(d, Tiles)


def shape_at(shape, env):
    return tuple(evaluate(d, env) if is_sym(d) else d for d in shape)


def at(env, *xs):
    """xs (ints, SymInts, tuples, lists and dicts of them, anything else) with every size bound under env;
    one argument comes back as itself, several as a tuple."""
    def one(x):
        if is_sym(x):
            return evaluate(x, env)
        if isinstance(x, (tuple, list)):
            return type(x)(one(y) for y in x)
        if isinstance(x, dict):
            return {k: one(y) for k, y in x.items()}
        return x
    out = tuple(one(x) for x in xs)
    return out[0] if len(xs) == 1 else out


def symbolic(shape):
    return any(is_sym(d) for d in shape)


class Binder:
    """How a call's input arrays bind the symbols of graph inputs `inputs` (Values): each symbol from the
    first input dim that is that bare symbol; every other dim of an input of symbolic shape checked
    against its value (the inputs of plain shapes the caller checks as before)."""

    def __init__(self, inputs):
        self.inputs, self.first, self.checks = list(inputs), [], []
        self.ranks = [(i, len(v.shape)) for i, v in enumerate(inputs) if symbolic(v.shape)]
        seen = set()
        for i, v in enumerate(inputs):
            if not symbolic(v.shape):
                continue
            for d, n in enumerate(v.shape):
                name = _bare(n)
                if name is not None and name not in seen:
                    seen.add(name)
                    self.first.append((i, d, name))
                else:
                    self.checks.append((i, d, n))

    def values(self, arrays):
        """The symbols' values of a call, in the order of `first`."""
        for i, r in self.ranks:
            if arrays[i].ndim != r:
                v = self.inputs[i]
                raise ValueError(f"compiled kernel input {v.name}: expected {v.dtype.name}{list(v.shape)}, "
                                 f"got {arrays[i].dtype}{list(arrays[i].shape)}")
        return tuple([arrays[i].shape[d] for i, d, _ in self.first])

    def env(self, values):
        return {name: n for (_, _, name), n in zip(self.first, values)}

    def check(self, arrays, env):
        """ValueError naming the input and dim that disagrees with the symbols' values `env` (a caller's
        guard should have caught it first)."""
        for i, d, n in self.checks:
            try:
                want = evaluate(n, env) if is_sym(n) else n
            except KeyError as e:
                raise ValueError(f"compiled kernel input {self.inputs[i].name}: dim {d} is {n}, whose symbols no "
                                 f"input binds alone ({e})") from None
            if arrays[i].shape[d] != want:
                raise ValueError(f"compiled kernel input {self.inputs[i].name}: dim {d} is {n} = {want} under "
                                 f"{env}, got {list(arrays[i].shape)}")


def _bare(d):
    """The symbol name when size d is exactly one symbol, else None."""
    if not is_sym(d) or len(d.expr.terms) != 1:
        return None
    (mono, coef), = d.expr.terms
    return mono[0][0] if coef == 1 and len(mono) == 1 and mono[0][1] == 1 else None
