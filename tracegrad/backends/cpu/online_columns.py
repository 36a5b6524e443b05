"""One walk over memory for column maxima and the sums of exp(a - g(m)) that read them (a reduce_acc
kernel with Schedule.online: plan/order.py's columns_online), beside reductions that read neither.

Per tile of the unit-stride kept axis u (long rows: threads split the tiles, each owns its columns;
whole rows, Schedule.rows: threads split the rows, each chunk's [lo, hi) its own maxima and sums
relative to them, which the region's join rescales: joins._online_join), the rows run in blocks of at most block_bytes (machine.py) of the tile (and at most
reductions.BLOCK rows), each read twice while in cache: a vectorized loop
finds the block's maxima, the running maxima M grow and each sum's running total is rescaled by
exp(g(M_old) - g(M_new)) (a factor of 0 drops the old terms: they may be exp(-inf - -inf) = nan; a
total of 0 stays 0), then a second loop adds each sum's terms at the running maxima, in a partial of
the values' type per block (at most reductions.BLOCK terms) joined into a float64 total, as the blocked
sums of reductions.py. The other reductions add in that loop too. The results are those of the maxima
first and the sums after, up to rounding.
"""
import math

from ... import scalar as S
from ...ir.kernels import Load, applies, contiguous_strides, loads
from . import mathlib
from .plan import limits
from .loops import _loops, _nest
from .reductions import BLOCK, _acc_dtype, _combine, _identity, _narrow, _widen
from .scalar import SHORT, Emitter, fconst, linear, regtype, store



def _shift(tree, m):
    """The exp(a - g(m)) node of a sum linear in it (ir/walks.py's rescaled), and g."""
    while not (applies(tree, S.exp) and any(ld.buf is m for ld in loads(tree))):
        tree = next(a for a in tree.args if any(ld.buf is m for ld in loads(a)))
    return tree.args[0].args[1]


def online_columns(mb, f, kernel, ptrs):
    sch, shape = kernel.schedule, kernel.shape
    u = sch.across
    if sch.rows:                # whole rows; this call's chunk: rows [lo, hi) of the outermost reduced axis
        outer, inner, tile = [], sch.levels, shape[u]
    else:
        cut = next(j for j, (d, t) in enumerate(sch.levels) if d == u and t) + 1
        outer, inner, tile = sch.levels[:cut], sch.levels[cut:], sch.levels[cut - 1][1]
    r0, others = inner[0][0], math.prod(shape[d] for d, _ in inner[1:-1])
    itemsize = max([ld.dtype.itemsize for ld in kernel.reads] + [4])
    rows = max(1, min(limits.block_bytes() // (tile * others * itemsize), BLOCK // others))
    keep = [d for d in range(len(shape)) if d not in set(kernel.phases[0].axes)]
    ostrides = contiguous_strides([shape[d] for d in keep])
    maxima = {i for i, _ in sch.online}
    owner = {j: i for i, j in sch.online}
    outs = [ph.outputs[0] for ph in kernel.phases]
    accs = []     # (phase index, lower, value, tree, total vector (float64 for float sums), partial vector or None)
    for j, (ph, (v, tree)) in enumerate(zip(kernel.phases, outs)):
        at = _acc_dtype(ph.lower, v.dtype)
        part = f.alloca(f"[{tile} x {regtype(v.dtype)}]") if at is not v.dtype else None
        accs.append((j, ph.lower, v, tree, f.alloca(f"[{tile} x {regtype(at)}]"), part))
    bmax = {i: f.alloca(f"[{tile} x {regtype(outs[i][0].dtype)}]") for i in maxima}
    shifts = {j: _shift(outs[j][1], outs[i][0]) for j, i in owner.items()}
    # g(M) of each sum whose g is more than M (logsumexp's guard): once per block, not per element
    # (logsumexp over dim 0, float32: the sums' loop 88 -> 70 machine instructions per 32 elements)
    held = {id(g): (g, owner[j], f.alloca(f"[{tile} x {regtype(outs[owner[j]][0].dtype)}]"))
            for j, g in shifts.items() if not isinstance(g, Load)}

    def exp(f, x, dt):
        key = ("exp", SHORT[dt.name])
        mb.math.add(key)
        return f.assign(f"call {regtype(dt)} {mathlib.symbol(*key)}({regtype(dt)} {x})")

    def outer_body(f, oidx, obase):
        def at(f, vec, idx, dt):
            i = f.assign(f"sub nsw i64 {idx[u]}, {obase[u][0]}")
            return f.assign(f"getelementptr inbounds {regtype(dt)}, ptr {vec}, i64 {i}")

        def get(f, vec, idx, dt):
            return f.assign(f"load {regtype(dt)}, ptr {at(f, vec, idx, dt)}")

        def put(f, vec, idx, dt, x):
            f.emit(f"store {regtype(dt)} {x}, ptr {at(f, vec, idx, dt)}")

        def over_tile(f, fn):
            _nest(f, shape, [(u, 0)], lambda f, idx, b: fn(f, idx), idx=oidx, base=obase)

        def init(f, idx):
            for j, lower, v, tree, total, part in accs:
                put(f, total, idx, _acc_dtype(lower, v.dtype), _identity(lower, _acc_dtype(lower, v.dtype)))

        def elements(f, idx):
            return Emitter(mb, f, ptrs, [idx[d] for d in range(len(shape))])

        def block(f, bidx, bbase):
            def begin(f, idx):
                for i in maxima:
                    dt = outs[i][0].dtype
                    put(f, bmax[i], idx, dt, _identity(kernel.phases[i].lower, dt))

            def block_max(f, idx, b):
                em = elements(f, idx)
                for i in maxima:
                    dt = outs[i][0].dtype
                    put(f, bmax[i], idx, dt, _combine(f, kernel.phases[i].lower, get(f, bmax[i], idx, dt),
                                                      em.value(outs[i][1]), dt))

            def grow(f, idx):                # the running maxima grow; the sums that read them rescale
                for i in maxima:
                    v, dt = outs[i][0], outs[i][0].dtype
                    old = get(f, accs[i][4], idx, dt)
                    new = _combine(f, kernel.phases[i].lower, old, get(f, bmax[i], idx, dt), dt)
                    put(f, accs[i][4], idx, dt, new)
                    for j in [j for j, o in owner.items() if o == i]:
                        at_ = _acc_dtype(kernel.phases[j].lower, dt)
                        em_old, em_new = Emitter(mb, f, ptrs, []), Emitter(mb, f, ptrs, [])
                        for ld in loads(shifts[j]):
                            em_old.memo[id(ld)], em_new.memo[id(ld)] = old, new
                        g_old, g_new = em_old.value(shifts[j]), em_new.value(shifts[j])
                        same = f.assign(f"fcmp oeq {regtype(dt)} {g_old}, {g_new}")
                        fac = f.assign(f"select i1 {same}, {regtype(dt)} {fconst(1, dt)}, {regtype(dt)} "
                                       f"{exp(f, f.assign(f'fsub {regtype(dt)} {g_old}, {g_new}'), dt)}")
                        wide, tot = _widen(f, fac, dt, at_), get(f, accs[j][4], idx, at_)
                        aty = regtype(at_)
                        gone = f.assign(f"or i1 {f.assign(f'fcmp oeq {aty} {tot}, {fconst(0, at_)}')}, "
                                        f"{f.assign(f'fcmp oeq {aty} {wide}, {fconst(0, at_)}')}")
                        scaled = f.assign(f"fmul {aty} {tot}, {wide}")
                        put(f, accs[j][4], idx, at_, f.assign(f"select i1 {gone}, {aty} {fconst(0, at_)}, {aty} {scaled}"))
                for g, i, vec in held.values():
                    dt = outs[i][0].dtype
                    em = Emitter(mb, f, ptrs, [])
                    for ld in loads(g):
                        em.memo[id(ld)] = get(f, accs[i][4], idx, dt)
                    put(f, vec, idx, dt, em.value(g))
                for j, lower, v, tree, total, part in accs:
                    if part is not None:
                        put(f, part, idx, v.dtype, _identity(lower, v.dtype))

            def block_sums(f, idx, b):
                em = elements(f, idx)
                for j, i in owner.items():                   # the sums read the running maxima
                    m = get(f, accs[i][4], idx, outs[i][0].dtype)
                    for ld in loads(outs[j][1]):
                        if ld.buf is outs[i][0]:
                            em.memo[id(ld)] = m
                for g, i, vec in held.values():
                    em.memo[id(g)] = get(f, vec, idx, outs[i][0].dtype)
                for j, lower, v, tree, total, part in accs:
                    if j in maxima:
                        continue
                    into, dt = (part, v.dtype) if part is not None else (total, _acc_dtype(lower, v.dtype))
                    put(f, into, idx, dt, _combine(f, lower, get(f, into, idx, dt),
                                                   _widen(f, em.value(tree), v.dtype, dt), dt))

            def join(f, idx):
                for j, lower, v, tree, total, part in accs:
                    if part is not None:
                        at_ = _acc_dtype(lower, v.dtype)
                        put(f, total, idx, at_, _combine(f, lower, get(f, total, idx, at_),
                                                         _widen(f, get(f, part, idx, v.dtype), v.dtype, at_), at_))
            over_tile(f, begin)
            _nest(f, shape, inner, block_max, idx=bidx, base=bbase)
            over_tile(f, grow)
            _nest(f, shape, inner, block_sums, idx=bidx, base=bbase)
            over_tile(f, join)

        def write(f, idx):
            off = linear(f, [idx[d] for d in keep], ostrides)
            for j, lower, v, tree, total, part in accs:
                at_ = _acc_dtype(lower, v.dtype)
                store(f, ptrs, v, off, _narrow(f, get(f, total, idx, at_), v.dtype, at_))

        over_tile(f, init)
        if sch.rows:            # blocks of `rows` rows from lo, the last one ending at hi
            def trip(f, b):
                start = f.assign(f"add nsw i64 %lo, {f.assign(f'mul nsw i64 {b[0]}, {rows}')}")
                end = f.assign(f"add nsw i64 {start}, {rows}")
                block(f, oidx, {**obase, r0: (start, f.assign(
                    f"select i1 {f.assign(f'icmp slt i64 {end}, %hi')}, i64 {end}, i64 %hi"))})
            length = f.assign("sub nsw i64 %hi, %lo")
            count = f.assign(f"sdiv i64 {f.assign(f'add nsw i64 {length}, {rows - 1}')}, {rows}")
            _loops(f, [None], trip, lo_hi=("0", count))
        else:
            _nest(f, shape, [(r0, rows)], block, idx=oidx, base=obase)
        over_tile(f, write)

    if sch.rows:                # (the kept axes before u have one element)
        outer_body(f, {d: "0" for d in keep if d != u}, {u: ("0", str(shape[u]))})
    else:
        _nest(f, shape, outer, outer_body, lo_hi=("%lo", "%hi"))
