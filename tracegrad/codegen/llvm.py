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

from ..dtypes import float64
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


def _acc_dtype(lower, dtype):
    """The type a reduction's total is kept in: float64 for float sums, else the value's own."""
    return float64 if dtype.is_floating_point and _join(lower) == "+" else dtype


def _widen(f, x, dtype, acc):
    return x if acc is dtype else f.assign(f"fpext {regtype(dtype)} {x} to {regtype(acc)}")


def _narrow(f, x, dtype, acc):
    return x if acc is dtype else f.assign(f"fptrunc {regtype(acc)} {x} to {regtype(dtype)}")


class _Acc:
    """A reduction's accumulator in registers. Float sums are blocked: the elements of a block (a run
    of at most BLOCK elements of the innermost loop) add into a partial of the values' type, which
    LLVM vectorizes, and each block's partial joins a float64 total. float32: the result has the
    accuracy of a float64 sum rounded once, at the speed of a float32 one. float64: the block sums
    join pairwise (a binary counter of partial sums, `levels`), as NumPy's pairwise sum does.
    Without block hooks (run None), or for float32 values in an innermost loop shorter than
    MIN_BLOCK, every element adds to the total."""

    def __init__(self, f, lower, dtype, run):
        self.f, self.lower, self.dtype, self.at = f, lower, dtype, _acc_dtype(lower, dtype)
        self.total = f.alloca(regtype(self.at))
        # run: the innermost loop's length (None: no block hooks); float64 values always block
        blocked = run is not None and (self.at is dtype or run >= MIN_BLOCK)
        float_sum = _join(lower) == "+" and dtype.is_floating_point
        self.part = f.alloca(regtype(dtype)) if blocked and float_sum else None
        self.levels = None
        if self.part and dtype is self.at:          # float64: pairwise over the blocks
            self.levels, self.count = f.alloca("[64 x double]"), f.alloca("i64")
            f.emit(f"store i64 0, ptr {self.count}")
        f.emit(f"store {regtype(self.at)} {_identity(lower, self.at)}, ptr {self.total}")

    def begin(self, f):
        if self.part:
            f.emit(f"store {regtype(self.dtype)} {_identity(self.lower, self.dtype)}, ptr {self.part}")

    def add(self, f, x):
        into, dt = (self.part, self.dtype) if self.part else (self.total, self.at)
        cur = f.assign(f"load {regtype(dt)}, ptr {into}")
        f.emit(f"store {regtype(dt)} {_combine(f, self.lower, cur, _widen(f, x, self.dtype, dt), dt)}, ptr {into}")

    def end(self, f):
        if not self.part:
            return
        x = _widen(f, f.assign(f"load {regtype(self.dtype)}, ptr {self.part}"), self.dtype, self.at)
        if self.levels:
            self._carry(f, x)
            return
        cur = f.assign(f"load {regtype(self.at)}, ptr {self.total}")
        f.emit(f"store {regtype(self.at)} {_combine(f, self.lower, cur, x, self.at)}, ptr {self.total}")

    def _carry(self, f, x):
        """Block sum x joins the binary counter: while the count's bit at `level` is set, x adds the
        partial kept there and moves up; then it is kept at the first free level."""
        n = f.assign(f"load i64, ptr {self.count}")
        val, lvl, rest = f.alloca("double"), f.alloca("i64"), f.alloca("i64")
        f.emit(f"store double {x}, ptr {val}")
        f.emit(f"store i64 0, ptr {lvl}")
        f.emit(f"store i64 {n}, ptr {rest}")
        head, body, done = f.label(), f.label(), f.label()
        f.emit(f"br label %{head}")
        f.block(head)
        r = f.assign(f"load i64, ptr {rest}")
        odd = f.assign(f"trunc i64 {r} to i1")
        f.emit(f"br i1 {odd}, label %{body}, label %{done}")
        f.block(body)
        i = f.assign(f"load i64, ptr {lvl}")
        p = f.assign(f"getelementptr inbounds [64 x double], ptr {self.levels}, i64 0, i64 {i}")
        v = f.assign(f"fadd double {f.assign(f'load double, ptr {val}')}, {f.assign(f'load double, ptr {p}')}")
        f.emit(f"store double {v}, ptr {val}")
        f.emit(f"store i64 {f.assign(f'add i64 {i}, 1')}, ptr {lvl}")
        f.emit(f"store i64 {f.assign(f'lshr i64 {r}, 1')}, ptr {rest}")
        f.emit(f"br label %{head}")
        f.block(done)
        i = f.assign(f"load i64, ptr {lvl}")
        p = f.assign(f"getelementptr inbounds [64 x double], ptr {self.levels}, i64 0, i64 {i}")
        f.emit(f"store double {f.assign(f'load double, ptr {val}')}, ptr {p}")
        f.emit(f"store i64 {f.assign(f'add i64 {n}, 1')}, ptr {self.count}")

    def result(self, f):
        if self.levels:             # the kept partials, smallest first, then what did not block
            n = f.assign(f"load i64, ptr {self.count}")
            for lvl in range(64):
                bit = f.assign(f"and i64 {f.assign(f'lshr i64 {n}, {lvl}')}, 1")
                p = f.assign(f"getelementptr inbounds [64 x double], ptr {self.levels}, i64 0, i64 {lvl}")
                kept = f.assign(f"select i1 {f.assign(f'icmp ne i64 {bit}, 0')}, double "
                                f"{f.assign(f'load double, ptr {p}')}, double 0.0")
                cur = f.assign(f"load double, ptr {self.total}")
                f.emit(f"store double {f.assign(f'fadd double {cur}, {kept}')}, ptr {self.total}")
        return _narrow(f, f.assign(f"load {regtype(self.at)}, ptr {self.total}"), self.dtype, self.at)


def _squeezed(dims):
    """dims without its trailing axes of length 1."""
    dims = list(dims)
    while dims and dims[-1] == 1:
        dims.pop()
    return dims


def _blocked_loops(f, dims, body, accs, lo_hi=None):
    """_loops, with the innermost axis run in blocks of at most BLOCK elements, each between the
    accumulators' begin() and end()."""
    ones = len(dims) - len(_squeezed(dims))
    if ones and ones < len(dims):          # trailing axes of length 1: block the last longer one
        def inner(f, idx, body=body):
            body(f, list(idx) + ["0"] * ones)
        dims, body = dims[:-ones], inner
    if not dims or not any(a.part for a in accs):
        for a in accs:
            a.begin(f)
        _loops(f, dims, body, lo_hi)
        for a in accs:
            a.end(f)
        return
    *outer, n = dims

    def run(f, oidx, start, stop):
        for a in accs:
            a.begin(f)
        _loops(f, [None], lambda f, i: body(f, list(oidx) + i), lo_hi=(start, stop))
        for a in accs:
            a.end(f)

    def row(f, oidx):
        lo, hi = lo_hi if lo_hi and not outer else ("0", str(n))
        blocks = f.assign(f"sdiv i64 {f.assign(f'sub nsw i64 {hi}, {lo}')}, {BLOCK}")

        def block(f, b):
            start = f.assign(f"add nsw i64 {lo}, {f.assign(f'mul nsw i64 {b[0]}, {BLOCK}')}")
            run(f, oidx, start, f.assign(f"add nsw i64 {start}, {BLOCK}"))
        _loops(f, [blocks], block)
        run(f, oidx, f.assign(f"add nsw i64 {lo}, {f.assign(f'mul nsw i64 {blocks}, {BLOCK}')}"), hi)
    if outer:
        _loops(f, outer, row, lo_hi)
    else:
        row(f, [])


SCRATCH_LIMIT = 8192   # elements of a row kept in a per-thread scratch buffer (see _loop_kernel)
WIDE_LIMIT = 16384     # outputs of float32 leading-axis sums (all of a kernel's) kept in float64 stack arrays
OUTER_BLOCK = 16       # rows of the outermost axis a float32 sum adds in float32 before joining it


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
                acc = _Acc(f, ph.lower, v.dtype, (_squeezed(inner) or [1])[-1])

                def body(f, iidx, tree=tree, acc=acc):
                    em = Emitter(mb, f, ptrs, list(oidx) + list(iidx))
                    x = em.value(tree)
                    if id(tree) in scratch:
                        off = linear(f, iidx, inner_strides)
                        ty = regtype(tree.dtype)
                        p = f.assign(f"getelementptr inbounds {ty}, ptr {scratch[id(tree)]}, i64 {off}")
                        f.emit(f"store {ty} {x}, ptr {p}")
                    acc.add(f, x)
                _blocked_loops(f, inner, body, [acc])
                res = acc.result(f)
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
    accumulate in registers (_Acc: float sums blocked), others in their output buffer after an
    initializing loop (float32 sums of up to WIDE_LIMIT outputs: also in a float64 stack array,
    joined every OUTER_BLOCK rows when they reduce the outermost axis). The outermost loop runs over
    [lo, hi): threads reduce slices into private outputs (runtime.py)."""
    shape, sch = kernel.shape, kernel.schedule
    levels = list(sch.levels) if sch is not None else []
    # a scheduled nest blocks at its innermost element loop longer than 1 (tiled if it is not already)
    j = max([i for i, (d, _) in enumerate(levels) if shape[d] > 1], default=None)
    if sch is None:
        run = BLOCK if len(_squeezed(shape)) == 1 else (_squeezed(shape) or [1])[-1]
    else:
        run = shape[levels[j][0]] if j is not None and not levels[j][1] else None
    if 0 in shape:                  # an empty space: no element, no block
        run = None
    blockable = run is not None
    phases, maps, wide_left = [], [ph for ph in kernel.phases if ph.kind == "map"], WIDE_LIMIT
    innermost = levels[-1][0] if levels else len(shape) - 1
    for ph in kernel.phases:
        if ph.kind == "map":
            continue
        (v, tree), = ph.outputs
        keep = [d for d in range(len(shape)) if d not in set(ph.axes)]
        oshape = tuple(shape[d] for d in keep)
        ostrides = [0] * len(shape)
        for d, st in zip(keep, contiguous_strides(oshape)):
            ostrides[d] = st
        acc, wide = None, None
        if math.prod(oshape) == 1:
            acc = _Acc(f, ph.lower, v.dtype, run)
        else:
            at = _acc_dtype(ph.lower, v.dtype)
            # float32 sums over the outermost axis (joined every OUTER_BLOCK rows) or along the
            # innermost loop: a float64 array; sums over middle axes add in order, as NumPy's do
            if at is not v.dtype and wide_left >= math.prod(oshape) and \
                    (sch is None and 0 in ph.axes or innermost in ph.axes):
                wide_left -= math.prod(oshape)
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

    def body(f, idx):
        em = Emitter(mb, f, ptrs, idx)
        if maps:
            off = linear(f, idx, contiguous_strides(shape))
            for ph in maps:
                for v, tree in ph.outputs:
                    store(f, ptrs, v, off, em.value(tree))
        for op, v, tree, ostrides, acc, wide, _, flush in phases:
            x = em.value(tree)
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
    if sch is None and flushed:
        for op, v, _, _, _, wide, oshape, _ in flushed:
            _loops(f, oshape, lambda f, idx, v=v, oshape=oshape, op=op: store(
                f, ptrs, v, linear(f, idx, contiguous_strides(oshape)), _identity(op, v.dtype)))

        def rows(f, start, stop):           # then each output joins the float64 array and restarts
            _blocked_loops(f, shape, body, accs, lo_hi=(start, stop))
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
    elif sch is None:
        _blocked_loops(f, shape, body, accs, lo_hi=("%lo", "%hi") if shape else None)
    elif blockable and j == 0:                   # one axis longer than 1, the threads' one
        d = levels[0][0]
        _blocked_loops(f, [None], lambda f, i: body(f, [i[0] if e == d else "0" for e in range(len(shape))]),
                       accs, lo_hi=("%lo", "%hi"))
    elif blockable:                              # the scheduled loop order (ir/passes/schedule.py)
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


# ------------------------------------------------------------------ scheduled loop nests

BLOCK = 128    # reduced elements summed into a partial vector before it joins the total (accuracy)
MIN_BLOCK = 32  # shorter innermost loops add each element to the float64 total (no partial)


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
    float64 total), then stores it."""
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
            blocked = shape[r0] > BLOCK and any(sums)
            accs = []   # (v, tree, lower, total vector (float64 for float sums), vector rows add into, its type)
            for ph, is_sum in zip(stream, sums):
                (v, tree), = ph.outputs
                at = _acc_dtype(ph.lower, v.dtype)
                total = f.alloca(f"[{tile} x {regtype(at)}]")
                part = f.alloca(f"[{tile} x {regtype(v.dtype)}]") if blocked and is_sum else total
                accs.append((v, tree, ph.lower, total, part, v.dtype if part is not total else at))

            def accumulate(f, idx, b):
                em = Emitter(mb, f, ptrs, [idx[d] for d in range(len(shape))])   # shared values once
                for v, tree, lower, total, part, pt in accs:
                    add(f, idx, part, pt, lower, em.value(tree), v.dtype)

            each(lambda f, idx, v, tree, lower, total, part, pt: init(f, idx, total, _acc_dtype(lower, v.dtype), lower),
                 accs)
            if blocked:
                blocks = [a for a in accs if a[4] is not a[3]]

                def block(f, bidx, bbase):
                    each(lambda f, idx, v, tree, lower, total, part, pt: init(f, idx, part, pt, lower), blocks)
                    _nest(f, shape, inner, accumulate, idx=bidx, base=bbase)
                    each(lambda f, idx, v, tree, lower, total, part, pt: add(
                        f, idx, total, _acc_dtype(lower, v.dtype), lower,
                        f.assign(f"load {regtype(pt)}, ptr {slot(f, part, idx, regtype(pt))}"), pt), blocks)
                _nest(f, shape, [(r0, BLOCK)], block, idx=oidx, base=obase)
            else:
                _nest(f, shape, inner, accumulate, idx=oidx, base=obase)

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
