"""Lower kernel groups (ir/passes/fusion.py) to LLVM IR text, and compile a whole graph's kernels
as one LLVM module with llvmlite's new pass manager for the host CPU.

Each loop kernel becomes `void @kN(ptr %table, i64 %lo, i64 %hi)`: `table` holds one pointer per
buffer of the program; the kernel's loop nest is fully specialized (shapes, strides and offsets are
constants), its outermost loop runs over [lo, hi) so the runtime can split it across threads, and
the innermost loop walks the last, unit-stride axis so that LLVM vectorizes it. Values live in
allocas that SROA turns into registers; float sums use `reassoc` adds so they vectorize too.
Transcendentals call the inlined, branch-free routines of mathlib.py.
"""
import ast
import math
import struct

from ..ir.passes.fusion import Const, Load, Op, contiguous_strides
from . import mathlib

LL = {"float32": "float", "float64": "double", "int32": "i32", "int64": "i64", "bool": "i8"}
SHORT = {"float32": "f32", "float64": "f64"}


def lltype(dtype):
    return LL[dtype.name]


def regtype(dtype):
    return "i1" if dtype.name == "bool" else LL[dtype.name]


def fconst(value, dtype):
    """An LLVM float/double literal (hex of the double that holds the exactly rounded value)."""
    v = float(value)
    if dtype.name == "float32":
        try:
            v = struct.unpack("f", struct.pack("f", v))[0]
        except OverflowError:          # beyond float32's range: NumPy rounds it to +-inf
            v = math.copysign(math.inf, v)
    return "0x%016X" % struct.unpack("<Q", struct.pack("<d", v))[0]


def const_text(value, dtype):
    if dtype.is_floating_point:
        return fconst(value, dtype)
    if dtype.name == "bool":
        return "true" if value else "false"
    return str(int(value))


class Fn:
    """An LLVM function body under construction."""

    def __init__(self):
        self.lines, self.n, self.allocas = [], 0, []

    def tmp(self):
        self.n += 1
        return f"%v{self.n}"

    def label(self):
        self.n += 1
        return f"L{self.n}"

    def emit(self, text):
        self.lines.append("  " + text)

    def assign(self, text):
        t = self.tmp()
        self.emit(f"{t} = {text}")
        return t

    def block(self, name):
        self.lines.append(f"{name}:")

    def alloca(self, ty):
        t = self.tmp()
        self.allocas.append(f"  {t} = alloca {ty}")
        return t


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


def _linear(f, idx, strides, offset=0):
    terms = [(i, s) for i, s in zip(idx, strides) if s]
    acc = str(offset)
    for i, s in terms:
        m = i if s == 1 else f.assign(f"mul nsw i64 {i}, {s}")
        acc = m if acc == "0" else f.assign(f"add nsw i64 {acc}, {m}")
    return acc


def _load(f, ptrs, ld, idx):
    off = _linear(f, idx, ld.strides, ld.offset)
    ty = lltype(ld.dtype)
    p = f.assign(f"getelementptr inbounds {ty}, ptr {ptrs[id(ld.buf)]}, i64 {off}")
    v = f.assign(f"load {ty}, ptr {p}")
    if ld.dtype.name == "bool":
        v = f.assign(f"icmp ne i8 {v}, 0")
    return v


def _store(f, ptrs, buf, off, val):
    ty = lltype(buf.dtype)
    if buf.dtype.name == "bool":
        val = f.assign(f"zext i1 {val} to i8")
    p = f.assign(f"getelementptr inbounds {ty}, ptr {ptrs[id(buf)]}, i64 {off}")
    f.emit(f"store {ty} {val}, ptr {p}")


# ------------------------------------------------------------------ expressions

_PARSED = {}


def _parsed(expr):
    if expr not in _PARSED:
        _PARSED[expr] = ast.parse(expr, mode="eval").body
    return _PARSED[expr]


class Emitter:
    """Emit a tree's value for one loop-body index (each distinct node once)."""

    def __init__(self, mb, f, ptrs, idx):
        self.mb, self.f, self.ptrs, self.idx, self.memo = mb, f, ptrs, idx, {}

    def value(self, t):
        key = id(t)
        if key not in self.memo:
            if isinstance(t, Load):
                self.memo[key] = _load(self.f, self.ptrs, t, self.idx)
            elif isinstance(t, Const):
                self.memo[key] = const_text(t.value, t.dtype)
            else:
                self.memo[key] = self.op(t)
        return self.memo[key]

    def op(self, t):
        names = dict(zip("abc", t.args))
        tree = _parsed(t.lower)
        v, d = self._ast(tree, names, t)
        if v is None:                      # the whole lowering is a literal
            return const_text(d, t.dtype)
        return _cast(self.f, v, d, t.dtype) if d is not t.dtype and d.name != t.dtype.name else v

    def _ast(self, node, names, t):
        f = self.f
        if isinstance(node, ast.Name):
            arg = names[node.id]
            return (self.value(arg), arg.dtype)
        if isinstance(node, ast.Constant):
            return None, node.value
        if isinstance(node, ast.UnaryOp):
            v, d = self._val(node.operand, names, t)
            if isinstance(node.op, ast.USub):
                return (f.assign(f"fneg {regtype(d)} {v}") if d.is_floating_point else
                        f.assign(f"sub {regtype(d)} 0, {v}")), d
            return f.assign(f"xor i1 {v}, true"), d
        if isinstance(node, ast.BinOp):
            a, d = self._val(node.left, names, t)
            b, db = self._val(node.right, names, t, d)
            if isinstance(node.op, (ast.BitAnd, ast.BitOr)) and d.name != "bool":   # logical, not bitwise
                a, b, d = _cast(f, a, d, t.dtype), _cast(f, b, db, t.dtype), t.dtype
            fl = d.is_floating_point
            if d.name == "bool" and isinstance(node.op, ast.Add):                  # NumPy: bool + bool is or
                node = ast.BinOp(node.left, ast.BitOr(), node.right)
            op = {ast.Add: ("fadd", "add"), ast.Sub: ("fsub", "sub"), ast.Mult: ("fmul", "mul"),
                  ast.Div: ("fdiv", None), ast.BitAnd: (None, "and"), ast.BitOr: (None, "or")}[type(node.op)]
            return f.assign(f"{op[0] if fl else op[1]} {regtype(d)} {a}, {b}"), d
        if isinstance(node, ast.Compare):
            a, d = self._val(node.left, names, t)
            b, _ = self._val(node.comparators[0], names, t, d)
            kind = type(node.ops[0])
            if d.is_floating_point:
                pred = {ast.Lt: "olt", ast.LtE: "ole", ast.Gt: "ogt", ast.GtE: "oge", ast.Eq: "oeq",
                        ast.NotEq: "une"}[kind]
                return f.assign(f"fcmp {pred} {regtype(d)} {a}, {b}"), t.dtype
            signed = d.name != "bool"
            pred = {ast.Lt: "slt" if signed else "ult", ast.LtE: "sle" if signed else "ule",
                    ast.Gt: "sgt" if signed else "ugt", ast.GtE: "sge" if signed else "uge",
                    ast.Eq: "eq", ast.NotEq: "ne"}[kind]
            return f.assign(f"icmp {pred} {regtype(d)} {a}, {b}"), t.dtype
        if isinstance(node, ast.Call):
            return self._call(node.func.id, node.args, names, t)
        raise RuntimeError(f"the LLVM generator does not understand the scalar lowering {t.lower!r} "
                           f"of {t.op} (ops.py)")

    def _val(self, node, names, t, like=None):
        v, d = self._ast(node, names, t)
        if v is None:                       # a literal: typed like the other operand
            d = like or t.dtype
            return const_text(node.value, d), d
        return v, d

    def _call(self, fn, args, names, t):
        f = self.f
        vals = []
        like = None
        for a in args:
            v, d = self._ast(a, names, t)
            vals.append((v, d))
            if v is not None:
                like = like or d
        vals = [(const_text(d, like) if v is None else v, like if v is None else d) for v, d in vals]
        (a, d) = vals[0]
        ty = regtype(d)
        if fn == "where":
            (_, _), (b, db), (c, _) = vals
            return f.assign(f"select i1 {a}, {regtype(db)} {b}, {regtype(db)} {c}"), db
        if fn == "cast":
            return _cast(f, a, d, t.dtype), t.dtype
        if fn in ("maximum", "minimum"):
            b = vals[1][0]
            if d.is_floating_point:
                return f.assign(f"call {ty} @llvm.{fn}.{SHORT[d.name]}({ty} {a}, {ty} {b})"), d
            pred = "sgt" if fn == "maximum" else "slt"
            if d.name == "bool":
                pred = "ugt" if fn == "maximum" else "ult"
            c = f.assign(f"icmp {pred} {ty} {a}, {b}")
            return f.assign(f"select i1 {c}, {ty} {a}, {ty} {b}"), d
        if fn == "abs":
            if d.is_floating_point:
                return f.assign(f"call {ty} @llvm.fabs.{SHORT[d.name]}({ty} {a})"), d
            neg = f.assign(f"sub {ty} 0, {a}")
            c = f.assign(f"icmp slt {ty} {a}, 0")
            return f.assign(f"select i1 {c}, {ty} {neg}, {ty} {a}"), d
        if fn == "sign":
            if d.is_floating_point:
                one, mone, zero = fconst(1, d), fconst(-1, d), fconst(0, d)
                gt = f.assign(f"fcmp ogt {ty} {a}, {zero}")
                lt = f.assign(f"fcmp olt {ty} {a}, {zero}")
                s1 = f.assign(f"select i1 {lt}, {ty} {mone}, {ty} {a}")
                return f.assign(f"select i1 {gt}, {ty} {one}, {ty} {s1}"), d
            gt = f.assign(f"icmp sgt {ty} {a}, 0")
            lt = f.assign(f"icmp slt {ty} {a}, 0")
            s1 = f.assign(f"select i1 {lt}, {ty} -1, {ty} 0")
            return f.assign(f"select i1 {gt}, {ty} 1, {ty} {s1}"), d
        # transcendentals: mathlib routines, inlined and vectorized
        key = (fn, SHORT[d.name])
        self.mb.math.add(key)
        argtext = ", ".join(f"{ty} {v}" for v, _ in vals)
        return f.assign(f"call {ty} {mathlib.symbol(*key)}({argtext})"), d


def _cast(f, v, src, dst):
    s, d = regtype(src), regtype(dst)
    if src is dst or s == d:
        return v
    if dst.name == "bool":
        if src.is_floating_point:
            return f.assign(f"fcmp une {s} {v}, 0.0")
        return f.assign(f"icmp ne {s} {v}, 0")
    if src.name == "bool":
        return f.assign(f"uitofp i1 {v} to {d}") if dst.is_floating_point else f.assign(f"zext i1 {v} to {d}")
    if src.is_floating_point and dst.is_floating_point:
        return f.assign(f"{'fpext' if src.itemsize < dst.itemsize else 'fptrunc'} {s} {v} to {d}")
    if src.is_floating_point:
        return f.assign(f"fptosi {s} {v} to {d}")
    if dst.is_floating_point:
        return f.assign(f"sitofp {s} {v} to {d}")
    return f.assign(f"{'sext' if src.itemsize < dst.itemsize else 'trunc'} {s} {v} to {d}")


# ------------------------------------------------------------------ kernels

def _identity(op, dtype):
    if op == "sum":
        return const_text(0, dtype)
    if dtype.is_floating_point:
        return fconst(float("-inf") if op == "max" else float("inf"), dtype)
    info = {"int32": 2 ** 31, "int64": 2 ** 63}[dtype.name]
    return str(-info) if op == "max" else str(info - 1)


def _combine(f, op, acc, v, dtype):
    ty = regtype(dtype)
    if op == "sum":
        return f.assign(f"fadd reassoc nsz {ty} {acc}, {v}" if dtype.is_floating_point else f"add {ty} {acc}, {v}")
    if dtype.is_floating_point:
        fn = "maximum" if op == "max" else "minimum"
        return f.assign(f"call {ty} @llvm.{fn}.{SHORT[dtype.name]}({ty} {acc}, {ty} {v})")
    c = f.assign(f"icmp {'sgt' if op == 'max' else 'slt'} {ty} {v}, {acc}")
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
                    off = _linear(f, idx, full)
                    for v, val in vals:
                        _store(f, ptrs, v, off, val)
                _loops(f, inner, body)
            else:
                (v, tree), = ph.outputs
                acc = f.alloca(regtype(v.dtype))
                f.emit(f"store {regtype(v.dtype)} {_identity(ph.op, v.dtype)}, ptr {acc}")

                def body(f, iidx, tree=tree, acc=acc, ph=ph, v=v):
                    em = Emitter(mb, f, ptrs, list(oidx) + list(iidx))
                    x = em.value(tree)
                    if id(tree) in scratch:
                        off = _linear(f, iidx, inner_strides)
                        ty = regtype(tree.dtype)
                        p = f.assign(f"getelementptr inbounds {ty}, ptr {scratch[id(tree)]}, i64 {off}")
                        f.emit(f"store {ty} {x}, ptr {p}")
                    cur = f.assign(f"load {regtype(v.dtype)}, ptr {acc}")
                    f.emit(f"store {regtype(v.dtype)} {_combine(f, ph.op, cur, x, v.dtype)}, ptr {acc}")
                _loops(f, inner, body)
                res = f.assign(f"load {regtype(v.dtype)}, ptr {acc}")
                _store(f, ptrs, v, _linear(f, oidx, contiguous_strides(outer)), res)
                done.add(id(tree))

    done = set()

    def _seed(em, scratch, iidx, strides):
        for tid, buf in scratch.items():
            if tid in done:
                t = _find(kernel, tid)
                ty = regtype(t.dtype)
                p = em.f.assign(f"getelementptr inbounds {ty}, ptr {buf}, i64 {_linear(em.f, iidx, strides)}")
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
            f.emit(f"store {regtype(v.dtype)} {_identity(ph.op, v.dtype)}, ptr {acc}")
        else:
            def init(f, idx, v=v, oshape=oshape, op=ph.op):
                _store(f, ptrs, v, _linear(f, idx, contiguous_strides(oshape)), _identity(op, v.dtype))
            _loops(f, oshape, init)
        phases.append((ph.op, v, tree, ostrides, acc))

    def body(f, idx):
        em = Emitter(mb, f, ptrs, idx)
        if maps:
            off = _linear(f, idx, contiguous_strides(shape))
            for ph in maps:
                for v, tree in ph.outputs:
                    _store(f, ptrs, v, off, em.value(tree))
        for op, v, tree, ostrides, acc in phases:
            x, ty = em.value(tree), regtype(v.dtype)
            if acc is None:
                off = _linear(f, idx, ostrides)
                acc_ptr = f.assign(f"getelementptr inbounds {lltype(v.dtype)}, ptr {ptrs[id(v)]}, i64 {off}")
            else:
                acc_ptr = acc
            cur = f.assign(f"load {ty}, ptr {acc_ptr}")
            f.emit(f"store {ty} {_combine(f, op, cur, x, v.dtype)}, ptr {acc_ptr}")
    _loops(f, shape, body, lo_hi=("%lo", "%hi") if shape else None)
    for op, v, tree, ostrides, acc in phases:
        if acc is not None:
            _store(f, ptrs, v, "0", f.assign(f"load {regtype(v.dtype)}, ptr {acc}"))
