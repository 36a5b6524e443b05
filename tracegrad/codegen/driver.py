"""A program's driver: its steps grouped into as few native calls as possible.

A program is a list of kernels run in order. Loop and reduce_acc kernels, split over the thread
pool or not, and matrix products run natively one after the other: each run of them between host
steps becomes one segment, an LLVM function `@<program>_s<i>(ptr %table)` calling the kernels'
functions in order, so Python makes one call per segment instead of one per kernel. A kernel large
enough to split runs as a parallel region inside its segment (regions.py: the chunks posted to the
thread pool and joined natively). What stays in Python between segments, explicitly: host kernels (a
primitive's NumPy implementation: cumsum, indexing, float16 arithmetic, ...) and matrix products
BLAS cannot take (integer dtypes, operands whose two innermost axes both have a stride other than
one, empty products). A program without host steps is one native call.

Matrix products call the BLAS NumPy ships (its OpenBLAS, through the C entry point cblas_?gemm) by
address: the address sits in the program's pointer table (slots `gemm_slots`), never in the code,
so the object code stays valid in the disk cache and in a forked child. Measured on the 2-core
bench machine, OpenBLAS's sgemm beats straightforward generated loop nests by 4-10x already at
128x32x32 (W8's layers) and a native call costs ~0.1 us, so every float32/float64 product goes to
BLAS; NumPy's own np.matmul adds 1-2 us of Python per call on top of the same BLAS. Before each
product the segment sets the pool's park flag (when the program has a pool), so workers spinning
after a region step aside for BLAS's threads.

The pointer table: the program's buffers (slots.py), then the two gemm addresses, the pool's shared
words and its `tg_region` function (`pool_slots`), then one descriptor per region (`region_slot`).
"""
import ctypes
import glob
import math
import os

import numpy as np

from ..ir.kernels import known
from ..symint import hint, is_sym
from .sizes import driver_operand, symbolic
from .threads import _PARK as PARK_WORD

ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112
_BLAS = []


def blas():
    """(int type of the BLAS interface, {"float32": address of sgemm, "float64": dgemm}) of the BLAS
    NumPy uses, or None where it cannot be found (matrix products then run NumPy's matmul)."""
    if not _BLAS:
        _BLAS.append(_find_blas())
    return _BLAS[0]


def _find_blas():
    here = os.path.dirname(np.__file__)
    libs = sorted(glob.glob(os.path.join(here, "..", "numpy.libs", "*blas*")) +
                  glob.glob(os.path.join(here, ".dylibs", "*blas*")))
    for path in libs:
        try:
            lib = ctypes.CDLL(path)         # already loaded by NumPy: the same handle and threads
        except OSError:
            continue
        for prefix, suffix, itype in (("scipy_cblas_", "64_", "i64"), ("cblas_", "64_", "i64"),
                                      ("scipy_cblas_", "", "i32"), ("cblas_", "", "i32")):
            try:
                fns = {"float32": getattr(lib, f"{prefix}sgemm{suffix}"), "float64": getattr(lib, f"{prefix}dgemm{suffix}")}
            except AttributeError:
                continue
            return itype, {k: ctypes.cast(f, ctypes.c_void_p).value for k, f in fns.items()}
    return None


def gemm_slots(n_slots):
    """{dtype name: table slot holding its gemm's address}: the slots after a program's buffers."""
    return {"float32": n_slots, "float64": n_slots + 1}


def pool_slots(n_slots):
    """(slot of the pool's shared words, slot of its tg_region function) after the gemm slots; 0
    (null) while the program has not met a pool."""
    return n_slots + 2, n_slots + 3


def sizes_slot(n_slots):
    """The slot of the call's sizes array (the symbols' values, sizes.py)."""
    return n_slots + 4


def region_slot(n_slots, r):
    """The slot of the descriptor of the program's region r (its r-th split kernel)."""
    return n_slots + 5 + r


def table_size(n_slots, n_regions):
    return n_slots + 5 + n_regions


def _operand(shape, strides):
    """How BLAS reads a matrix of `shape` (rows, cols) with element `strides`: (transposed, leading
    dimension), or None when neither axis has unit stride (or the other's stride is too small). Sizes
    may be symbolic: only what holds for every size is relied on (no guard is recorded for a choice
    that a size of 1 would also allow)."""
    (r, c), (sr, sc) = shape, strides
    if (known(c, 1) or known(sc, 1)) and (known(r, 1) or sr >= _at_least_1(c)):
        return NO_TRANS, sr if is_sym(r) or r > 1 else _at_least_1(c)
    if (known(r, 1) or known(sr, 1)) and (known(c, 1) or sc >= _at_least_1(r)):
        return TRANS, sc if is_sym(c) or c > 1 else _at_least_1(r)
    return None


def _at_least_1(n):
    """max(1, n) of a size; a symbolic size as it is (where it is 0 the product is empty and BLAS is not called)."""
    return n if is_sym(n) else max(1, n)


def _batch_strides(shape, strides, batch):
    """An operand's strides along the broadcast batch axes `batch` (0 where it is broadcast)."""
    lead = len(shape) - 2
    out = [0] * len(batch)
    for d in range(lead):
        e = len(batch) - lead + d
        out[e] = strides[d] if is_sym(shape[d]) or shape[d] != 1 else 0
    return out


def gemm_plan(kernel):
    """The BLAS call of a matmul kernel, or None when BLAS cannot run it (see the module's text)."""
    if kernel.kind != "extern" or kernel.node.op != "matmul" or blas() is None:
        return None
    a, b = kernel.args
    (sa, sb), out = [i.shape for i in kernel.node.inputs], kernel.node.out
    if out.dtype.name not in ("float32", "float64") or a.dtype is not out.dtype or b.dtype is not out.dtype:
        return None
    m, n, k = out.shape[-2], out.shape[-1], sa[-1]
    if any(known(d, 0) for d in out.shape) or known(k, 0):   # an empty batch too: the call below would still
        return None                                          # run once (a symbolic size of 0: see gemm_call)
    ta = _operand((m, k), a.strides[-2:])
    tb = _operand((k, n), b.strides[-2:])
    if ta is None or tb is None:
        return None
    batch = out.shape[:-2]
    plan = dict(m=m, n=n, k=k, ta=ta, tb=tb, batch=batch, dtype=out.dtype.name,
                a=(a.offset, _batch_strides(sa, a.strides, batch)),
                b=(b.offset, _batch_strides(sb, b.strides, batch)))
    _check_extents(kernel, plan)
    return plan


def _check_extents(kernel, plan):
    """Before any native code exists: every element the BLAS calls of `plan` read (the operands) or
    write (the output) lies inside that buffer, of the plan's dtype (symbolic sizes: at their hints).
    Raises RuntimeError (a compiler bug, never a user's) instead of emitting a call that reads or writes
    outside its memory."""
    (a, b), out = kernel.args, kernel.node.out
    batch, m, n, k = [hint(d) for d in plan["batch"]], hint(plan["m"]), hint(plan["n"]), hint(plan["k"])
    spans = [("a", a.buf, plan["a"], (m, k), plan["ta"]), ("b", b.buf, plan["b"], (k, n), plan["tb"]),
             ("out", out, (0, list(_contiguous(batch, dict(m=m, n=n)))), (m, n), (NO_TRANS, n))]
    if min(m, n, k, *batch) < 1 and not symbolic((*plan["batch"], plan["m"], plan["n"], plan["k"])):
        raise RuntimeError(f"internal error: a BLAS call planned for an empty matmul -> {out.dtype.name}"
                           f"{list(out.shape)} (m={m} n={n} k={k}, batch {list(batch)}); please report it")
    for name, buf, (offset, bstrides), (r, c), (trans, ld) in spans:
        lo = hi = hint(offset)
        ld = hint(ld)
        for size, stride in zip(batch, map(hint, bstrides)):
            if stride > 0:
                hi += (size - 1) * stride
            else:
                lo += (size - 1) * stride
        hi += (r - 1) * ld + c if trans == NO_TRANS else (c - 1) * ld + r
        if min(r, c, *batch, 1) < 1:
            continue                    # symbolic sizes whose hints are empty: no element reached
        if buf.dtype.name != plan["dtype"] or lo < 0 or hi > math.prod(map(hint, buf.shape)):
            raise RuntimeError(f"internal error: the BLAS call of matmul -> {out.dtype.name}{list(out.shape)} "
                               f"would reach {name} elements [{lo}, {hi}) of a {buf.dtype.name}"
                               f"{list(buf.shape)} buffer (m={m} n={n} k={k}, leading dimension {ld}, "
                               f"batch {list(batch)} strides {list(bstrides)}); please report it")


def gemm_call(c, kernel, plan, slots, gemm_slot, park_slot, symbol_index=None, sizes=None):
    """LLVM lines running matmul `kernel` by BLAS (batches in a loop), after setting the pool's park
    flag (its shared words in table slot `park_slot`, if not null); registers and labels start
    with `c`. Symbolic sizes (M, N, K, leading dimensions, batch sizes and strides, offsets) are read
    from the call's sizes array (table slot `sizes`, `symbol_index` its order, sizes.py); such a call
    is skipped where the product is empty and writes zeros where K is 0."""
    itype = blas()[0]
    ty = "float" if plan["dtype"] == "float32" else "double"
    a, b = kernel.args
    lines = [f"  %{c}kp = getelementptr ptr, ptr %table, i64 {park_slot}", f"  %{c}k = load ptr, ptr %{c}kp",
             f"  %{c}kn = icmp eq ptr %{c}k, null", f"  br i1 %{c}kn, label %{c}go, label %{c}park", f"{c}park:",
             f"  %{c}kf = getelementptr i64, ptr %{c}k, i64 {PARK_WORD}", f"  store atomic i64 1, ptr %{c}kf monotonic, align 8",
             f"  br label %{c}go", f"{c}go:"]

    def size(d):
        return driver_operand(lines, c, d, symbol_index, sizes)
    for reg, slot in (("a", slots[id(a.buf)]), ("b", slots[id(b.buf)]), ("c", slots[id(kernel.node.out)]),
                      ("fn", gemm_slot)):
        lines += [f"  %{c}{reg}p = getelementptr ptr, ptr %table, i64 {slot}", f"  %{c}{reg} = load ptr, ptr %{c}{reg}p"]
    batch = plan["batch"]
    nb = math.prod(batch)
    dims = [size(plan[x]) for x in "mnk"]
    looped = is_sym(nb) or nb > 1
    if symbolic((nb, plan["m"], plan["n"], plan["k"])):   # an empty product: no call; K = 0: zeros
        mn = f"%{c}mn"
        lines += [f"  {mn}0 = mul i64 {dims[0]}, {dims[1]}", f"  {mn} = mul i64 {mn}0, {size(nb)}",
                  f"  %{c}none = icmp eq i64 {mn}, 0", f"  br i1 %{c}none, label %{c}done, label %{c}some", f"{c}some:",
                  f"  %{c}k0 = icmp eq i64 {dims[2]}, 0", f"  br i1 %{c}k0, label %{c}zero, label %{c}pre", f"{c}zero:",
                  f"  %{c}bytes = mul i64 {mn}, {4 if ty == 'float' else 8}",
                  f"  call void @llvm.memset.p0.i64(ptr %{c}c, i8 0, i64 %{c}bytes, i1 false)",
                  f"  br label %{c}done", f"{c}pre:", f"  br label %{c}loop", f"{c}loop:",
                  f"  %{c}i = phi i64 [0, %{c}pre], [%{c}i1, %{c}next]"]
    elif looped:
        lines += [f"  br label %{c}pre", f"{c}pre:", f"  br label %{c}loop", f"{c}loop:",
                  f"  %{c}i = phi i64 [0, %{c}pre], [%{c}i1, %{c}next]"]
    offs = {}
    for reg, (offset, bstrides) in (("a", plan["a"]), ("b", plan["b"]), ("c", (0, list(_contiguous(batch, plan))))):
        acc, inner = size(offset), 1
        for d in range(len(batch) - 1, -1, -1):
            if (is_sym(bstrides[d]) or bstrides[d]) and (is_sym(batch[d]) or batch[d] > 1):
                q = f"%{c}{reg}q{d}"
                lines += [f"  {q}a = udiv i64 %{c}i, {size(inner)}", f"  {q}b = urem i64 {q}a, {size(batch[d])}",
                          f"  {q}c = mul i64 {q}b, {size(bstrides[d])}", f"  {q} = add i64 {acc}, {q}c"]
                acc = q
            inner *= batch[d]
        lines.append(f"  %{c}{reg}x = getelementptr {ty}, ptr %{c}{reg}, i64 {acc}")
        offs[reg] = f"%{c}{reg}x"
    (ta, lda), (tb, ldb) = plan["ta"], plan["tb"]
    if itype == "i32":
        dims = [_trunc(lines, c, x, f"d{i}") for i, x in enumerate(dims)]
        lda, ldb, ldc = (_trunc(lines, c, size(x), f"ld{i}") for i, x in enumerate((lda, ldb, plan["n"])))
    else:
        lda, ldb, ldc = size(lda), size(ldb), dims[1]
    args = (f"i32 {ROW_MAJOR}, i32 {ta}, i32 {tb}, {itype} {dims[0]}, {itype} {dims[1]}, {itype} {dims[2]}, "
            f"{ty} 1.0, ptr {offs['a']}, {itype} {lda}, ptr {offs['b']}, {itype} {ldb}, {ty} 0.0, "
            f"ptr {offs['c']}, {itype} {ldc}")
    lines.append(f"  call void %{c}fn({args})")
    if looped or symbolic((nb, plan["m"], plan["n"], plan["k"])):
        lines += [f"  br label %{c}next", f"{c}next:", f"  %{c}i1 = add i64 %{c}i, 1",
                  f"  %{c}more = icmp ult i64 %{c}i1, {size(nb)}",
                  f"  br i1 %{c}more, label %{c}loop, label %{c}done", f"{c}done:"]
    return lines


def _trunc(lines, c, operand, name):
    """An i64 operand as the i32 a 32-bit BLAS interface takes."""
    if not operand.startswith("%"):
        return operand
    lines.append(f"  %{c}{name}t = trunc i64 {operand} to i32")
    return f"%{c}{name}t"


def _contiguous(batch, plan):
    """The output's batch strides (a fresh contiguous array)."""
    step, out = plan["m"] * plan["n"], []
    for s in reversed(batch):
        out.append(step)
        step *= s
    return reversed(out)


def body_call(c, body, arg_slots, lo="0", hi="1", sizes=None, lines=()):
    """LLVM lines calling kernel body `body` on the buffers of table slots `arg_slots` over rows [lo, hi);
    `sizes`: the table slot of the call's sizes array, for a body that takes it (sizes.py); `lines`: lines
    computing lo or hi, first."""
    slots = list(arg_slots) + ([] if sizes is None else [sizes])
    lines = list(lines) + [line for i, slot in enumerate(slots) for line in
                           (f"  %{c}p{i} = getelementptr ptr, ptr %table, i64 {slot}", f"  %{c}a{i} = load ptr, ptr %{c}p{i}")]
    args = "".join(f"ptr %{c}a{i}, " for i in range(len(slots)))
    return lines + [f"  call void @{body}({args}i64 {lo}, i64 {hi})"]


def entry_function(name, body, arg_slots, sizes=None):
    """`void @name(ptr %table, i64 %lo, i64 %hi)`: a kernel's rows [lo, hi) (a chunk, for the threads)."""
    lines = body_call("c", body, arg_slots, "%lo", "%hi", sizes)
    return (f"define void @{name}(ptr nocapture readonly %table, i64 %lo, i64 %hi) #1 {{\nentry:\n"
            + "\n".join(lines) + "\n  ret void\n}")


def segment_function(name, calls):
    """`void @name(ptr %table)`: the kernels' lines `calls` (body_call, gemm_call) one after the other,
    left unoptimized (`optnone`): straight-line calls gain nothing from LLVM's passes, which took a
    tenth of W8's module time (0.205 -> 0.187 s) and of W4's (0.333 -> 0.299 s)."""
    return (f"define void @{name}(ptr nocapture readonly %table) noinline optnone #1 {{\nentry:\n"
            + "\n".join(line for lines in calls for line in lines) + "\n  ret void\n}")


def step_function(name, calls):
    """`void @name(ptr %table, i64 %j)`: kernel j alone, for each (j, lines) in `calls` (check mode and
    profiles run a program kernel by kernel)."""
    cases = " ".join(f"i64 {j}, label %k{j}" for j, _ in calls)
    blocks = "".join(f"k{j}:\n" + "\n".join(lines) + "\n  br label %end\n" for j, lines in calls)
    return (f"define void @{name}(ptr nocapture readonly %table, i64 %j) #1 {{\nentry:\n"
            f"  switch i64 %j, label %end [ {cases} ]\n{blocks}end:\n  ret void\n}}")
