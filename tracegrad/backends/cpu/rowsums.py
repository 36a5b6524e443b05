"""The sums a row kernel accumulates over its outer axes while its rows stream by (llvm.py's row
kernels): a register accumulator for a scalar, else arrays over the kept axes."""
import math

from ...ir.kernels import contiguous_strides
from .loops import _loops
from .plan.limits import OUTER_BLOCK
from .reductions import _Acc, _acc_dtype, _combine, _identity, _narrow, _squeezed, _widen
from .scalar import linear, regtype, store
from .sizes import symbolic


class RowSums:
    """A row kernel's reduction over its outer axes (and maybe some inner ones), accumulated while
    its rows [lo, hi) stream by; the runtime gives each chunk of rows private outputs. A scalar
    result keeps a register accumulator (_Acc: float sums blocked, float64 total); others an array
    over the kept axes, else the output itself: `wide` float32 sums (plan/'s row_wide) add OUTER_BLOCK
    rows into a float32 array (vectorized), which then joins a float64 one; symbolic kept axes (within
    the row) only in a loop over rows the row cache takes, its arrays of `capacity` elements."""

    def __init__(self, f, ph, shape, ptrs, wide, capacity=None):
        (self.v, _), = ph.outputs
        self.lower, self.ptrs = ph.lower, ptrs
        self.kept = [d for d in range(len(shape)) if d not in set(ph.axes)]
        self.oshape = [shape[d] for d in self.kept]
        dt = self.v.dtype
        self.acc = _Acc(f, ph.lower, dt, (_squeezed(shape) or [1])[-1]) if not self.kept else None
        sized = not symbolic(self.oshape)
        self.at = _acc_dtype(ph.lower, dt) if wide and (sized or capacity is not None) else dt
        elements = math.prod(self.oshape) if sized else capacity
        self.wide = f.alloca(f"[{elements} x {regtype(self.at)}]") if self.at is not dt else None
        self.part = f.alloca(f"[{elements} x {regtype(dt)}]") if self.wide else None
        if self.kept:
            _loops(f, self.oshape, lambda f, idx: f.emit(
                f"store {regtype(self.at)} {_identity(self.lower, self.at)}, ptr {self._at(f, idx)}"))
        if self.part:
            self.rows = f.alloca("i64")
            f.emit(f"store i64 0, ptr {self.rows}")
            _loops(f, self.oshape, lambda f, idx: f.emit(
                f"store {regtype(dt)} {_identity(self.lower, dt)}, ptr {self._at(f, idx, self.part)}"))

    def _join(self, f):
        """The float32 partials join the float64 totals and restart."""
        ty, aty = regtype(self.v.dtype), regtype(self.at)

        def one(f, idx):
            p, q = self._at(f, idx), self._at(f, idx, self.part)
            x = _widen(f, f.assign(f"load {ty}, ptr {q}"), self.v.dtype, self.at)
            f.emit(f"store {aty} {_combine(f, self.lower, f.assign(f'load {aty}, ptr {p}'), x, self.at)}, ptr {p}")
            f.emit(f"store {ty} {_identity(self.lower, self.v.dtype)}, ptr {q}")
        _loops(f, self.oshape, one)

    def end_row(self, f):
        if not self.part:
            return
        n = f.assign(f"add nsw i64 {f.assign(f'load i64, ptr {self.rows}')}, 1")
        full, go, on = f.assign(f"icmp eq i64 {n}, {OUTER_BLOCK}"), f.label(), f.label()
        f.emit(f"store i64 {f.assign(f'select i1 {full}, i64 0, i64 {n}')}, ptr {self.rows}")
        f.emit(f"br i1 {full}, label %{go}, label %{on}")
        f.block(go)
        self._join(f)
        f.emit(f"br label %{on}")
        f.block(on)

    def _at(self, f, oidx, array=None):
        off = linear(f, oidx, contiguous_strides(self.oshape))
        ty = regtype(self.v.dtype if array else self.at)
        return f.assign(f"getelementptr inbounds {ty}, ptr {array or self.wide or self.ptrs[id(self.v)]}, i64 {off}")

    def add(self, f, idx, x):
        if self.acc is not None:
            self.acc.add(f, x)
            return
        if self.part:                   # float32 into the partials
            p, ty = self._at(f, [idx[d] for d in self.kept], self.part), regtype(self.v.dtype)
            f.emit(f"store {ty} {_combine(f, self.lower, f.assign(f'load {ty}, ptr {p}'), x, self.v.dtype)}, ptr {p}")
            return
        p, ty = self._at(f, [idx[d] for d in self.kept]), regtype(self.at)
        f.emit(f"store {ty} {_combine(f, self.lower, f.assign(f'load {ty}, ptr {p}'), _widen(f, x, self.v.dtype, self.at), self.at)}"
               f", ptr {p}")

    def finish(self, f):
        if self.acc is not None:
            store(f, self.ptrs, self.v, "0", self.acc.result(f))
        elif self.wide:
            self._join(f)

            def out(f, idx):
                x = f.assign(f"load {regtype(self.at)}, ptr {self._at(f, idx)}")
                store(f, self.ptrs, self.v, linear(f, idx, contiguous_strides(self.oshape)),
                      _narrow(f, x, self.v.dtype, self.at))
            _loops(f, self.oshape, out)
