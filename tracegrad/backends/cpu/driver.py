"""A program's driver: its steps grouped into as few native calls as possible.

A program is a list of kernels run in order. Loop and reduce_acc kernels, split over the thread
pool or not, and matrix products run natively one after the other: each run of them between host
steps becomes one segment, an LLVM function `@<program>_s<i>(ptr %table)` calling the kernels'
functions in order, so Python makes one call per segment instead of one per kernel. A kernel large
enough to split runs as a parallel region inside its segment (regions.py: the chunks posted to the
thread pool and joined natively). What stays in Python between segments, explicitly: host kernels (a
primitive's NumPy implementation: cumsum, indexing, float16 arithmetic, ...; not the scatter-add of rows
that an embedding's gradient is, which runs natively: scatter.py) and matrix products
BLAS cannot take (integer dtypes, operands whose two innermost axes both have a stride other than
one, empty products). A program without host steps is one native call.

Matrix products call the BLAS NumPy ships (its OpenBLAS, through the C entry point cblas_?gemm) by
address: the address sits in the program's pointer table (slots `gemm_slots`), never in the code,
so the object code stays valid in the disk cache and in a forked child. Measured on the 2-core
bench machine, OpenBLAS's sgemm beats straightforward generated loop nests by 4-10x already at
128x32x32 (W8's layers) and a native call costs ~0.1 us, so every float32/float64 product goes to
BLAS; NumPy's own np.matmul adds 1-2 us of Python per call on top of the same BLAS. Before each
product the segment sets the pool's park flag (when the program has a pool), so workers spinning
after a region step aside for BLAS's threads; large products run as regions of the pool instead,
BLAS on one thread per chunk (gemm.py).

The pointer table: the program's buffers (slots.py), then the two gemm addresses and the BLAS's
thread count functions (gemm.py), the pool's shared words and its `tg_region` function
(`pool_slots`), then one descriptor per region (`region_slot`).
"""
import ctypes
import glob
import math
import os

import numpy as np

from ...ir.kernels import known
from ...symint import hint, is_sym
from .gemm import NO_TRANS, contiguous, fold_rows, gemm_lines, operand_slots, pointer_lines, thread_functions
from .gemm import operand as _operand
from .gemm_sized import sized_gemm_lines
from .sizes import symbolic
from .threads import _PARK as PARK_WORD

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
            return itype, {**{k: ctypes.cast(f, ctypes.c_void_p).value for k, f in fns.items()},
                           **thread_functions(lib, prefix.replace("cblas_", ""), suffix)}
    return None


def gemm_slots(n_slots):
    """{dtype name: table slot holding its gemm's address, and those of the BLAS's thread count
    functions (gemm.thread_functions)}: the slots after a program's buffers."""
    return {"float32": n_slots, "float64": n_slots + 1, "set_threads": n_slots + 2, "get_threads": n_slots + 3}


def pool_slots(n_slots):
    """(slot of the pool's shared words, slot of its tg_region function) after the gemm slots; 0
    (null) while the program has not met a pool."""
    return n_slots + 4, n_slots + 5


def sizes_slot(n_slots):
    """The slot of the call's sizes array (the symbols' values, sizes.py)."""
    return n_slots + 6


def region_slot(n_slots, r):
    """The slot of the descriptor of the program's region r (its r-th split kernel)."""
    return n_slots + 7 + r


def table_size(n_slots, n_regions):
    return n_slots + 7 + n_regions


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
    abatch, bbatch = _batch_strides(sa, a.strides, batch), _batch_strides(sb, b.strides, batch)
    if (folded := fold_rows(m, k, a.strides[-2:], batch, abatch, bbatch)) is not None:   # gemm.py
        m, ta, batch, abatch, bbatch = folded
    plan = dict(m=m, n=n, k=k, ta=ta, tb=tb, batch=batch, dtype=out.dtype.name,
                a=(a.offset, abatch), b=(b.offset, bbatch))
    _check_extents(kernel, plan)
    return plan


def _check_extents(kernel, plan):
    """Before any native code exists: every element the BLAS calls of `plan` read (the operands) or
    write (the output) lies inside that buffer, of the plan's dtype. Raises RuntimeError (a compiler
    bug, never a user's) instead of emitting a call that reads or writes outside its memory."""
    (a, b), out = kernel.args, kernel.node.out
    batch, m, n, k = [hint(d) for d in plan["batch"]], hint(plan["m"]), hint(plan["n"]), hint(plan["k"])
    spans = [("a", a.buf, plan["a"], (m, k), plan["ta"]), ("b", b.buf, plan["b"], (k, n), plan["tb"]),
             ("out", out, (0, contiguous(batch, m * n)), (m, n), (NO_TRANS, n))]
    if min(m, n, k, *batch) < 1 and not sized_plan(plan):     # gemm_call calls BLAS at least once
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


def sized_plan(plan):
    """Whether a BLAS plan has symbolic sizes, strides or offsets (read from the call's sizes array)."""
    return symbolic((*plan["batch"], plan["m"], plan["n"], plan["k"], plan["a"][0], *plan["a"][1], plan["b"][0],
                     *plan["b"][1], plan["ta"][1], plan["tb"][1]))


def gemm_call(c, kernel, plan, slots, gemm_slot, park_slot, symbol_index=None, sizes=None):
    """LLVM lines running matmul `kernel` by BLAS (batches in a loop), after setting the pool's park
    flag (its shared words in table slot `park_slot`, if not null); registers and labels start
    with `c`. A plan with symbolic sizes reads them from the call's sizes array (table slot `sizes`,
    `symbol_index` its order, sizes.py): sized_gemm_lines."""
    lines = [f"  %{c}kp = getelementptr ptr, ptr %table, i64 {park_slot}", f"  %{c}k = load ptr, ptr %{c}kp",
             f"  %{c}kn = icmp eq ptr %{c}k, null", f"  br i1 %{c}kn, label %{c}go, label %{c}park", f"{c}park:",
             f"  %{c}kf = getelementptr i64, ptr %{c}k, i64 {PARK_WORD}", f"  store atomic i64 1, ptr %{c}kf monotonic, align 8",
             f"  br label %{c}go", f"{c}go:"]
    if sized_plan(plan):
        return sized_gemm_lines(c, kernel, plan, slots, gemm_slot, lines, symbol_index, sizes, blas)
    lines, ptrs = pointer_lines(c, operand_slots(kernel, slots, gemm_slot), lines)
    return lines + gemm_lines(c, plan, blas()[0], ptrs, "0", str(math.prod(plan["batch"])))


def body_call(c, body, arg_slots, lo="0", hi="1", sizes=None, lines=(), moved=()):
    """LLVM lines calling kernel body `body` on the buffers of table slots `arg_slots` over rows [lo, hi);
    `sizes`: the table slot of the call's sizes array, for a body that takes it (sizes.py); `lines`: lines
    computing lo or hi, first; `moved`: the bytes each pointer is moved forward (shifts.py; default none)."""
    slots = list(arg_slots) + ([] if sizes is None else [sizes])
    lines = list(lines) + [line for i, slot in enumerate(slots) for line in
                           (f"  %{c}p{i} = getelementptr ptr, ptr %table, i64 {slot}", f"  %{c}a{i} = load ptr, ptr %{c}p{i}")]
    args = []
    for i, n in enumerate(list(moved) + [0] * (len(slots) - len(moved))):
        if n:
            lines.append(f"  %{c}m{i} = getelementptr i8, ptr %{c}a{i}, i64 {n}")
        args.append(f"ptr %{c}{'m' if n else 'a'}{i}, ")
    return lines + [f"  call void @{body}({''.join(args)}i64 {lo}, i64 {hi})"]


def entry_function(name, body, arg_slots, sizes=None, moved=()):
    """`void @name(ptr %table, i64 %lo, i64 %hi)`: a kernel's rows [lo, hi) (a chunk, for the threads)."""
    lines = body_call("c", body, arg_slots, "%lo", "%hi", sizes, moved=moved)
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
