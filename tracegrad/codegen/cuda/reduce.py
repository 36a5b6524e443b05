"""How a reduction accumulates on the GPU: join, identity, accumulator type, per-thread accumulation
and the block-wide combine (warp shuffles, then one shared-memory slot per warp; no atomics).

Accuracy: float32 sums accumulate in float64 (every thread's partial and the tree combining them),
so the result is a float64 sum rounded once — more accurate than NumPy's float32 pairwise sum.
float64 sums compensate each thread's running sum (Kahan) before the tree: the error does not grow
with the number of elements a thread adds.
"""
import ast

from .expr import extreme, literal, parsed, to_half

FULL_MASK = "0xFFFFFFFF"
WARP = 32


def join_of(lower):
    """How a reduction's lowering joins an element b to the accumulator a: "+", "*", "maximum" or
    "minimum"."""
    tree = parsed(lower)
    if isinstance(tree, ast.BinOp) and isinstance(tree.op, (ast.Add, ast.Mult)):
        return "+" if isinstance(tree.op, ast.Add) else "*"
    fn = getattr(getattr(tree, "func", None), "id", None)
    if fn == "maximum" or fn == "minimum":
        return fn
    raise NotImplementedError(f"the CUDA code generator does not understand the reduction lowering {lower!r}")


def acc_dtype(lower, dtype):
    """The dtype a reduction accumulates in: float64 for float32 sums, float32 for float16 (as NumPy's
    float16 sums), else the value's own."""
    if dtype == "float16":
        return "float32"
    return "float64" if dtype == "float32" and join_of(lower) == "+" else dtype


def identity(how, dtype):
    """The accumulator's start for join `how`: 0, 1, or the lowest (maximum) or highest (minimum) value."""
    if how == "+" or how == "*":
        return literal(int(how == "*"), dtype)
    low = how == "maximum"
    if dtype in ("float32", "float64"):
        return literal(float("-inf") if low else float("inf"), dtype)
    bits = {"int32": 31, "int64": 63}[dtype]
    return literal(-(1 << bits) if low else (1 << bits) - 1, dtype)


def combine(how, a, b, dtype):
    """Source text joining b into a (both of `dtype`)."""
    if how == "+" or how == "*":
        return f"{_ctor(dtype)}({a} {how} {b})"
    return extreme(how, a, b, dtype)


def _ctor(dtype):
    return {"float32": "float32", "float64": "float64", "int32": "int32", "int64": "int64"}[dtype]


class Acc:
    """One thread's accumulator for a reduce phase: `begin` declares it, `add` joins an element,
    `end` leaves the thread's partial in `self.var` (of dtype `self.at`)."""

    def __init__(self, src, lower, dtype):
        self.src, self.lower, self.dtype = src, lower, dtype
        self.how, self.at = join_of(lower), acc_dtype(lower, dtype)
        self.kahan = self.how == "+" and dtype == "float64"
        self.var = src.tmp("acc")
        self.comp = src.tmp("cmp") if self.kahan else None

    def begin(self):
        self.src.emit(f"{self.var} = {identity(self.how, self.at)}")
        if self.kahan:
            self.src.emit(f"{self.comp} = float64(0.0)")

    def add(self, x):
        s, v = self.src, self.var
        if self.at != self.dtype:
            x = s.assign(f"{_ctor(self.at)}({x})")
        if self.kahan:                      # s + (x - c), c the part of the last add that was lost
            y = s.assign(f"float64({x} - {self.comp})")
            t = s.assign(f"float64({v} + {y})")
            s.emit(f"{self.comp} = float64(float64({t} - {v}) - {y})")
            s.emit(f"{v} = {t}")
        else:
            s.emit(f"{v} = {combine(self.how, v, x, self.at)}")

    def end(self):
        if self.kahan:
            self.src.emit(f"{self.var} = float64({self.var} - {self.comp})")

    def result(self, total=None):
        """Source text of the total (default: this thread's variable) in the reduction's own dtype."""
        total = total or self.var
        if self.dtype == "float16":
            return to_half(total)
        return total if self.at == self.dtype else f"{_ctor(self.dtype)}({total})"


def warp_allreduce(src, how, var, dtype):
    """Butterfly over the warp's 32 lanes: every lane ends with the warp's total (commutative joins
    give every lane the same bits)."""
    for off in (16, 8, 4, 2, 1):
        other = src.assign(f"shfl_xor_sync({FULL_MASK}, {var}, {off})", "w")
        src.emit(f"{var} = {combine(how, var, other, dtype)}")


def block_allreduce(src, how, var, dtype, threads, shared):
    """Every thread of a block of `threads` (a multiple of 32) ends with the block's total of `var`.
    `shared`: a 32-slot shared array of `dtype`; variables `tid`, `lane` and `warp` are in scope.
    Every thread of the block must run this (it synchronizes the block)."""
    warp_allreduce(src, how, var, dtype)
    if threads == WARP:
        return
    src.emit("cuda.syncthreads()")                    # the previous reduction's readers are done
    with src.block("if lane == 0:"):
        src.emit(f"{shared}[warp] = {var}")
    src.emit("cuda.syncthreads()")
    src.emit(f"{var} = {shared}[lane] if lane < {threads // WARP} else {identity(how, dtype)}")
    warp_allreduce(src, how, var, dtype)

