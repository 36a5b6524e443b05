"""One walk over a row for a maximum m and a sum of exp(a - g(m)) (Schedule.online): a running
maximum M, and a running sum rescaled by exp(g(M_old) - g(M_new)) when M grows.

The row's innermost axis runs in blocks of online_block elements (machine.py) (a row of W2's length is one
block). Per block, a vectorized loop finds the block's maximum (its values are then in L1 for the
next loop), the running maximum and the float64 total are updated, and a second vectorized loop sums
exp(a - g(M)) in runs of BLOCK elements in the values' type, each run's partial joined into the
float64 total (the blocked sums of reductions.py). When a later phase of the
kernel reads exp(a - g(m)) and the row fits its scratch buffer, the block's values are kept there
with the block's shift; once the row's maximum is known, a block whose shift was not the row's is
recomputed from a as exp(a - g(m)), never rescaled by exp(g(shift) - g(m)): that rounds twice, and
another kernel that recomputes exp(a - g(m)) must read the same value bit for bit (a softmax
recomputed where its maximum over another axis is taken and where it is subtracted).
"""
import math

from ...ir.kernels import contiguous_strides, loads
from . import mathlib
from .plan import limits
from .loops import ROLLED, _loops, tiles
from .reductions import BLOCK, _acc_dtype, _combine, _identity, _narrow, _squeezed, _widen
from .scalar import SHORT, Emitter, fconst, linear, regtype, store



def online_row(mb, f, kernel, ptrs, oidx, i, scratch):
    """Emit phases i and i + 1 of row kernel `kernel` for the row at outer index `oidx` as one walk;
    `scratch` maps tree ids to row-sized stack buffers (values later phases read again)."""
    (m, xt), = kernel.phases[i].outputs
    (s, et), = kernel.phases[i + 1].outputs
    max_lower, sum_lower = kernel.phases[i].lower, kernel.phases[i + 1].lower
    gt = et.args[0].args[1]                                   # et = exp(a - g(m))
    g_loads = loads(gt)
    inner = list(kernel.shape[kernel.split:])
    dims = _squeezed(inner) or [1]
    ones = ["0"] * (len(inner) - len(dims))
    *rest, n = dims
    block = limits.online_block()
    nb = tiles(f, n, block)          # an operand (a register where n is symbolic)
    n = f.size(n)
    dt, at = m.dtype, _acc_dtype(sum_lower, s.dtype)
    ty, aty = regtype(dt), regtype(at)
    inner_strides = contiguous_strides(inner)
    keep_x, keep_e = scratch.get(id(xt)), scratch.get(id(et))
    # (a row cache's symbolic rows hold at most scratch_limit elements, so at most as many blocks)
    blocks_at_most = limits.scratch_limit() if nb.startswith("%") else math.prod(rest) * int(nb)
    shifts = f.alloca(f"[{blocks_at_most} x {ty}]") if keep_e else None
    run_max, total, bmax, part = f.alloca(ty), f.alloca(aty), f.alloca(ty), f.alloca(ty)
    f.emit(f"store {ty} {_identity(max_lower, dt)}, ptr {run_max}")
    f.emit(f"store {aty} {_identity(sum_lower, at)}, ptr {total}")

    def emitter(f, idx, shift_of=None):
        em = Emitter(mb, f, ptrs, idx)
        if shift_of is not None:                              # g read at a register value of m
            for ld in g_loads:
                em.memo[id(ld)] = shift_of
        return em

    def exp(f, x):
        key = ("exp", SHORT[dt.name])
        mb.math.add(key)
        return f.assign(f"call {ty} {mathlib.symbol(*key)}({ty} {x})")

    def at_slot(f, buf, iidx):
        return f.assign(f"getelementptr inbounds {ty}, ptr {buf}, i64 {linear(f, iidx, inner_strides)}")

    def blocks(f, body):
        """body(f, ridx, block index, start, stop) for each block of each row of the rest axes."""
        def per_rest(f, ridx):
            def per_block(f, b):
                start = f.assign(f"mul nsw i64 {b[0]}, {block}")
                end = f.assign(f"add nsw i64 {start}, {block}")
                stop = f.assign(f"select i1 {f.assign(f'icmp slt i64 {end}, {n}')}, i64 {end}, i64 {n}")
                bi = f.assign(f"add nsw i64 {f.assign(f'mul nsw i64 {linear(f, ridx, contiguous_strides(rest))}, {nb}')}"
                              f", {b[0]}")
                body(f, list(ridx), bi, start, stop)
            _loops(f, [nb], per_block)
        _loops(f, rest, per_rest)

    def each(f, ridx, start, stop, body):
        _loops(f, [None], lambda f, j: body(f, ridx + [j[0]] + ones), lo_hi=(start, stop))

    def walk(f, ridx, bi, start, stop):
        f.emit(f"store {ty} {_identity(max_lower, dt)}, ptr {bmax}")

        def block_max(f, iidx):
            x = emitter(f, list(oidx) + iidx).value(xt)
            if keep_x:
                f.emit(f"store {ty} {x}, ptr {at_slot(f, keep_x, iidx)}")
            f.emit(f"store {ty} {_combine(f, max_lower, f.assign(f'load {ty}, ptr {bmax}'), x, dt)}, ptr {bmax}")
        each(f, ridx, start, stop, block_max)
        old = f.assign(f"load {ty}, ptr {run_max}")
        new = _combine(f, max_lower, old, f.assign(f"load {ty}, ptr {bmax}"), dt)
        f.emit(f"store {ty} {new}, ptr {run_max}")
        g_old, g_new = emitter(f, [], old).value(gt), emitter(f, [], new).value(gt)
        same = f.assign(f"fcmp oeq {ty} {g_old}, {g_new}")
        fac = f.assign(f"select i1 {same}, {ty} {fconst(1, dt)}, {ty} "
                       f"{exp(f, f.assign(f'fsub {ty} {g_old}, {g_new}'))}")
        tot = f.assign(f"load {aty}, ptr {total}")
        wide = _widen(f, fac, dt, at)
        # a factor of 0 drops the old terms (they may be exp(-inf - -inf) = nan); a total of 0 stays
        gone = f.assign(f"or i1 {f.assign(f'fcmp oeq {aty} {tot}, {fconst(0, at)}')}, "
                        f"{f.assign(f'fcmp oeq {aty} {wide}, {fconst(0, at)}')}")
        scaled = f.assign(f"fmul {aty} {tot}, {wide}")
        f.emit(f"store {aty} {f.assign(f'select i1 {gone}, {aty} {fconst(0, at)}, {aty} {scaled}')}, ptr {total}")
        if keep_e:
            f.emit(f"store {ty} {g_new}, ptr {f.assign(f'getelementptr inbounds {ty}, ptr {shifts}, i64 {bi}')}")

        def block_sum(f, iidx):
            e = emitter(f, list(oidx) + iidx, new).value(et)
            if keep_e:
                f.emit(f"store {ty} {e}, ptr {at_slot(f, keep_e, iidx)}")
            f.emit(f"store {ty} {_combine(f, sum_lower, f.assign(f'load {ty}, ptr {part}'), e, dt)}, ptr {part}")

        def run(f, r):                                        # BLOCK elements: a partial, then the total
            lo = f.assign(f"add nsw i64 {start}, {f.assign(f'mul nsw i64 {r[0]}, {BLOCK}')}")
            hi = f.assign(f"add nsw i64 {lo}, {BLOCK}")
            hi = f.assign(f"select i1 {f.assign(f'icmp slt i64 {hi}, {stop}')}, i64 {hi}, i64 {stop}")
            f.emit(f"store {ty} {_identity(sum_lower, dt)}, ptr {part}")
            each(f, ridx, lo, hi, block_sum)
            joined = _combine(f, sum_lower, f.assign(f"load {aty}, ptr {total}"),
                              _widen(f, f.assign(f"load {ty}, ptr {part}"), dt, at), at)
            f.emit(f"store {aty} {joined}, ptr {total}")
        length = f.assign(f"sub nsw i64 {stop}, {start}")
        runs = f.assign(f"sdiv i64 {f.assign(f'add nsw i64 {length}, {BLOCK - 1}')}, {BLOCK}")
        # the runs stay a loop: unrolled whole (W2: 8 runs of 128), a row's exp-and-sum was 2.4x the
        # machine code with vector spills, 3% slower on an AVX-512 Zen 4 (one thread), the same on AVX2
        _loops(f, [None], run, lo_hi=("0", runs), meta=ROLLED)
    blocks(f, walk)

    final = f.assign(f"load {ty}, ptr {run_max}")
    out = linear(f, oidx, contiguous_strides(kernel.shape[:kernel.split]))
    store(f, ptrs, m, out, final)
    store(f, ptrs, s, out, _narrow(f, f.assign(f"load {aty}, ptr {total}"), s.dtype, at))
    if keep_e:
        g_final = emitter(f, [], final).value(gt)

        def rescale(f, ridx, bi, start, stop):
            g_b = f.assign(f"load {ty}, ptr {f.assign(f'getelementptr inbounds {ty}, ptr {shifts}, i64 {bi}')}")
            redo, done = f.label(), f.label()
            f.emit(f"br i1 {f.assign(f'fcmp oeq {ty} {g_b}, {g_final}')}, label %{done}, label %{redo}")
            f.block(redo)

            def again(f, iidx):
                e = emitter(f, list(oidx) + iidx, final).value(et)
                f.emit(f"store {ty} {e}, ptr {at_slot(f, keep_e, iidx)}")
            each(f, ridx, start, stop, again)
            f.emit(f"br label %{done}")
            f.block(done)
        blocks(f, rescale)
    return [t for t, buf in ((xt, keep_x), (et, keep_e)) if buf]
