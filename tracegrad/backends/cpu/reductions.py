"""How a reduction accumulates: join, identity, accumulator type, and blocked float sums (accuracy)."""
from ... import scalar as S
from ...dtypes import float64
from ...scalar import head
from .loops import ROLLED, SCALAR, _loops, _while
from ...ir.kernels import known
from ...symint import hint, is_sym
from .scalar import SHORT, const_text, fconst, regtype

BLOCK = 128    # reduced elements summed into a partial vector before it joins the total (accuracy)
MIN_BLOCK = BLOCK  # float32: shorter innermost loops add each element to the float64 total


def _join(lower):
    """How a reduction's lowering joins an element b to the accumulator a: "+", "maximum" or "minimum"."""
    how = _JOINS.get(head(lower))
    if how is None:
        raise RuntimeError(f"the LLVM generator does not understand the reduction lowering {lower}")
    return how


_JOINS = {S.ADD: "+", S.maximum: "maximum", S.minimum: "minimum"}


def _identity(lower, dtype):
    """The accumulator's start: 0 for a sum (+0.0, as NumPy: a sum of -0.0 is +0.0), the lowest value
    for a maximum, the highest for a minimum."""
    how = _join(lower)
    if how == "+":
        return const_text(0, dtype)
    low = how == "maximum"
    if dtype.is_floating_point:
        return fconst(float("-inf") if low else float("inf"), dtype)
    info = {"int32": 2 ** 31, "int64": 2 ** 63}[dtype.name]
    return str(-info) if low else str(info - 1)


def _combine(f, lower, acc, v, dtype):
    """acc joined with v. Float sums are `reassoc` so LLVM vectorizes them, and carry no other
    fast-math flag: with `nsz` LLVM also reassociates into the element's own expression and folds
    NaN-producing parts away (acc + (x - x) -> acc where x is inf/NaN). Without `nsz` LLVM joins
    vector lanes in order and does not vectorize a row's sum horizontally: short rows add in order
    (float32 rows shorter than MIN_BLOCK add in float64, so only float64 rows pay for it)."""
    ty, how = regtype(dtype), _join(lower)
    if how == "+":
        return f.assign(f"fadd reassoc {ty} {acc}, {v}" if dtype.is_floating_point else f"add {ty} {acc}, {v}")
    if dtype.is_floating_point:
        return f.assign(f"call {ty} @llvm.{how}.{SHORT[dtype.name]}({ty} {acc}, {ty} {v})")
    c = f.assign(f"icmp {'sgt' if how == 'maximum' else 'slt'} {ty} {v}, {acc}")
    return f.assign(f"select i1 {c}, {ty} {v}, {ty} {acc}")


def _acc_dtype(lower, dtype):
    """The type a reduction's total is kept in: float64 for float sums, else the value's own."""
    return float64 if dtype.is_floating_point and _join(lower) == "+" else dtype


def _widen(f, x, dtype, acc):
    return x if acc is dtype else f.assign(f"fpext {regtype(dtype)} {x} to {regtype(acc)}")


def _narrow(f, x, dtype, acc):
    return x if acc is dtype else f.assign(f"fptrunc {regtype(acc)} {x} to {regtype(dtype)}")


class _Acc:
    """A reduction's accumulator in registers. Float sums are blocked: the elements of a block (a run
    of at most BLOCK elements of the innermost loop) add into a partial of the values' type, which
    LLVM vectorizes, and each block's partial joins a float64 total. float32: the result has the
    accuracy of a float64 sum rounded once, at the speed of a float32 one. float64: the block sums
    join pairwise (a binary counter of partial sums, `levels`), as NumPy's pairwise sum does.
    Without block hooks (run None), or for float32 values in an innermost loop shorter than
    MIN_BLOCK, every element adds to the total."""

    def __init__(self, f, lower, dtype, run):
        self.f, self.lower, self.dtype, self.at = f, lower, dtype, _acc_dtype(lower, dtype)
        self.total = f.alloca(regtype(self.at))
        # run: the innermost loop's length (None: no block hooks); float64 values always block
        blocked = run is not None and (self.at is dtype or hint(run) >= MIN_BLOCK)   # a guess where symbolic
        float_sum = _join(lower) == "+" and dtype.is_floating_point
        self.part = f.alloca(regtype(dtype)) if blocked and float_sum else None
        self.levels = None
        if self.part and dtype is self.at:          # float64: pairwise over the blocks
            self.levels, self.count = f.alloca("[64 x double]"), f.alloca("i64")
            f.emit(f"store i64 0, ptr {self.count}")
        f.emit(f"store {regtype(self.at)} {_identity(lower, self.at)}, ptr {self.total}")

    def begin(self, f):
        if self.part:
            f.emit(f"store {regtype(self.dtype)} {_identity(self.lower, self.dtype)}, ptr {self.part}")

    def add(self, f, x):
        into, dt = (self.part, self.dtype) if self.part else (self.total, self.at)
        cur = f.assign(f"load {regtype(dt)}, ptr {into}")
        f.emit(f"store {regtype(dt)} {_combine(f, self.lower, cur, _widen(f, x, self.dtype, dt), dt)}, ptr {into}")

    def end(self, f):
        if not self.part:
            return
        x = _widen(f, f.assign(f"load {regtype(self.dtype)}, ptr {self.part}"), self.dtype, self.at)
        if self.levels:
            self._carry(f, x)
            return
        cur = f.assign(f"load {regtype(self.at)}, ptr {self.total}")
        f.emit(f"store {regtype(self.at)} {_combine(f, self.lower, cur, x, self.at)}, ptr {self.total}")

    def _carry(self, f, x):
        """Block sum x joins the binary counter: while the count's bit at `level` is set, x adds the
        partial kept there and moves up; then it is kept at the first free level."""
        n = f.assign(f"load i64, ptr {self.count}")
        val, lvl, rest = f.alloca("double"), f.alloca("i64"), f.alloca("i64")
        f.emit(f"store double {x}, ptr {val}")
        f.emit(f"store i64 0, ptr {lvl}")
        f.emit(f"store i64 {n}, ptr {rest}")

        def head(f):
            r = f.assign(f"load i64, ptr {rest}")
            return f.assign(f"trunc i64 {r} to i1"), r

        def body(f, r):
            i = f.assign(f"load i64, ptr {lvl}")
            p = f.assign(f"getelementptr inbounds [64 x double], ptr {self.levels}, i64 0, i64 {i}")
            v = f.assign(f"fadd double {f.assign(f'load double, ptr {val}')}, {f.assign(f'load double, ptr {p}')}")
            f.emit(f"store double {v}, ptr {val}")
            f.emit(f"store i64 {f.assign(f'add i64 {i}, 1')}, ptr {lvl}")
            f.emit(f"store i64 {f.assign(f'lshr i64 {r}, 1')}, ptr {rest}")
        _while(f, head, body)
        i = f.assign(f"load i64, ptr {lvl}")
        p = f.assign(f"getelementptr inbounds [64 x double], ptr {self.levels}, i64 0, i64 {i}")
        f.emit(f"store double {f.assign(f'load double, ptr {val}')}, ptr {p}")
        f.emit(f"store i64 {f.assign(f'add i64 {n}, 1')}, ptr {self.count}")

    def _kept(self, f):
        """The kept partials join the total, smallest first (the levels whose bit the count has; an
        unset one adds 0.0), then what did not block. A loop up to the count's highest bit, then one
        + 0.0 for the levels above it (adding 0.0 again changes nothing): the same additions as 64
        written out (a float64 layer norm's module: 225 KB of IR text, 73 KB so)."""
        n = f.assign(f"load i64, ptr {self.count}")
        lvl = f.alloca("i64")
        f.emit(f"store i64 0, ptr {lvl}")

        def head(f):
            i = f.assign(f"load i64, ptr {lvl}")
            return f.assign(f"icmp ne i64 {f.assign(f'lshr i64 {n}, {i}')}, 0"), i

        def body(f, i):
            bit = f.assign(f"and i64 {f.assign(f'lshr i64 {n}, {i}')}, 1")
            p = f.assign(f"getelementptr inbounds [64 x double], ptr {self.levels}, i64 0, i64 {i}")
            kept = f.assign(f"select i1 {f.assign(f'icmp ne i64 {bit}, 0')}, double "
                            f"{f.assign(f'load double, ptr {p}')}, double 0.0")
            cur = f.assign(f"load double, ptr {self.total}")
            f.emit(f"store double {f.assign(f'fadd double {cur}, {kept}')}, ptr {self.total}")
            f.emit(f"store i64 {f.assign(f'add i64 {i}, 1')}, ptr {lvl}")
        _while(f, head, body, SCALAR)
        cur = f.assign(f"load double, ptr {self.total}")
        above = f.assign(f"icmp ult i64 {f.assign(f'load i64, ptr {lvl}')}, 64")
        plus = f.assign(f"fadd double {cur}, 0.0")
        f.emit(f"store double {f.assign(f'select i1 {above}, double {plus}, double {cur}')}, ptr {self.total}")

    def result(self, f):
        if self.levels:
            self._kept(f)
        return _narrow(f, f.assign(f"load {regtype(self.at)}, ptr {self.total}"), self.dtype, self.at)


def _squeezed(dims):
    """dims without its trailing axes of length 1."""
    dims = list(dims)
    while dims and known(dims[-1], 1):
        dims.pop()
    return dims


def _blocked_loops(f, dims, body, accs, lo_hi=None, aligned=None, meta=None, rolled=False):
    """_loops, with the innermost axis run in blocks of at most BLOCK elements, each between the
    accumulators' begin() and end(). aligned(f, oidx) -> (head, on_block) (a row whose stores
    stream, backends/cpu/stream.py): the first `head` elements of the row run alone, left scalar, so the
    blocks start on a whole aligned vector, and on_block(f, oidx, start) emits at each block's start
    (llvm.assume of its stores' alignment)."""
    ones = len(dims) - len(_squeezed(dims))
    if ones and ones < len(dims):          # trailing axes of length 1: block the last longer one
        def inner(f, idx, body=body):
            body(f, list(idx) + ["0"] * ones)
        dims, body = dims[:-ones], inner
    if not dims or not (aligned or any(a.part for a in accs)):
        for a in accs:
            a.begin(f)
        _loops(f, dims, body, lo_hi, meta, rolled=rolled)
        for a in accs:
            a.end(f)
        return
    *outer, n = dims

    def run(f, oidx, start, stop, meta=None):
        for a in accs:
            a.begin(f)
        if aligned:         # counted from 0: a store at (start + j) - start is at j, aligned where j is
            _loops(f, [None], lambda f, j: body(f, list(oidx) + [f.assign(f"add nsw i64 {start}, {j[0]}")]),
                   lo_hi=("0", f.assign(f"sub nsw i64 {stop}, {start}")), meta=meta)
        else:
            _loops(f, [None], lambda f, i: body(f, list(oidx) + i), lo_hi=(start, stop), meta=meta)
        for a in accs:
            a.end(f)

    def row(f, oidx):
        lo, hi = lo_hi if lo_hi and not outer else ("0", f.size(n))
        if aligned:                        # (rows of at least a vector: the head ends inside the row)
            head, on_block = aligned(f, oidx)
            start = f.assign(f"add nsw i64 {lo}, {head}")
            if is_sym(n):                  # a symbolic row may be shorter: the head ends at its end
                start = f.assign(f"select i1 {f.assign(f'icmp slt i64 {start}, {hi}')}, i64 {start}, i64 {hi}")
            run(f, oidx, lo, start, SCALAR)
            lo = start
        blocks = f.assign(f"sdiv i64 {f.assign(f'sub nsw i64 {hi}, {lo}')}, {BLOCK}")

        def block(f, b):
            start = f.assign(f"add nsw i64 {lo}, {f.assign(f'mul nsw i64 {b[0]}, {BLOCK}')}")
            if aligned:
                on_block(f, oidx, start)
            run(f, oidx, start, f.assign(f"add nsw i64 {start}, {BLOCK}"))
        # rolled: LLVM unrolled the constant trips whole around the vectorized blocks, W3's layer-norm
        # backward 27 KB of straight code per 1024-element row (8 blocks), 10% slower than this loop
        _loops(f, [blocks], block, meta=ROLLED)
        last = f.assign(f"add nsw i64 {lo}, {f.assign(f'mul nsw i64 {blocks}, {BLOCK}')}")
        if aligned:
            on_block(f, oidx, last)
        run(f, oidx, last, hi)
    if outer:
        _loops(f, outer, row, lo_hi, meta)
    else:
        row(f, [])
