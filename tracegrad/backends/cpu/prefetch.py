"""Software prefetch of the next row of a row kernel's reads.

A kernel that reduces along its rows walks a row once or twice (row reductions, then the row's outputs
from a row cache) with much arithmetic per element. In W3's fused layer-norm forward-backward kernel
(rows of 1024 float32: one 4 KiB page each) about half of the perf samples fell on the loads that start
each row's walk, waiting on memory; why the hardware prefetchers leave them waiting is not established.
So at the start of row r such a kernel asks for row r + 1 of each read that walks rows with unit
stride, one prefetch per cache line into L2 (locality 1), to arrive while row r computes. Only where it
reads at least MIN_READS such rows: ab --cpu, one thread, W3 0.85x on an AVX-512 Zen 4, while a softmax
(one read, W2) ran 4-6% slower with them (the prefetch loop's instructions cost more than the waits
they saved). A symbolic kernel (sizes.py) prefetches the same rows: their length, stride and
line count are read at the call (W3 dynamic=True, one thread, CPU time: 1.23x the static compile
without them).
"""
from ...symint import is_sym
from .loops import SCALAR, _counted, tiles

LINE = 64                  # bytes per prefetched line
MIN_READS = 2              # rows read per row of the kernel from which it prefetches
DECLARE = "declare void @llvm.prefetch.p0(ptr, i32, i32, i32)"


def declared(functions):
    """The declaration a module of `functions` (LLVM text) needs for its prefetches: [] where none."""
    return [DECLARE] if any("@llvm.prefetch.p0(" in t for t in functions) else []


def row_reads(kernel):
    """The reads of a 2-d row kernel (one outer axis; rows of a length known or read at the call) that
    reduces along its rows, which walk the row with unit stride and move to another row with the outer
    index: (load, row stride, offset), each once; none where fewer than MIN_READS do. A symbolic stride
    or offset (an expression of the sizes, sizes.py) counts as nonzero: a read whose row stride is 0 at
    the call prefetches its own row again, which costs time, never a result."""
    shape = kernel.shape
    if kernel.split != 1 or len(shape) != 2 or all(ph.kind != "reduce" for ph in kernel.phases):
        return []
    out = {}
    for ld in kernel.reads:
        s = ld.strides
        if len(s) == 2 and not is_sym(s[1]) and s[1] == 1 and (is_sym(s[0]) or s[0]):
            key = (id(ld.buf), str(s[0]), str(ld.offset))     # str: a symbolic size's expression, no guard
            out[key] = (ld, s[0], ld.offset)
    return list(out.values()) if len(out) >= MIN_READS else []


def next_row(f, ptrs, reads, inner, oidx):
    """Emit prefetches of the row after the row at outer index `oidx` of each of `reads` (row_reads; none:
    nothing), rows of shape `inner`."""
    if not reads:
        return
    n, nxt = inner[0], f.assign(f"add nsw i64 {oidx[0]}, 1")
    for ld, stride, offset in reads:
        step = max(1, LINE // ld.dtype.itemsize)
        lines = tiles(f, n, step)
        base = f.assign(f"add nsw i64 {f.assign(f'mul nsw i64 {nxt}, {f.size(stride)}')}, {f.size(offset)}")

        def one(f, j, ld=ld, base=base, step=step):
            off = f.assign(f"add nsw i64 {base}, {f.assign(f'mul nsw i64 {j}, {step}')}")
            p = f.assign(f"getelementptr i8, ptr {ptrs[id(ld.buf)]}, i64 "
                         f"{f.assign(f'mul nsw i64 {off}, {ld.dtype.itemsize}')}")
            f.emit(f"call void @llvm.prefetch.p0(ptr {p}, i32 0, i32 1, i32 1)")
        _counted(f, "0", lines, one, SCALAR)
