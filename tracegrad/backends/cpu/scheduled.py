"""How a scheduled kernel (Schedule, ir/kernels.py) is lowered: maps in its order, reductions across u."""
from ...ir.kernels import contiguous_strides, loads
from ...symint import hint
from .loops import _loops, _nest
from .reductions import BLOCK, _acc_dtype, _combine, _identity, _join, _narrow, _widen
from .scalar import Emitter, linear, store, regtype
from .transpose import transposed_across, transposed_map


def _put(mb, f, ptrs, phases, ix, full):
    """Each map phase's outputs at index ix, phase after phase (one Emitter: shared values once)."""
    em, off = Emitter(mb, f, ptrs, ix), linear(f, ix, full)
    for ph in phases:
        for v, val in [(v, em.value(t)) for v, t in ph.outputs]:
            store(f, ptrs, v, off, val)


def _scheduled_map(mb, f, kernel, ptrs):
    """A kernel of map phases walked in its schedule's order: each element's phases in turn (a
    phase reads an earlier one's output only at the same element: fusion's row rule); its operands
    transposed in registers a tile at a time where the schedule says so (transpose.py)."""
    if kernel.schedule.transposed:
        transposed_map(mb, f, kernel, ptrs, _put)
        return
    shape = kernel.shape
    full = contiguous_strides(shape)
    _nest(f, shape, kernel.schedule.levels,
          lambda f, idx, base: _put(mb, f, ptrs, kernel.phases, [idx[d] for d in range(len(shape))], full),
          lo_hi=("%lo", "%hi"))


def _across_kernel(mb, f, kernel, ptrs):
    """Row reductions whose kept axis u is the unit-stride one (Schedule.across): per tile of u
    (and element of the other kept axes), each stream of phases (_streams) walks the reduced axes
    with u innermost; a reduction keeps a vector of the tile's partial results (float sums in
    blocks of BLOCK elements of the outermost reduced axis, each block's vector joined into the
    float64 total), then stores it. Operands that walk the innermost reduced axis with unit stride
    (Schedule.transposed) are read a tile at a time and transposed in registers (transpose.py)."""
    sch, shape, k = kernel.schedule, kernel.shape, kernel.split
    if sch.rows:
        _across_rows(mb, f, kernel, ptrs)
        return
    u = sch.across
    cut = next(j for j, (d, t) in enumerate(sch.levels) if d == u and t) + 1
    outer, inner, tile = sch.levels[:cut], sch.levels[cut:], sch.levels[cut - 1][1]
    full, kept = contiguous_strides(shape), contiguous_strides(shape[:k])
    r0 = inner[0][0]

    def outer_body(f, oidx, obase):
        def slot(f, vec, idx, ty):
            i = f.assign(f"sub nsw i64 {idx[u]}, {obase[u][0]}")
            return f.assign(f"getelementptr inbounds {ty}, ptr {vec}, i64 {i}")

        def over_tile(f, fn):
            _nest(f, shape, [(u, 0)], lambda f, idx, b: fn(f, idx), idx=oidx, base=obase)

        def each(fn, accs):
            over_tile(f, lambda f, idx: [fn(f, idx, *a) for a in accs])

        def init(f, idx, vec, dt, lower):
            f.emit(f"store {regtype(dt)} {_identity(lower, dt)}, ptr {slot(f, vec, idx, regtype(dt))}")

        def add(f, idx, into, dt, lower, x, xt):
            ty = regtype(dt)
            p = slot(f, into, idx, ty)
            f.emit(f"store {ty} {_combine(f, lower, f.assign(f'load {ty}, ptr {p}'), _widen(f, x, xt, dt), dt)}, "
                   f"ptr {p}")

        for stream in _streams(kernel.phases):
            if stream[0].kind == "map":
                _nest(f, shape, sch.map_levels, lambda f, idx, b: _put(mb, f, ptrs, stream,
                                                                       [idx[d] for d in range(len(shape))], full),
                      idx=oidx, base=obase)
                continue
            sums = [_join(ph.lower) == "+" and ph.outputs[0][0].dtype.is_floating_point for ph in stream]
            blocked = hint(shape[r0]) > BLOCK and any(sums)     # (a guess where symbolic: accuracy holds)
            accs = []   # (v, tree, lower, total vector (float64 for float sums), vector rows add into, its type)
            for ph, is_sum in zip(stream, sums):
                (v, tree), = ph.outputs
                at = _acc_dtype(ph.lower, v.dtype)
                total = f.alloca(f"[{tile} x {regtype(at)}]")
                part = f.alloca(f"[{tile} x {regtype(v.dtype)}]") if blocked and is_sum else total
                accs.append((v, tree, ph.lower, total, part, v.dtype if part is not total else at))

            def accumulate(f, idx, b, em=None):
                em = em or Emitter(mb, f, ptrs, [idx[d] for d in range(len(shape))])   # shared values once
                for v, tree, lower, total, part, pt in accs:
                    add(f, idx, part, pt, lower, em.value(tree), v.dtype)

            def walk(f, idx, base):
                if sch.transposed:
                    transposed_across(mb, f, kernel, ptrs, inner, idx, base, accumulate)
                else:
                    _nest(f, shape, inner, accumulate, idx=idx, base=base)

            each(lambda f, idx, v, tree, lower, total, part, pt: init(f, idx, total, _acc_dtype(lower, v.dtype), lower),
                 accs)
            if blocked:
                blocks = [a for a in accs if a[4] is not a[3]]

                def block(f, bidx, bbase):
                    each(lambda f, idx, v, tree, lower, total, part, pt: init(f, idx, part, pt, lower), blocks)
                    walk(f, bidx, bbase)
                    each(lambda f, idx, v, tree, lower, total, part, pt: add(
                        f, idx, total, _acc_dtype(lower, v.dtype), lower,
                        f.assign(f"load {regtype(pt)}, ptr {slot(f, part, idx, regtype(pt))}"), pt), blocks)
                _nest(f, shape, [(r0, BLOCK)], block, idx=oidx, base=obase)
            else:
                walk(f, oidx, obase)

            def write(f, idx, v, tree, lower, total, part, pt):
                at = _acc_dtype(lower, v.dtype)
                val = f.assign(f"load {regtype(at)}, ptr {slot(f, total, idx, regtype(at))}")
                store(f, ptrs, v, linear(f, [idx[d] for d in range(k)], kept), _narrow(f, val, v.dtype, at))
            each(write, accs)

    _nest(f, shape, outer, outer_body, lo_hi=("%lo", "%hi"))


def _streams(phases):
    """Consecutive phases that can share one walk over the rows: reductions none of which reads
    another's result (a backward's several gradient sums); a map phase walks alone."""
    out = []
    for ph in phases:
        cur = out[-1] if out else None
        made = {id(v) for p in cur for v, _ in p.outputs} if cur else set()
        if cur and ph.kind == "reduce" and cur[0].kind == "reduce" and \
                not any(id(ld.buf) in made for _, t in ph.outputs for ld in loads(t)):
            cur.append(ph)
        else:
            out.append([ph])
    return out


def _across_rows(mb, f, kernel, ptrs):
    """Reductions across u walked by rows (Schedule.rows): the chunk [lo, hi) of the outermost
    reduced axis r0, the other levels inside it in memory order, u innermost; each phase keeps a
    vector over all of u (float sums: the rows of a block of BLOCK along r0 add into a vector of
    the values' type, which then joins the float64 totals), stored into the outputs at the end."""
    sch, shape, k = kernel.schedule, kernel.shape, kernel.split
    u, n = sch.across, kernel.shape[sch.across]
    (r0, _), inner = sch.levels[0], sch.levels[1:]
    kept = contiguous_strides(shape[:k])
    accs = []   # (v, tree, lower, total vector (float64 for float sums), vector rows add into, its type)
    for ph in kernel.phases:
        (v, tree), = ph.outputs
        at = _acc_dtype(ph.lower, v.dtype)
        total = f.alloca(f"[{n} x {regtype(at)}]")
        part = f.alloca(f"[{n} x {regtype(v.dtype)}]") if at is not v.dtype else total
        accs.append((v, tree, ph.lower, total, part, v.dtype if part is not total else at))
    blocks = [a for a in accs if a[4] is not a[3]]

    def at(f, vec, i, ty):
        return f.assign(f"getelementptr inbounds {ty}, ptr {vec}, i64 {i}")

    def over_u(f, fn):
        _loops(f, [n], lambda f, i: fn(f, i[0]))

    def init(f, vec, dt, lower):
        over_u(f, lambda f, i: f.emit(f"store {regtype(dt)} {_identity(lower, dt)}, ptr {at(f, vec, i, regtype(dt))}"))

    def add(f, into, dt, lower, i, x, xt):
        p, ty = at(f, into, i, regtype(dt)), regtype(dt)
        f.emit(f"store {ty} {_combine(f, lower, f.assign(f'load {ty}, ptr {p}'), _widen(f, x, xt, dt), dt)}, ptr {p}")

    def element(f, idx, base):
        em = Emitter(mb, f, ptrs, [idx[d] for d in range(len(shape))])     # shared values once
        for v, tree, lower, total, part, pt in accs:
            add(f, part, pt, lower, idx[u], em.value(tree), v.dtype)

    for v, tree, lower, total, part, pt in accs:
        init(f, total, _acc_dtype(lower, v.dtype), lower)

    def block(f, b):                             # rows [lo + b * BLOCK, min(lo + (b + 1) * BLOCK, hi))
        start = f.assign(f"add nsw i64 %lo, {f.assign(f'mul nsw i64 {b[0]}, {BLOCK}')}")
        end = f.assign(f"add nsw i64 {start}, {BLOCK}")
        stop = f.assign(f"select i1 {f.assign(f'icmp slt i64 {end}, %hi')}, i64 {end}, i64 %hi")
        for v, tree, lower, total, part, pt in blocks:
            init(f, part, pt, lower)
        _loops(f, [None], lambda f, i: _nest(f, shape, inner, element, idx={r0: i[0]}), lo_hi=(start, stop))
        for v, tree, lower, total, part, pt in blocks:
            over_u(f, lambda f, i, total=total, part=part, pt=pt, lower=lower, v=v: add(
                f, total, _acc_dtype(lower, v.dtype), lower, i,
                f.assign(f"load {regtype(pt)}, ptr {at(f, part, i, regtype(pt))}"), pt))
    rows = f.assign("sub nsw i64 %hi, %lo")
    count = f.assign(f"sdiv i64 {f.assign(f'add nsw i64 {rows}, {BLOCK - 1}')}, {BLOCK}")
    _loops(f, [count], block)

    def write(f, i):
        idx = [i if d == u else "0" for d in range(k)]
        for v, tree, lower, total, part, pt in accs:
            a = _acc_dtype(lower, v.dtype)
            val = f.assign(f"load {regtype(a)}, ptr {at(f, total, i, regtype(a))}")
            store(f, ptrs, v, linear(f, idx, kept), _narrow(f, val, v.dtype, a))
    over_u(f, write)
