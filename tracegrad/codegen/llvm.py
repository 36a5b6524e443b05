"""Lower kernels of the kernel IR (ir/kernels.py) to LLVM IR text, and compile a whole graph's kernels
as one LLVM module with llvmlite's new pass manager for the host CPU.

Each loop kernel becomes `void @kN(ptr %table, i64 %lo, i64 %hi)`: `table` holds one pointer per
buffer of the program; the kernel's loop nest is fully specialized (shapes, strides and offsets are
constants), its outermost loop runs over [lo, hi) so the runtime can split it across threads, and
the innermost loop walks the last, unit-stride axis so that LLVM vectorizes it. Values live in
allocas that SROA turns into registers; float sums use `reassoc` adds so they vectorize too.
One element's expression is lowered by scalar.py; transcendentals call the inlined, branch-free
routines of mathlib/.
"""
import ast
import math

from ..ir.kernels import Op, contiguous_strides, loads
from . import mathlib
from .scalar import SHORT, Emitter, Fn, linear, parsed, store, const_text, fconst, lltype, regtype


class ModuleBuilder:
    """Collects the kernels of one or more programs into one module."""

    def __init__(self):
        self.functions, self.math = [], set()

    def text(self):
        head = "; tracegrad kernels\n"
        decls = ["declare float @llvm.maximum.f32(float, float)", "declare float @llvm.minimum.f32(float, float)",
                 "declare double @llvm.maximum.f64(double, double)", "declare double @llvm.minimum.f64(double, double)",
                 "declare float @llvm.fabs.f32(float)", "declare double @llvm.fabs.f64(double)"]
        return (head + "\n".join(decls) + "\n\n" + mathlib.definitions(self.math) + "\n\n"
                + "\n\n".join(self.functions) + "\n\nattributes #1 = { nounwind }\n")

    def kernel(self, kernel, slots, name):
        """Add a loop or reduce_acc kernel; `slots` maps buffer Value ids to table indices.

        The body takes each buffer as a `noalias` pointer argument (buffers never overlap: outputs
        are fresh or private), so loops vectorize without runtime alias checks; the exported
        `@<name>(table, lo, hi)` loads the pointers from the table and calls it (inlined). Names
        follow `stage="kernels"`: `forward_k3` is kernel k3 of the forward program."""
        f = Fn()
        bufs = sorted(set((slots[id(v)], id(v)) for v in _buffers(kernel)))
        ptrs = {vid: f"%b{slot}" for slot, vid in bufs}
        if kernel.kind == "reduce_acc":
            _reduce_acc(self, f, kernel, ptrs)
        elif kernel.schedule is not None and kernel.schedule.across is not None:
            _across_kernel(self, f, kernel, ptrs)
        elif kernel.schedule is not None:
            _scheduled_map(self, f, kernel, ptrs)
        else:
            _loop_kernel(self, f, kernel, ptrs)
        f.emit("ret void")
        body = "\n".join(f.allocas + f.lines)
        params = "".join(f"ptr noalias %b{slot}, " for slot, _ in bufs)
        loads = "".join(f"  %p{slot} = getelementptr ptr, ptr %table, i64 {slot}\n"
                        f"  %a{slot} = load ptr, ptr %p{slot}\n" for slot, _ in bufs)
        args = "".join(f"ptr %a{slot}, " for slot, _ in bufs)
        self.functions.append(
            f"define internal void @{name}_body({params}i64 %lo, i64 %hi) alwaysinline nounwind {{\n"
            f"entry:\n{body}\n}}\n\n"
            f"define void @{name}(ptr nocapture readonly %table, i64 %lo, i64 %hi) #1 {{\n"
            f"entry:\n{loads}  call void @{name}_body({args}i64 %lo, i64 %hi)\n  ret void\n}}")
        return name


def _buffers(kernel):
    out = [ld.buf for ld in kernel.reads] + kernel.outputs
    return out


# ------------------------------------------------------------------ loops

def _loops(f, dims, body, lo_hi=None):
    """Emit a loop nest over `dims` (sizes); body(f, idx) emits the innermost body.
    lo_hi: (lo, hi) value names for the outermost loop instead of (0, dims[0])."""
    idx = []

    def level(d):
        if d == len(dims):
            body(f, idx)
            return
        ctr = f.alloca("i64")
        start, stop = (lo_hi if d == 0 and lo_hi else ("0", str(dims[d])))
        f.emit(f"store i64 {start}, ptr {ctr}")
        cond, bod, done = f.label(), f.label(), f.label()
        f.emit(f"br label %{cond}")
        f.block(cond)
        i = f.assign(f"load i64, ptr {ctr}")
        c = f.assign(f"icmp slt i64 {i}, {stop}")
        f.emit(f"br i1 {c}, label %{bod}, label %{done}")
        f.block(bod)
        idx.append(i)
        level(d + 1)
        idx.pop()
        i2 = f.assign(f"load i64, ptr {ctr}")
        nxt = f.assign(f"add nsw i64 {i2}, 1")
        f.emit(f"store i64 {nxt}, ptr {ctr}")
        f.emit(f"br label %{cond}")
        f.block(done)

    level(0)


def _join(lower):
    """How a reduction's lowering joins an element b to the accumulator a: "+", "maximum" or "minimum"."""
    tree = parsed(lower)
    if isinstance(tree, ast.BinOp) and isinstance(tree.op, ast.Add):
        return "+"
    if isinstance(tree, ast.Call) and getattr(tree.func, "id", None) == "maximum":
        return "maximum"
    if isinstance(tree, ast.Call) and getattr(tree.func, "id", None) == "minimum":
        return "minimum"
    raise RuntimeError(f"the LLVM generator does not understand the reduction lowering {lower!r}")


def _identity(lower, dtype):
    """The accumulator's start: 0 for a sum, the lowest value for a maximum, the highest for a minimum."""
    how = _join(lower)
    if how == "+":
        return const_text(0, dtype)
    low = how == "maximum"
    if dtype.is_floating_point:
        return fconst(float("-inf") if low else float("inf"), dtype)
    info = {"int32": 2 ** 31, "int64": 2 ** 63}[dtype.name]
    return str(-info) if low else str(info - 1)


def _combine(f, lower, acc, v, dtype):
    ty, how = regtype(dtype), _join(lower)
    if how == "+":
        return f.assign(f"fadd reassoc nsz {ty} {acc}, {v}" if dtype.is_floating_point else f"add {ty} {acc}, {v}")
    if dtype.is_floating_point:
        return f.assign(f"call {ty} @llvm.{how}.{SHORT[dtype.name]}({ty} {acc}, {ty} {v})")
    c = f.assign(f"icmp {'sgt' if how == 'maximum' else 'slt'} {ty} {v}, {acc}")
    return f.assign(f"select i1 {c}, {ty} {v}, {ty} {acc}")


SCRATCH_LIMIT = 8192   # elements of a row kept in a per-thread scratch buffer (see _loop_kernel)


def _loop_kernel(mb, f, kernel, ptrs):
    """Outer loop over rows; per row, one inner loop nest per phase. A value that a reduce phase
    computes and a later phase needs again (softmax's exp) is kept in a row-sized stack buffer
    instead of being recomputed."""
    shape, k = kernel.shape, kernel.split
    outer, inner = shape[:k], shape[k:]
    full, inner_strides = contiguous_strides(shape), contiguous_strides(inner)
    scratch = {}
    if k and 0 < math.prod(inner) <= SCRATCH_LIMIT:
        later = set()
        for j in range(len(kernel.phases) - 1, -1, -1):
            ph = kernel.phases[j]
            for _, t in ph.outputs:
                if ph.kind == "reduce" and isinstance(t, Op) and id(t) in later:
                    scratch[id(t)] = f.alloca(f"[{math.prod(inner)} x {regtype(t.dtype)}]")
            for _, t in ph.outputs:
                later |= _tree_ids(t)

    def outer_body(f, oidx):
        for ph in kernel.phases:
            if ph.kind == "map":
                def body(f, iidx, ph=ph):
                    idx = list(oidx) + list(iidx)
                    em = Emitter(mb, f, ptrs, idx)
                    _seed(em, scratch, iidx, inner_strides)
                    vals = [(v, em.value(t)) for v, t in ph.outputs]
                    off = linear(f, idx, full)
                    for v, val in vals:
                        store(f, ptrs, v, off, val)
                _loops(f, inner, body)
            else:
                (v, tree), = ph.outputs
                acc = f.alloca(regtype(v.dtype))
                f.emit(f"store {regtype(v.dtype)} {_identity(ph.lower, v.dtype)}, ptr {acc}")

                def body(f, iidx, tree=tree, acc=acc, ph=ph, v=v):
                    em = Emitter(mb, f, ptrs, list(oidx) + list(iidx))
                    x = em.value(tree)
                    if id(tree) in scratch:
                        off = linear(f, iidx, inner_strides)
                        ty = regtype(tree.dtype)
                        p = f.assign(f"getelementptr inbounds {ty}, ptr {scratch[id(tree)]}, i64 {off}")
                        f.emit(f"store {ty} {x}, ptr {p}")
                    cur = f.assign(f"load {regtype(v.dtype)}, ptr {acc}")
                    f.emit(f"store {regtype(v.dtype)} {_combine(f, ph.lower, cur, x, v.dtype)}, ptr {acc}")
                _loops(f, inner, body)
                res = f.assign(f"load {regtype(v.dtype)}, ptr {acc}")
                store(f, ptrs, v, linear(f, oidx, contiguous_strides(outer)), res)
                done.add(id(tree))

    done = set()

    def _seed(em, scratch, iidx, strides):
        for tid, buf in scratch.items():
            if tid in done:
                t = _find(kernel, tid)
                ty = regtype(t.dtype)
                p = em.f.assign(f"getelementptr inbounds {ty}, ptr {buf}, i64 {linear(em.f, iidx, strides)}")
                em.memo[tid] = em.f.assign(f"load {ty}, ptr {p}")

    if outer:
        _loops(f, outer, outer_body, lo_hi=("%lo", "%hi"))
    else:
        outer_body(f, [])


def _tree_ids(t, out=None):
    out = set() if out is None else out
    stack = [t]
    while stack:
        x = stack.pop()
        if id(x) not in out:
            out.add(id(x))
            if isinstance(x, Op):
                stack.extend(x.args)
    return out


def _find(kernel, tid):
    for ph in kernel.phases:
        for _, t in ph.outputs:
            if id(t) == tid:
                return t
    raise KeyError(tid)


def _reduce_acc(mb, f, kernel, ptrs):
    """Reductions over leading or all axes: one loop nest in natural order over the input space,
    accumulating every phase's output (shared subexpressions computed once). Scalar results
    accumulate in a register, others in their output buffer after an initializing loop. The
    outermost loop runs over [lo, hi): threads reduce slices into private outputs (runtime.py)."""
    shape = kernel.shape
    phases, maps = [], [ph for ph in kernel.phases if ph.kind == "map"]
    for ph in kernel.phases:
        if ph.kind == "map":
            continue
        (v, tree), = ph.outputs
        keep = [d for d in range(len(shape)) if d not in set(ph.axes)]
        oshape = tuple(shape[d] for d in keep)
        ostrides = [0] * len(shape)
        for d, st in zip(keep, contiguous_strides(oshape)):
            ostrides[d] = st
        acc = None
        if not oshape:
            acc = f.alloca(regtype(v.dtype))
            f.emit(f"store {regtype(v.dtype)} {_identity(ph.lower, v.dtype)}, ptr {acc}")
        else:
            def init(f, idx, v=v, oshape=oshape, op=ph.lower):
                store(f, ptrs, v, linear(f, idx, contiguous_strides(oshape)), _identity(op, v.dtype))
            _loops(f, oshape, init)
        phases.append((ph.lower, v, tree, ostrides, acc))

    def body(f, idx):
        em = Emitter(mb, f, ptrs, idx)
        if maps:
            off = linear(f, idx, contiguous_strides(shape))
            for ph in maps:
                for v, tree in ph.outputs:
                    store(f, ptrs, v, off, em.value(tree))
        for op, v, tree, ostrides, acc in phases:
            x, ty = em.value(tree), regtype(v.dtype)
            if acc is None:
                off = linear(f, idx, ostrides)
                acc_ptr = f.assign(f"getelementptr inbounds {lltype(v.dtype)}, ptr {ptrs[id(v)]}, i64 {off}")
            else:
                acc_ptr = acc
            cur = f.assign(f"load {ty}, ptr {acc_ptr}")
            f.emit(f"store {ty} {_combine(f, op, cur, x, v.dtype)}, ptr {acc_ptr}")
    if kernel.schedule is not None:              # the scheduled loop order (ir/passes/schedule.py)
        _nest(f, shape, kernel.schedule.levels, lambda f, idx, base: body(f, [idx[d] for d in range(len(shape))]),
              lo_hi=("%lo", "%hi"))
    else:
        _loops(f, shape, body, lo_hi=("%lo", "%hi") if shape else None)
    for op, v, tree, ostrides, acc in phases:
        if acc is not None:
            store(f, ptrs, v, "0", f.assign(f"load {regtype(v.dtype)}, ptr {acc}"))


# ------------------------------------------------------------------ scheduled loop nests

BLOCK = 128    # reduced elements summed into a partial vector before it joins the total (accuracy)


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
        n = shape[d]
        if j == 0 and lo_hi:
            start, stop = lo_hi
        elif tile:
            start, stop = "0", str(-(-n // tile))
        elif d in base:
            start, end = base[d]
            stop = f.assign(f"select i1 {f.assign(f'icmp slt i64 {end}, {n}')}, i64 {end}, i64 {n}")
        else:
            start, stop = "0", str(n)
        ctr = f.alloca("i64")
        f.emit(f"store i64 {start}, ptr {ctr}")
        cond, bod, done = f.label(), f.label(), f.label()
        f.emit(f"br label %{cond}")
        f.block(cond)
        i = f.assign(f"load i64, ptr {ctr}")
        f.emit(f"br i1 {f.assign(f'icmp slt i64 {i}, {stop}')}, label %{bod}, label %{done}")
        f.block(bod)
        if tile:
            first = f.assign(f"mul nsw i64 {i}, {tile}")
            base[d] = (first, f.assign(f"add nsw i64 {first}, {tile}"))
        else:
            idx[d] = i
        level(j + 1)
        i2 = f.assign(f"load i64, ptr {ctr}")
        f.emit(f"store i64 {f.assign(f'add nsw i64 {i2}, 1')}, ptr {ctr}")
        f.emit(f"br label %{cond}")
        f.block(done)

    level(0)


def _put(mb, f, ptrs, phases, ix, full):
    """Each map phase's outputs at index ix, phase after phase (one Emitter: shared values once)."""
    em, off = Emitter(mb, f, ptrs, ix), linear(f, ix, full)
    for ph in phases:
        for v, val in [(v, em.value(t)) for v, t in ph.outputs]:
            store(f, ptrs, v, off, val)


def _scheduled_map(mb, f, kernel, ptrs):
    """A kernel of map phases walked in its schedule's order: each element's phases in turn (a
    phase reads an earlier one's output only at the same element: fusion's row rule)."""
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
    total: pairwise-like accuracy), then stores it."""
    sch, shape, k = kernel.schedule, kernel.shape, kernel.split
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

        def init(f, idx, vec, v, lower):
            f.emit(f"store {regtype(v.dtype)} {_identity(lower, v.dtype)}, ptr {slot(f, vec, idx, regtype(v.dtype))}")

        def add(f, idx, into, v, lower, x):
            ty = regtype(v.dtype)
            p = slot(f, into, idx, ty)
            f.emit(f"store {ty} {_combine(f, lower, f.assign(f'load {ty}, ptr {p}'), x, v.dtype)}, ptr {p}")

        for stream in _streams(kernel.phases):
            if stream[0].kind == "map":
                _nest(f, shape, sch.map_levels, lambda f, idx, b: _put(mb, f, ptrs, stream,
                                                                       [idx[d] for d in range(len(shape))], full),
                      idx=oidx, base=obase)
                continue
            sums = [_join(ph.lower) == "+" and ph.outputs[0][0].dtype.is_floating_point for ph in stream]
            blocked = shape[r0] > BLOCK and any(sums)
            accs = []              # (v, tree, lower, total vector, vector the rows accumulate into)
            for ph, is_sum in zip(stream, sums):
                (v, tree), = ph.outputs
                total = f.alloca(f"[{tile} x {regtype(v.dtype)}]")
                part = f.alloca(f"[{tile} x {regtype(v.dtype)}]") if blocked and is_sum else total
                accs.append((v, tree, ph.lower, total, part))

            def accumulate(f, idx, b):
                em = Emitter(mb, f, ptrs, [idx[d] for d in range(len(shape))])   # shared values once
                for v, tree, lower, total, part in accs:
                    add(f, idx, part, v, lower, em.value(tree))

            each(lambda f, idx, v, tree, lower, total, part: init(f, idx, total, v, lower), accs)
            if blocked:
                blocks = [a for a in accs if a[4] is not a[3]]

                def block(f, bidx, bbase):
                    each(lambda f, idx, v, tree, lower, total, part: init(f, idx, part, v, lower), blocks)
                    _nest(f, shape, inner, accumulate, idx=bidx, base=bbase)
                    each(lambda f, idx, v, tree, lower, total, part: add(
                        f, idx, total, v, lower, f.assign(f"load {regtype(v.dtype)}, ptr {slot(f, part, idx, regtype(v.dtype))}")),
                        blocks)
                _nest(f, shape, [(r0, BLOCK)], block, idx=oidx, base=obase)
            else:
                _nest(f, shape, inner, accumulate, idx=oidx, base=obase)
            each(lambda f, idx, v, tree, lower, total, part: store(
                f, ptrs, v, linear(f, [idx[d] for d in range(k)], kept),
                f.assign(f"load {regtype(v.dtype)}, ptr {slot(f, total, idx, regtype(v.dtype))}")), accs)

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
