"""How a reduction accumulates on the GPU: join, identity, accumulator type, per-thread accumulation
and the block-wide combine (warp shuffles, then one shared-memory slot per warp; no atomics).

Accuracy: float32 and float64 sums accumulate in their own dtype (no float64 arithmetic in a float32
kernel: a GPU runs it at a fraction of the float32 rate), each thread's running sum compensated
(Kahan) before the pairwise tree of the threads' partials (warp shuffles, then the warps'): the
error does not grow with the number of elements a thread adds, and grows as log2 of the threads
over the tree — as NumPy's pairwise float32 sum, or better. float16 sums accumulate in float32.
"""
from .... import scalar as S
from ....scalar import head
from .expr import extreme, literal, to_half

FULL_MASK = "0xFFFFFFFF"
WARP = 32


def join_of(lower):
    """How a reduction's lowering joins an element b to the accumulator a: "+", "*", "maximum" or
    "minimum"."""
    how = _JOINS.get(head(lower))
    if how is None:
        raise NotImplementedError(f"the CUDA code generator does not understand the reduction lowering {lower}")
    return how


_JOINS = {S.ADD: "+", S.MUL: "*", S.maximum: "maximum", S.minimum: "minimum"}


def acc_dtype(lower, dtype):
    """The dtype a reduction accumulates in: float32 for float16 (as NumPy's float16 sums), else the
    value's own."""
    return "float32" if dtype == "float16" else dtype


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
    """One thread's accumulator for a reduce phase: `begin` declares it, `add` joins an element;
    the thread's partial is in `self.var` (of dtype `self.at`) and, for a compensated sum (float32,
    float64), what its roundings lost in `self.lo`; the trees (warp_allreduce,
    block_allreduce) carry both, and `result` adds them once."""

    def __init__(self, src, lower, dtype):
        self.src, self.lower, self.dtype = src, lower, dtype
        self.how, self.at = join_of(lower), acc_dtype(lower, dtype)
        self.var = src.tmp("acc")
        self.lo = src.tmp("lo") if self.how == "+" and self.at in ("float32", "float64") else None

    def begin(self):
        self.src.emit(f"{self.var} = {identity(self.how, self.at)}")
        if self.lo:
            self.src.emit(f"{self.lo} = {self.at}(0.0)")

    def add(self, x):
        s, v = self.src, self.var
        if self.at != self.dtype:
            x = s.assign(f"{_ctor(self.at)}({x})")
        if self.lo:
            two_sum(s, v, self.lo, x, None, self.at)
        else:
            s.emit(f"{v} = {combine(self.how, v, x, self.at)}")

    def total(self, hi=None, lo=None):
        """Source text of a variable holding the total of (hi, lo) (default: this thread's): hi + lo,
        or hi where lo is NaN (an infinity among the elements: hi is then the IEEE sum)."""
        hi = hi or self.var
        if not self.lo:
            return hi
        lo = lo or self.lo
        return self.src.assign(f"{hi} if {lo} != {lo} else {self.at}({hi} + {lo})", "t")

    def result(self, total=None):
        """Source text of the total (default: this thread's) in the reduction's own dtype."""
        total = total or self.total()
        if self.dtype == "float16":
            return to_half(total)
        return total if self.at == self.dtype else f"{_ctor(self.dtype)}({total})"


def two_sum(src, hi, lo, b, b_lo, at):
    """(hi, lo) += (b, b_lo) (b_lo None: 0), in dtype `at`: hi the rounded sum, lo accumulating what
    each rounding lost, exactly (Knuth's TwoSum: no ordering of the operands needed)."""
    s = src.assign(f"{at}({hi} + {b})", "s")
    bb = src.assign(f"{at}({s} - {hi})", "s")
    err = f"{at}({at}({hi} - {at}({s} - {bb})) + {at}({b} - {bb}))"
    src.emit(f"{lo} = {at}({lo} + {err})" if b_lo is None else f"{lo} = {at}({at}({lo} + {b_lo}) + {err})")
    src.emit(f"{hi} = {s}")


def warp_allreduce(src, acc):
    """Butterfly over the warp's 32 lanes: every lane ends with the warp's total of accumulator
    `acc` (commutative joins give every lane the same bits)."""
    for off in (16, 8, 4, 2, 1):
        other = src.assign(f"shfl_xor_sync({FULL_MASK}, {acc.var}, {off})", "w")
        if acc.lo:
            other_lo = src.assign(f"shfl_xor_sync({FULL_MASK}, {acc.lo}, {off})", "w")
            two_sum(src, acc.var, acc.lo, other, other_lo, acc.at)
        else:
            src.emit(f"{acc.var} = {combine(acc.how, acc.var, other, acc.at)}")


def block_allreduce(src, acc, threads, shared):
    """Every thread of a block of `threads` (a multiple of 32) ends with the block's total of
    accumulator `acc`. `shared`: a 32-slot shared array of acc's dtype (and `shared`_lo, for a
    compensated sum); variables `tid`, `lane` and `warp` are in scope. Every thread of the block
    must run this (it synchronizes the block)."""
    warp_allreduce(src, acc)
    if threads == WARP:
        return
    parts = [(acc.var, shared, identity(acc.how, acc.at))] + ([(acc.lo, shared + "_lo", f"{acc.at}(0.0)")]
                                                                if acc.lo else [])
    src.emit("cuda.syncthreads()")                    # the previous reduction's readers are done
    with src.block("if lane == 0:"):
        for var, sh, _ in parts:
            src.emit(f"{sh}[warp] = {var}")
    src.emit("cuda.syncthreads()")
    for var, sh, start in parts:
        src.emit(f"{var} = {sh}[lane] if lane < {threads // WARP} else {start}")
    warp_allreduce(src, acc)
