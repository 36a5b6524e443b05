"""Where a kernel reads, moved out of its body into the pointers its calls pass, so that kernels that
differ only in where they read share one body (llvm.py's ModuleBuilder keys bodies by their text).

A recurrence unrolled over T steps makes T kernels alike but for their loads' constant offsets: step t
reads gi[t], the t-th block of one buffer. Each slot a kernel only reads (none of its outputs is
written there) at constant offsets gives up its lowest offset, rounded down to a multiple of UNIT
elements (the body's residual offsets stay as they were, and so every address's alignment modulo 64
bytes for elements of 4 bytes or more): the loads read that much less far, and the call passes the slot's pointer moved that
far forward (driver.body_call). Symbolic offsets and written slots stay as they are.
W11 (2-layer LSTM, T=32): 114 bodies to compile (main) -> 43; its first call with an empty kernel cache, at
load ~10 on the 2-core bench host: LLVM 16.9 / 10.3 s -> 3.6 / 1.7 s, the call 23.0 / 14.6 -> 8.4 / 5.1 s."""
import copy

from ...ir.kernels import Gather, Load, Op, Schedule, postorder
from ...symint import is_sym

UNIT = 16               # elements: a shift keeps 64-byte alignment for every dtype of 4 bytes or more


def shifted(kernel, slots):
    """(kernel with its read-only slots' offsets lowered, {slot: bytes the call moves its pointer}):
    `slots` maps id(buffer) -> the table slot the body's pointer argument comes from."""
    written = {slots[id(v)] for v in kernel.outputs}
    low, dtype, bufs = {}, {}, {}
    for ld in kernel.reads:
        s = slots[id(ld.buf)]
        off = None if s in written or is_sym(ld.offset) or s in low and low[s] is None else ld.offset
        low[s] = None if off is None else min(off, low.get(s, off))
        dtype[s] = ld.buf.dtype
        bufs.setdefault(s, set()).add(id(ld.buf))
    shift = {s: lo // UNIT * UNIT for s, lo in low.items() if lo is not None and lo >= UNIT}
    if not shift:
        return kernel, {}
    by_buf = {b: n for s, n in shift.items() for b in bufs[s]}
    memo = {}
    out = copy.copy(kernel)
    out.phases = [copy.copy(ph) for ph in kernel.phases]
    for ph in out.phases:
        ph.outputs = [(v, _moved(t, by_buf, memo)) for v, t in ph.outputs]
    sch = kernel.schedule
    if sch is not None and sch.transposed:          # the Loads read a tile at a time (transpose.py): moved too
        out.schedule = Schedule(sch.levels, sch.across, sch.map_levels, sch.online, sch.walks, sch.rows,
                                [_moved(ld, by_buf, memo) for ld in sch.transposed])
    return out, {s: n * dtype[s].itemsize for s, n in shift.items()}


def _moved(tree, by_buf, memo):
    """`tree` with each load of a buffer in `by_buf` read that many elements lower."""
    def load(ld):
        return Load(ld.buf, ld.strides, ld.offset - by_buf[id(ld.buf)]) if id(ld.buf) in by_buf else ld
    for t in postorder(tree):
        if id(t) in memo:
            continue
        if isinstance(t, Load):
            memo[id(t)] = load(t)
        elif isinstance(t, Gather):
            memo[id(t)] = t.with_args([memo[id(a)] for a in t.args], load(t.src))
        elif isinstance(t, Op):
            memo[id(t)] = t.with_args([memo[id(a)] for a in t.args])
        else:
            memo[id(t)] = t
    return memo[id(tree)]
