"""Lower kernels of the kernel IR (ir/kernels.py) to LLVM IR text, and compile a whole graph's kernels
as one LLVM module with llvmlite's new pass manager for the host CPU.

Each loop kernel becomes `void @kN(ptr %table, i64 %lo, i64 %hi)`: `table` holds one pointer per
buffer of the program; the kernel's loop nest is fully specialized (shapes, strides and offsets are
constants), its outermost loop runs over [lo, hi) so the runtime can split it across threads, and
the innermost loop walks the last, unit-stride axis so that LLVM vectorizes it. Values live in
allocas that SROA turns into registers; float sums use `reassoc` adds so they vectorize too.
One element's expression is lowered by scalar.py; transcendentals call the inlined, branch-free
routines of mathlib/. Each kernel is lowered as its Strategy says (plan/: the planner chooses, EMIT
below lowers): loop nests come from loops.py, accumulators from reductions.py, kernels with a
Schedule's map or across order by scheduled.py, column maxima with the sums of exp that read them by
online_columns.py, the boxes of a cat or pad by boxes.py; values constant along every axis (any
strategy), or along the rows that the inner loop reads, are computed once per call (hoist.py). A
symbolic kernel with a short innermost extent has a copy specialized to its traced size (versioned.py).
"""
import math

from ...ir.kernels import contiguous_strides, known
from . import mathlib, prefetch, versioned
from .boxes import blocked_walk, boxed
from .coalesce import coalesce, scale
from .hoist import hoisted, prelude
from .host import no_gathers, vector_bytes
from .loops import (DISJOINT, DISJOINT_METADATA, ELEMENTS, ELEMENTS_METADATA, ROLLED, ROLLED_METADATA, SCALAR,
                    SCALAR_METADATA, _loops, _nest)
from .online import online_row
from .online_columns import online_columns
from .plan import Kind, Walk, innermost_long
from .plan.limits import OUTER_BLOCK, SMALL_KERNEL
from .rowcache import RowCache
from .rowsums import RowSums
from .reductions import BLOCK, _Acc, _acc_dtype, _blocked_loops, _combine, _identity, _narrow, _squeezed, _widen
from .scalar import INDEX_ERROR, Emitter, Fn, linear, store, regtype
from .shifts import shifted
from .sizes import NAME as SIZES, Symbols, symbolic
from ...symint import hint, is_sym
from .scheduled import _across_kernel, _scheduled_map
from .stream import ALIGN, NAME as STREAM
from .stream import comment as stream_comment


class ModuleBuilder:
    """Collects the kernels of one or more programs (and their drivers, see driver.py) into one module.

    Each kernel becomes a body function `void @<name>_body(ptr noalias %b0, ..., i64 %lo, i64 %hi)`
    taking its buffers as arguments; the driver (driver.py) calls it from the program's segments,
    its step function and, for kernels split over threads, an entry `@<name>(table, lo, hi)`.
    Kernels whose bodies are the same up to which buffers they touch (the layers of a deep network,
    one optimizer update per parameter of a shape) share one body, named after the first: it is
    optimized and compiled once. So compile time follows the number of distinct kernels."""

    def __init__(self, symbols=None):
        self.functions, self.math, self.bodies, self.comments, self.entries = [], set(), {}, [], {}
        self.symbols = symbols or Symbols(())   # the symbolic sizes' order in a call's sizes array (sizes.py)
        self.index_error = False      # a kernel checks gathered indices (scalar.py's Emitter.checked)
        self.lowerings, self.moved = {}, {}     # kernel name -> how it was lowered (TRACEGRAD_LOG=kernels); moves

    def text(self):
        head = "; tracegrad kernels\n" + "".join(c + "\n" for c in self.comments)
        bodies = [text for key, name in self.bodies.items()
                  for text in versioned.functions(key, name, self.symbols)]
        decls = ["declare float @llvm.maximum.f32(float, float)", "declare float @llvm.minimum.f32(float, float)",
                 "declare double @llvm.maximum.f64(double, double)", "declare double @llvm.minimum.f64(double, double)",
                 "declare float @llvm.fabs.f32(float)", "declare double @llvm.fabs.f64(double)",
                 *(f"declare {t} @llvm.{fn}.{s}({t})" for fn in "floor ceil trunc".split()
                   for t, s in (("float", "f32"), ("double", "f64"))),
                 "declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)", "declare void @llvm.memset.p0.i64(ptr, i8, i64, i1)",
                 "declare ptr @llvm.ptrmask.p0.i64(ptr, i64)"] + prefetch.declared(bodies + self.functions)
        if self.index_error:
            decls.append(f"@{INDEX_ERROR} = global [4 x i64] zeroinitializer")
        text = (head + "\n".join(decls) + "\n\n" + mathlib.definitions(self.math) + "\n\n"
                + "\n\n".join(bodies + self.functions)
                + f"\n\nattributes #1 = {{ nounwind \"prefer-vector-width\"=\"{8 * vector_bytes()}\" }}\n")
        return text + (SCALAR_METADATA if SCALAR in text else "") + \
            (ELEMENTS_METADATA if ELEMENTS in text or ROLLED in text or DISJOINT in text else "") + \
            (ROLLED_METADATA if ROLLED in text else "") + (DISJOINT_METADATA if DISJOINT in text else "")

    def kernel(self, kernel, slots, name, strategy):
        """Add a loop or reduce_acc kernel lowered as `strategy` says (plan/: a Strategy); `slots` maps
        buffer Value ids to table indices; the outputs the strategy streams (stream.py) take a pointer
        argument `align 64 %stream<i>`. Returns (its body function's name, the table slots of the body's pointer
        arguments, whether it takes the call's sizes array after them: `ptr %sizes`, sizes.py); moved[name]: shifts.py.

        The body takes each slot as a `noalias` pointer argument, so loops vectorize without runtime
        alias checks: values sharing a slot (an output written into its input's memory, slots.py's
        inplace_slots) are one pointer, and distinct slots never overlap (fresh or private memory).
        A kernel of at most SMALL_KERNEL elements is marked `optsize` (vectorized, not unrolled): on W8 (a deep
        narrow network, all kernels small) that halves LLVM's time and its steady state does not get slower
        (less code to fetch). Names follow `stage="kernels"`: `forward_k3_body` is kernel k3 of the forward program."""
        f = Fn(self.symbols.index)
        pinned = getattr(kernel, "pinned_for", None)    # backends/cpu/plan/sized.py's pin
        lowered = coalesce(kernel)                # axes every operand walks as one: one loop
        rows = scale(kernel, lowered)             # its axis 0 absorbed others: [lo, hi) scaled
        scaled = is_sym(rows) or rows > 1
        for end in ("lo", "hi") if scaled else ():
            f.emit(f"%{end} = mul nsw i64 %{end}.rows, {f.size(rows)}")
        kernel, moved = shifted(lowered, slots)   # read-only slots' offsets: moved into the call's pointers
        ext = versioned.extent(kernel.shape)
        if ext is not None:                     # the innermost extent: the register %ext (versioned.py)
            f.size_regs[ext.expr] = versioned.EXT
        order = list(dict.fromkeys(slots[id(v)] for v in _buffers(kernel)))    # first use: the body's own order
        streams = {order.index(slots[id(v)]): v for v in kernel.outputs if id(v) in strategy.streams}
        names = [f"%{STREAM}{i}" if i in streams else f"%b{i}" for i in range(len(order))]
        ptrs = {id(v): names[order.index(slots[id(v)])] for v in _buffers(kernel)}
        kernel, plan = hoisted(kernel, len(kernel.shape))     # values constant along every axis: once per call
        prelude(self, f, kernel, len(kernel.shape), ptrs, plan)
        EMIT[strategy.kind](self, f, kernel, ptrs, strategy)
        f.emit("ret void")
        self.lowerings[name] = strategy.text() + (f"; {pinned}" if pinned else "")
        small = math.prod(map(hint, kernel.shape)) <= SMALL_KERNEL      # a guess: speed only
        version = versioned.version(f, ext)
        key = ("".join(f"ptr noalias {'align 64 ' if i in streams else ''}{n}, " for i, n in enumerate(names))
               + (f"ptr noalias readonly %{SIZES}, " if f.uses_sizes() else "")
               + ("i64 %lo.rows, i64 %hi.rows" if scaled else "i64 %lo, i64 %hi"),
               "\n".join(f.allocas + f.lines), (" optsize" if small else "") + no_gathers(strategy), version)
        body = self.bodies.setdefault(key, f"{name}_body")
        if streams and body == f"{name}_body":
            self.comments.append(stream_comment(body, sorted(streams.items())))
        self.moved[name] = [moved.get(s, 0) for s in order]
        return body, order, f.uses_sizes()

    def function(self, text):
        """Add a function written elsewhere (the driver's, driver.py)."""
        self.functions.append(text)

    def shared(self, name, function):
        """The name of the function `function(name)` returns the text of: that of an earlier one whose text
        is the same but for its name (compiled once), else `name`, its text added."""
        got = self.entries.setdefault(function("_"), name)
        if got == name:
            self.function(function(name))
        return got


def _buffers(kernel):
    return [ld.buf for ld in kernel.reads] + kernel.outputs


def _columns(mb, f, kernel, ptrs, strategy):
    """COLUMNS: per-column values once per call (hoist.py), then the accumulation in natural order."""
    kernel, plan = hoisted(kernel, len(_squeezed(kernel.shape)) - 1)
    prelude(mb, f, kernel, len(_squeezed(kernel.shape)) - 1, ptrs, plan)
    _reduce_acc(mb, f, kernel, ptrs, strategy)


def _rows(mb, f, kernel, ptrs, strategy):
    """ROWS and MAP: per-row values once per call (hoist.py), then the row loop (strategy.boxes: box by box,
    boxes.py); symbolic rows the row cache takes (strategy.row_cache) run a cached or an uncached loop."""
    kernel, plan = hoisted(kernel, kernel.split)
    prelude(mb, f, kernel, kernel.split, ptrs, plan)
    if strategy.boxes and boxed(mb, f, kernel, ptrs):
        return
    cap = strategy.row_cache
    if cap is not None:             # symbolic rows: cached where they fit its buffers, else recomputed
        n = f.size(math.prod(kernel.shape[kernel.split:]))
        fits, longer = f.label(), f.label()
        last = f.assign(f"sub i64 {n}, 1")       # unsigned: an empty row takes the general path
        f.emit(f"br i1 {f.assign(f'icmp ule i64 {last}, {cap - 1}')}, label %{fits}, label %{longer}")
        f.block(fits)
        _loop_kernel(mb, f, kernel, ptrs, strategy.wide, cap)
        f.emit("ret void")
        f.block(longer)
    _loop_kernel(mb, f, kernel, ptrs, strategy.wide)


def _plain(emit):
    """An emitter that needs nothing from the strategy but its kind."""
    return lambda mb, f, kernel, ptrs, strategy: emit(mb, f, kernel, ptrs)


def _loop_kernel(mb, f, kernel, ptrs, wide, capacity=None):
    """Outer loop over rows; per row, one inner loop nest per walk of its schedule (Schedule.walks,
    else one per phase): the walk's elements computed by one Emitter, so the trees of its phases
    share their common subexpressions; a row reduction joins each element into its accumulator, an
    accumulated phase adds it into its running result (RowSums, rowsums.py), a map phase stores it. An online
    pair of phases is one walk of its own (online.py). A value that a walk computes and a later walk
    needs again (softmax's exp) is kept in a row-sized stack buffer instead of being recomputed
    (rowcache.py)."""
    shape, k = kernel.shape, kernel.split
    outer, inner = shape[:k], shape[k:]
    full = contiguous_strides(shape)
    sch = kernel.schedule
    online = dict(sch.online) if sch is not None else {}
    groups = [list(w) for w in sch.walks] if sch is not None and sch.walks else \
        [[j, j + 1] if j in online else [j] for j in range(len(kernel.phases)) if j - 1 not in online]
    cache = RowCache(f, kernel, groups, roots_only={w for w, g in enumerate(groups) if g[0] in online},
                     capacity=capacity)
    summed = {id(ph) for ph in kernel.accumulated()}
    sums = {id(ph): RowSums(f, ph, shape, ptrs, i in wide, capacity) for i, ph in enumerate(kernel.phases)
            if id(ph) in summed}
    rebased, reads = {}, prefetch.row_reads(kernel)        # reads: the rows prefetched a row ahead

    def outer_body(f, oidx):
        prefetch.next_row(f, ptrs, reads, inner, oidx)
        for w, group in enumerate(groups):
            if group[0] in online:              # with the next phase: one walk (online.py)
                online_row(mb, f, kernel, ptrs, oidx, group[0], cache.bufs)
                cache.finish(w)
                continue
            phases = [kernel.phases[j] for j in group]
            accs = {id(ph): _Acc(f, ph.lower, ph.outputs[0][0].dtype, (_squeezed(inner) or [1])[-1])
                    for ph in phases if ph.kind == "reduce" and id(ph) not in sums}
            blocks = list(accs.values()) + [sums[id(ph)].acc for ph in phases
                                            if id(ph) in sums and sums[id(ph)].acc is not None]

            def body(f, iidx, phases=phases, accs=accs, w=w):
                idx = list(oidx) + list(iidx)
                em = Emitter(mb, f, ptrs, idx)
                cache.seed(em, iidx)
                vals = [(ph, v, em.value(t)) for ph in phases for v, t in ph.outputs]
                cache.keep(em, w, iidx)
                off = None
                for ph, v, x in vals:
                    if id(ph) in sums:
                        sums[id(ph)].add(f, idx, x)
                    elif ph.kind == "reduce":
                        accs[id(ph)].add(f, x)
                    else:
                        off = off or linear(f, idx, full)
                        if ptrs[id(v)] in rebased:          # a block of an aligned row (_aligned_rows)
                            p, first = rebased[ptrs[id(v)]]
                            store(f, {id(v): p}, v, f.assign(f"sub nsw i64 {off}, {first}"), x)
                        else:
                            store(f, ptrs, v, off, x)
            _blocked_loops(f, inner, body, blocks, aligned=_aligned_rows(kernel, phases, ptrs, oidx, rebased),
                           rolled=all(ph.kind != "reduce" for ph in phases))
            rebased.clear()
            for ph in phases:
                if id(ph) in sums:
                    sums[id(ph)].end_row(f)
                elif ph.kind == "reduce":
                    store(f, ptrs, ph.outputs[0][0], linear(f, oidx, contiguous_strides(outer)),
                          accs[id(ph)].result(f))
            cache.finish(w)

    vec = max([ALIGN // v.dtype.itemsize for v in kernel.outputs if ptrs[id(v)].startswith(f"%{STREAM}")], default=0)
    if vec and len(outer) == 1 and not inner:   # streamed elements: a head up to a whole aligned vector
        first = f.assign(f"and i64 {f.assign(f'add nsw i64 %lo, {vec - 1}')}, {-vec}")
        head = f.assign(f"select i1 {f.assign(f'icmp slt i64 {first}, %hi')}, i64 {first}, i64 %hi")
        _loops(f, outer, outer_body, lo_hi=("%lo", head), meta=SCALAR)     # < vec trips: left scalar
        _loops(f, outer, outer_body, lo_hi=(first, "%hi"))
    elif outer:
        _loops(f, outer, outer_body, lo_hi=("%lo", "%hi"))
    else:
        outer_body(f, [])
    for acc in sums.values():
        acc.finish(f)


def _aligned_rows(kernel, phases, ptrs, oidx, rebased):
    """_blocked_loops' `aligned` for a walk of row kernel `kernel` whose map phases write streamed
    outputs (stream.py) of one element size, or None. Such stores stream only as whole aligned
    vectors: where a row's length is not a multiple of a vector (softmax over 1000 classes) LLVM
    proved no alignment, so no store streamed and each output line was read before it was written.
    The row's first elements up to an aligned address run alone; each block of the rest stores
    through a pointer to its first element passed through llvm.ptrmask (`rebased`: {pointer name:
    (block pointer, its element offset)}): the same address, whose alignment LLVM then knows."""
    outs = {ptrs[id(v)]: v.dtype for ph in phases if ph.kind == "map" for v, _ in ph.outputs
            if ptrs[id(v)].startswith(f"%{STREAM}")}
    sizes = {dt.itemsize for dt in outs.values()}
    inner = list(kernel.shape[kernel.split:])
    dims = _squeezed(inner)
    if len(sizes) != 1 or not dims or hint(dims[-1]) < 4 * ALIGN // min(sizes):   # (a symbolic row: its
        return None                                                               # head is clamped)
    vec, ones, full = ALIGN // min(sizes), len(inner) - len(dims), contiguous_strides(kernel.shape)

    row = {}

    def aligned(f, iouter):
        rebased.clear()
        off = row["off"] = linear(f, list(oidx) + list(iouter) + ["0"] * (1 + ones), full)
        neg = f.assign(f"sub nsw i64 0, {off}")
        return f.assign(f"and i64 {neg}, {vec - 1}"), at_block

    def at_block(f, iouter, start):
        first = f.assign(f"add nsw i64 {row['off']}, {start}")
        for p, dt in outs.items():
            q = f.assign(f"getelementptr inbounds {regtype(dt)}, ptr {p}, i64 {first}")
            rebased[p] = (f.assign(f"call ptr @llvm.ptrmask.p0.i64(ptr {q}, i64 {-ALIGN})"), first)
    return aligned


def _reduce_acc(mb, f, kernel, ptrs, strategy):
    """Reductions over leading or all axes: one loop nest over the input space as strategy.walk says
    (plan/: natural order, or the Schedule's levels), accumulating every phase's output (shared
    subexpressions computed once). Scalar results accumulate in registers (_Acc: float sums blocked),
    others in their output buffer after an initializing loop (the phases in strategy.wide: also in a
    float64 stack array, joined every OUTER_BLOCK rows when they reduce the outermost axis). The
    outermost loop runs over [lo, hi): threads reduce slices into private outputs (runtime.py)."""
    shape, sch, walk = kernel.shape, kernel.schedule, strategy.walk
    levels = list(sch.levels) if sch is not None else []
    # a scheduled nest blocks at its innermost element loop longer than 1 (tiled if it is not already)
    j = innermost_long(shape, levels)
    if sch is None:
        run = BLOCK if len(_squeezed(shape)) == 1 else (_squeezed(shape) or [1])[-1]
    else:
        run = shape[levels[j][0]] if walk in (Walk.ONE_AXIS, Walk.TILED_BLOCKED) else None
    if any(known(d, 0) for d in shape):     # an empty space: no element, no block
        run = None
    phases, maps = [], [ph for ph in kernel.phases if ph.kind == "map"]
    for i, ph in enumerate(kernel.phases):
        if ph.kind == "map":
            continue
        (v, tree), = ph.outputs
        keep = [d for d in range(len(shape)) if d not in set(ph.axes)]
        oshape = tuple(shape[d] for d in keep)
        ostrides = [0] * len(shape)
        for d, st in zip(keep, contiguous_strides(oshape)):
            ostrides[d] = st
        acc, wide = None, None
        if not symbolic(oshape) and math.prod(oshape) == 1:
            acc = _Acc(f, ph.lower, v.dtype, run)
        else:
            at = _acc_dtype(ph.lower, v.dtype)
            if i in strategy.wide:              # float32 sums in a float64 array (plan/'s column_walk)
                wide = f.alloca(f"[{math.prod(oshape)} x {regtype(at)}]")
                _loops(f, oshape, lambda f, idx, wide=wide, oshape=oshape, op=ph.lower, at=at: f.emit(
                    f"store {regtype(at)} {_identity(op, at)}, ptr {_at(f, wide, at, idx, oshape)}"))
            else:
                _loops(f, oshape, lambda f, idx, v=v, oshape=oshape, op=ph.lower: store(
                    f, ptrs, v, linear(f, idx, contiguous_strides(oshape)), _identity(op, v.dtype)))
        # flushed: a float32 sum over the outermost axis adds OUTER_BLOCK rows in float32 into its
        # output (vectorized), then joins the float64 array; others add each element to that
        flushed = wide is not None and sch is None and 0 in ph.axes
        phases.append((ph.lower, v, tree, ostrides, acc, wide, oshape, flushed))
    accs = [p[4] for p in phases if p[4] is not None]
    flushed = [p for p in phases if p[7]]
    current = {}                # the trees of the box being walked (strategy.boxes: boxes.py)

    def body(f, idx):
        em = Emitter(mb, f, ptrs, idx)
        if maps:
            off = linear(f, idx, contiguous_strides(shape))
            for ph in maps:
                for v, tree in ph.outputs:
                    store(f, ptrs, v, off, em.value(current.get(id(tree), tree)))
        for op, v, tree, ostrides, acc, wide, _, flush in phases:
            x = em.value(current.get(id(tree), tree))
            if acc is not None:
                acc.add(f, x)
                continue
            if flush:
                wide = None
            at = _acc_dtype(op, v.dtype) if wide else v.dtype
            off, ty = linear(f, idx, ostrides), regtype(at)
            acc_ptr = f.assign(f"getelementptr inbounds {ty}, ptr {wide or ptrs[id(v)]}, i64 {off}")
            cur = f.assign(f"load {ty}, ptr {acc_ptr}")
            f.emit(f"store {ty} {_combine(f, op, cur, _widen(f, x, v.dtype, at), at)}, ptr {acc_ptr}")

    def nbody(f, idx, base):
        body(f, [idx[d] for d in range(len(shape))])
    if walk is Walk.OUTER_BLOCKS:
        for op, v, _, _, _, wide, oshape, _ in flushed:
            _loops(f, oshape, lambda f, idx, v=v, oshape=oshape, op=op: store(
                f, ptrs, v, linear(f, idx, contiguous_strides(oshape)), _identity(op, v.dtype)))

        # a block's rows in a loop LLVM leaves rolled (ROLLED): its constant OUTER_BLOCK trips were
        # unrolled whole around the vectorized row, W4's (256, 256) relu backward with its bias
        # gradient 1491 machine instructions (349 rolled), W4's module 0.33 -> 0.17 s of LLVM, and
        # the column sums of (256, 256) ran 10-30% slower unrolled, none faster
        def rows(f, start, stop):           # then each output joins the float64 array and restarts
            blocked_walk(f, kernel, strategy.boxes, current, body, accs, (start, stop), ROLLED)
            for op, v, _, _, _, wide, oshape, _ in flushed:
                def join(f, idx, v=v, wide=wide, oshape=oshape, op=op, at=_acc_dtype(op, v.dtype)):
                    p, ty = _at(f, wide, at, idx, oshape), regtype(v.dtype)
                    q = f.assign(f"getelementptr inbounds {ty}, ptr {ptrs[id(v)]}, i64 "
                                 f"{linear(f, idx, contiguous_strides(oshape))}")
                    x = _widen(f, f.assign(f"load {ty}, ptr {q}"), v.dtype, at)
                    f.emit(f"store {ty} {_identity(op, v.dtype)}, ptr {q}")
                    f.emit(f"store {regtype(at)} {_combine(f, op, f.assign(f'load {regtype(at)}, ptr {p}'), x, at)}, "
                           f"ptr {p}")
                _loops(f, oshape, join)
        blocks = f.assign(f"sdiv i64 {f.assign('sub nsw i64 %hi, %lo')}, {OUTER_BLOCK}")

        def block(f, b):
            start = f.assign(f"add nsw i64 %lo, {f.assign(f'mul nsw i64 {b[0]}, {OUTER_BLOCK}')}")
            rows(f, start, f.assign(f"add nsw i64 {start}, {OUTER_BLOCK}"))
        _loops(f, [blocks], block)
        start = f.assign(f"add nsw i64 %lo, {f.assign(f'mul nsw i64 {blocks}, {OUTER_BLOCK}')}")
        rest, done = f.label(), f.label()
        f.emit(f"br i1 {f.assign(f'icmp slt i64 {start}, %hi')}, label %{rest}, label %{done}")
        f.block(rest)
        rows(f, start, "%hi")
        f.emit(f"br label %{done}")
        f.block(done)
    elif walk is Walk.BLOCKED:
        blocked_walk(f, kernel, strategy.boxes, current, body, accs, ("%lo", "%hi") if shape else None)
    elif walk is Walk.ONE_AXIS:                  # one axis longer than 1, the threads' one
        d = levels[0][0]
        _blocked_loops(f, [None], lambda f, i: body(f, [i[0] if e == d else "0" for e in range(len(shape))]),
                       accs, lo_hi=("%lo", "%hi"))
    elif walk is Walk.TILED_BLOCKED:             # the scheduled loop order (plan/order.py)
        d = levels[j][0]
        head = levels[:j] + ([] if any(e == d and t for e, t in levels[:j]) else [(d, BLOCK)])

        def block(f, idx, base):
            for a in accs:
                a.begin(f)
            _nest(f, shape, [(d, 0)] + levels[j + 1:], nbody, idx=idx, base=base)
            for a in accs:
                a.end(f)
        _nest(f, shape, head, block, lo_hi=("%lo", "%hi"))
    else:
        for a in accs:
            a.begin(f)
        _nest(f, shape, levels, nbody, lo_hi=("%lo", "%hi"))
        for a in accs:
            a.end(f)
    for op, v, tree, ostrides, acc, wide, oshape, _ in phases:
        if acc is not None:
            store(f, ptrs, v, "0", acc.result(f))
        elif wide:
            def out(f, idx, v=v, wide=wide, at=_acc_dtype(op, v.dtype), oshape=oshape):
                p = _at(f, wide, at, idx, oshape)
                store(f, ptrs, v, linear(f, idx, contiguous_strides(oshape)),
                      _narrow(f, f.assign(f"load {regtype(at)}, ptr {p}"), v.dtype, at))
            _loops(f, oshape, out)


def _at(f, array, dtype, idx, shape):
    """The address of element idx of a contiguous stack array of `shape`."""
    return f.assign(f"getelementptr inbounds {regtype(dtype)}, ptr {array}, i64 "
                    f"{linear(f, idx, contiguous_strides(shape))}")


# the emitter of each strategy (plan/__init__.py's Kind)
EMIT = {Kind.ONLINE_COLUMNS: _plain(online_columns), Kind.COLUMNS: _columns, Kind.TILED_COLUMNS: _reduce_acc,
        Kind.ACROSS_ROWS: _plain(_across_kernel), Kind.ACROSS_TILES: _plain(_across_kernel),
        Kind.PERMUTED_MAP: _plain(_scheduled_map), Kind.TRANSPOSED_MAP: _plain(_scheduled_map),
        Kind.ROWS: _rows, Kind.MAP: _rows}
