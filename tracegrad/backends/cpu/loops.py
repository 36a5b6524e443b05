"""How a loop nest is emitted: in natural order over a shape (_loops) or in a Schedule's level order (_nest),
both of counted loops (_counted), which are while loops (_while). Sizes may be symbolic (sizes.py): loop
bounds are then registers."""
from ...symint import is_sym


SCALAR = "!llvm.loop !9000"       # a loop LLVM leaves as written: not vectorized, not unrolled
SCALAR_METADATA = ('!9000 = distinct !{!9000, !9001, !9002}\n!9001 = !{!"llvm.loop.vectorize.enable", i1 false}\n'
                   '!9002 = !{!"llvm.loop.unroll.disable"}\n')
ELEMENTS = "!llvm.loop !9003"     # a loop LLVM vectorizes but neither interleaves nor unrolls (regions.py's joins)
ELEMENTS_METADATA = '!9003 = distinct !{!9003, !9004, !9005}\n!9004 = !{!"llvm.loop.interleave.count", i32 1}\n' \
    '!9005 = !{!"llvm.loop.unroll.disable"}\n'
# ELEMENTS whose memory accesses (each marked ACCESS) touch distinct elements per trip: LLVM vectorizes
# without run-time checks that its pointers do not overlap (a join of 16 chunks' partials has too many)
DISJOINT = "!llvm.loop !9010"
ACCESS = "!llvm.access.group !9012"
DISJOINT_METADATA = '!9010 = distinct !{!9010, !9004, !9005, !9011}\n' \
    '!9011 = !{!"llvm.loop.parallel_accesses", !9012}\n!9012 = distinct !{}\n'

ROLLED = "!llvm.loop !9006"       # a loop LLVM does not unroll (its inner loops it still may)
ROLLED_METADATA = '!9006 = distinct !{!9006, !9005}\n'
ROLL_MIN = 16   # known trips from which a map's innermost loop stays ROLLED (_loops' `rolled`)


def _while(f, head, body, meta=None):
    """Emit a loop: head(f) -> (i1 condition, value) is emitted at the top of each trip; while the
    condition holds, body(f, value) emits the rest of the trip. `meta`: loop metadata on its back
    edge (SCALAR)."""
    top, bod, done = f.label(), f.label(), f.label()
    f.emit(f"br label %{top}")
    f.block(top)
    cond, value = head(f)
    f.emit(f"br i1 {cond}, label %{bod}, label %{done}")
    f.block(bod)
    body(f, value)
    f.emit(f"br label %{top}" + (f", {meta}" if meta else ""))
    f.block(done)


def _counted(f, start, stop, body, meta=None):
    """Emit a loop of an i64 counter from `start` while it is below `stop` (value names); body(f, i)
    emits a trip's work at counter value i."""
    ctr = f.alloca("i64")
    f.emit(f"store i64 {start}, ptr {ctr}")

    def head(f):
        i = f.assign(f"load i64, ptr {ctr}")
        return f.assign(f"icmp slt i64 {i}, {stop}"), i

    def trip(f, i):
        body(f, i)
        i2 = f.assign(f"load i64, ptr {ctr}")
        f.emit(f"store i64 {f.assign(f'add nsw i64 {i2}, 1')}, ptr {ctr}")
    _while(f, head, trip, meta)


def _loops(f, dims, body, lo_hi=None, meta=None, rolled=False):
    """Emit a loop nest over `dims` (sizes); body(f, idx) emits the innermost body.
    lo_hi: (lo, hi) value names for the outermost loop instead of (0, dims[0]); meta: the outermost
    loop's metadata (SCALAR). `rolled` (a map's nest): its innermost loop, the output's unit-stride
    axis, is ROLLED where it has ROLL_MIN or more known trips, so LLVM vectorizes it instead of
    unrolling it whole and vectorizing the loop around it across strided rows (W12's key-plus-bias
    map f32[8,4,64,32] from a [8,64,384] buffer: 53 -> 8 us; its twin with two adds was left rolled)."""
    idx = []
    last = len(dims) - 1
    rolled = rolled and last >= 0 and isinstance(dims[last], int) and dims[last] >= ROLL_MIN and not (last == 0 and meta)

    def level(d):
        if d == len(dims):
            body(f, idx)
            return

        def trip(f, i):
            idx.append(i)
            level(d + 1)
            idx.pop()
        _counted(f, *(lo_hi if d == 0 and lo_hi else ("0", f.size(dims[d]))), trip,
                 ROLLED if d == last and rolled else meta if d == 0 else None)

    level(0)


def _nest(f, shape, levels, body, lo_hi=None, idx=None, base=None):
    """Emit the loop nest of a Schedule's `levels` ((axis, tile) pairs, outermost first) over a
    space of `shape`; body(f, idx, base) gets {axis: index} of the element loops (with those of
    `idx`) and {axis: (start, end)} of the current tiles (with those of `base`). An element loop
    of a tiled axis runs from the tile's start to min(end, size). lo_hi: the outermost level's
    range instead of its trip count."""
    idx, base = dict(idx or {}), dict(base or {})

    def level(j):
        if j == len(levels):
            body(f, idx, base)
            return
        d, tile = levels[j]
        n = f.size(shape[d])
        if j == 0 and lo_hi:
            start, stop = lo_hi
        elif tile:
            start, stop = "0", tiles(f, shape[d], tile)
        elif d in base:
            start, end = base[d]
            stop = f.assign(f"select i1 {f.assign(f'icmp slt i64 {end}, {n}')}, i64 {end}, i64 {n}")
        else:
            start, stop = "0", n

        def trip(f, i):
            if tile:
                first = f.assign(f"mul nsw i64 {i}, {tile}")
                base[d] = (first, f.assign(f"add nsw i64 {first}, {tile}"))
            else:
                idx[d] = i
            level(j + 1)
        _counted(f, start, stop, trip)

    level(0)


def tiles(f, n, tile):
    """The i64 operand of ceil(n / tile): the tiles of T elements covering size n (symbolic or not)."""
    if not is_sym(n):
        return str(-(-n // tile))
    return f.assign(f"sdiv i64 {f.assign(f'add nsw i64 {f.size(n)}, {tile - 1}')}, {tile}")
