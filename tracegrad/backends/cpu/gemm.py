"""How a matrix product's operands reach BLAS: each operand's transpose flag and leading dimension,
and batch axes folded into the rows where memory allows (one large call instead of a loop of small
ones).

`x @ w` with x [B, T, K] contiguous and w [K, N] is B products of T x K by K x N in a loop, but the
B row blocks of x lie one after the other at the rows' own stride and w is the same matrix for each:
it is one product of (B*T) x K by K x N, into an output whose blocks lie one after the other too.
OpenBLAS runs the one call at its full rate (on the 2-core bench host 512x384x128: 185 GFLOP/s)
where 8 calls of 64x384x128 reach 140 in NumPy's loop and 35-75 in W12's compiled step.

Threads: OpenBLAS's worker threads spin for a while after each threaded call (its THREAD_TIMEOUT,
~0.1 s), on a 2-core machine against the fused kernels that follow and the pool's own worker:
W12's step on main burned 77 ms of the OpenBLAS thread's CPU per 37 ms step, and a 2-thread sgemm
on a loaded host fell to 10 GFLOP/s where one thread ran 73. So a product of SPLIT_WORK or more
multiply-adds is a parallel region of tracegrad's pool (regions.py): chunks of batch entries, or of
row blocks where it has none, each one BLAS call with the BLAS set to one thread for the region (its
count restored after), the Judge choosing the pool or the calling thread by measured time like any
split kernel. Smaller products run single-threaded in OpenBLAS anyway (its own threshold); a product
that cannot split (no batch, fewer than 2 * MIN_ROWS rows and columns) keeps OpenBLAS's threads.
"""
import ctypes
import math

from ...ir.kernels import known
from ...symint import is_sym

ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112
SPLIT_WORK = 1 << 18      # multiply-adds: OpenBLAS's own threshold for threads (SMP_THRESHOLD_MIN * 4)
MIN_ROWS = 64             # rows (or columns) per chunk of an unbatched product, at least
BLOCK_ROWS = 256          # and where there are enough, this many: each call packs its whole other operand
MAX_CHUNKS = 16


def operand(shape, strides):
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


def fold_rows(m, k, a_strides, batch, a_batch, b_batch):
    """Fold the innermost batch axes of a product into its rows: (m, a's operand, batch, a's batch
    strides, b's batch strides) after folding every innermost batch axis along which b is the same
    matrix (stride 0, or extent 1) and a's row blocks continue its rows at their own stride. The
    output (contiguous, m x n blocks) continues its rows along those axes by construction. Returns
    None when no axis folds."""
    sm, sk = a_strides
    batch, a_batch, b_batch = list(batch), list(a_batch), list(b_batch)
    folded = False
    while batch:
        size, sa = batch[-1], a_batch[-1]
        if size > 1:
            if b_batch[-1] != 0:
                break
            row = sm if m > 1 else sa       # one row: the batch stride becomes the row stride
            if sa != m * row or operand((m * size, k), (row, sk)) is None:
                break
            m, sm = m * size, row
        batch.pop(), a_batch.pop(), b_batch.pop()
        folded = True
    if not folded:
        return None
    return m, operand((m, k), (sm, sk)), tuple(batch), a_batch, b_batch


def gemm_lines(c, plan, itype, ptrs, lo, hi, axis=None):
    """LLVM lines calling BLAS (`ptrs`: registers of a, b, c and the gemm function) for batch entries
    [lo, hi) of `plan`, or where it has no batch for its rows [lo, hi) (axis "rows") or its columns
    (axis "cols"); lo, hi: i64 registers, or the constants "0" and the whole extent. Registers and
    labels start with `c`."""
    ty = "float" if plan["dtype"] == "float32" else "double"
    batch, m, n = plan["batch"], plan["m"], plan["n"]
    (ta, lda), (tb, ldb) = plan["ta"], plan["tb"]
    lines, offs, size = [], {}, {"rows": str(m), "cols": str(n)}
    if batch:
        lines += [f"  br label %{c}pre", f"{c}pre:", f"  br label %{c}loop", f"{c}loop:",
                  f"  %{c}i = phi i64 [{lo}, %{c}pre], [%{c}i1, %{c}loop]"]
        for reg, (offset, bstrides) in (("a", plan["a"]), ("b", plan["b"]), ("c", (0, contiguous(batch, m * n)))):
            acc, inner = str(offset), 1
            for d in range(len(batch) - 1, -1, -1):
                if bstrides[d] and batch[d] > 1:
                    q = f"%{c}{reg}q{d}"
                    lines += [f"  {q}a = udiv i64 %{c}i, {inner}", f"  {q}b = urem i64 {q}a, {batch[d]}",
                              f"  {q}c = mul i64 {q}b, {bstrides[d]}", f"  {q} = add i64 {acc}, {q}c"]
                    acc = q
                inner *= batch[d]
            offs[reg] = acc
    elif axis is None:      # the whole product
        offs = {"a": str(plan["a"][0]), "b": str(plan["b"][0]), "c": "0"}
    else:                   # rows of a (its unit-stride columns when transposed) or columns of b
        a_step = (lda if ta == NO_TRANS else 1) if axis == "rows" else 0
        b_step = (1 if tb == NO_TRANS else ldb) if axis == "cols" else 0
        lines += [f"  %{c}ext = sub i64 {hi}, {lo}", f"  %{c}ar = mul i64 {lo}, {a_step}",
                  f"  %{c}ao = add i64 %{c}ar, {plan['a'][0]}", f"  %{c}br = mul i64 {lo}, {b_step}",
                  f"  %{c}bo = add i64 %{c}br, {plan['b'][0]}", f"  %{c}co = mul i64 {lo}, {n if axis == 'rows' else 1}"]
        offs, size[axis] = {"a": f"%{c}ao", "b": f"%{c}bo", "c": f"%{c}co"}, f"%{c}ext"
        if itype != "i64":
            lines.append(f"  %{c}ext32 = trunc i64 %{c}ext to {itype}")
            size[axis] += "32"
    for reg in "abc":
        lines.append(f"  %{c}{reg}x = getelementptr {ty}, ptr {ptrs[reg]}, i64 {offs[reg]}")
    lines.append(f"  call void {ptrs['fn']}(i32 {ROW_MAJOR}, i32 {ta}, i32 {tb}, {itype} {size['rows']}, {itype} {size['cols']}, "
                 f"{itype} {plan['k']}, {ty} 1.0, ptr %{c}ax, {itype} {lda}, ptr %{c}bx, {itype} {ldb}, {ty} 0.0, "
                 f"ptr %{c}cx, {itype} {n})")
    if batch:
        lines += [f"  %{c}i1 = add i64 %{c}i, 1", f"  %{c}more = icmp ult i64 %{c}i1, {hi}",
                  f"  br i1 %{c}more, label %{c}loop, label %{c}done", f"{c}done:"]
    return lines


def contiguous(batch, block):
    """The batch strides of a fresh contiguous array of `batch` blocks of `block` elements."""
    step, out = block, []
    for s in reversed(batch):
        out.append(step)
        step *= s
    return list(reversed(out))


def operand_slots(kernel, slots, fn_slot):
    """{register: table slot} of matmul `kernel`'s a, b, output and gemm function."""
    a, b = kernel.args
    return {"a": slots[id(a.buf)], "b": slots[id(b.buf)], "c": slots[id(kernel.node.out)], "fn": fn_slot}


def pointer_lines(c, reg_slots, lines):
    """`lines` plus lines loading each table slot of `reg_slots` into %<c><reg>; and {reg: register}."""
    for reg, slot in reg_slots.items():
        lines = lines + [f"  %{c}{reg}p = getelementptr ptr, ptr %table, i64 {slot}", f"  %{c}{reg} = load ptr, ptr %{c}{reg}p"]
    return lines, {reg: f"%{c}{reg}" for reg in reg_slots}


def thread_functions(lib, prefix, suffix):
    """{"set_threads", "get_threads"}: addresses of OpenBLAS's openblas_set/get_num_threads in `lib`
    (its symbols spelled with `prefix` and `suffix` as its cblas ones: scipy-openblas's
    scipy_openblas_set_num_threads64_), 0 where it has none (products then never split)."""
    out = {}
    for key, verb in (("set_threads", "set"), ("get_threads", "get")):
        try:
            out[key] = ctypes.cast(getattr(lib, f"{prefix}openblas_{verb}_num_threads{suffix}"), ctypes.c_void_p).value
        except AttributeError:
            out[key] = 0
    return out if all(out.values()) else {"set_threads": 0, "get_threads": 0}


class Chunks:
    """A product split over the thread pool (regions.py's Chunks for a matrix product): its batch
    entries; where it has none, its rows in blocks of about BLOCK_ROWS (at least two, of MIN_ROWS or
    more), or where it has too few rows its columns so; no partial results. `axis`: None (batch
    entries), "rows" or "cols". Measured one thread, CPU time, 1024^3 float32: 16 chunks of 64 rows
    ran at 77 % of one sgemm call, 4 of 256 at 95 % (each call packs all of b)."""
    outs, online, members, entry = (), (), None, None

    def symbolic(self):
        """A product is split only where its sizes are known (its bounds are constants)."""
        return False

    def __init__(self, plan):
        if plan["batch"]:
            self.axis, extent = None, math.prod(plan["batch"])
            self.n = min(MAX_CHUNKS, extent)
        else:
            self.axis = "rows" if plan["m"] >= 2 * MIN_ROWS else "cols"
            extent = plan["m"] if self.axis == "rows" else plan["n"]
            self.n = min(MAX_CHUNKS, max(2, extent // BLOCK_ROWS)) if extent >= 2 * MIN_ROWS else 0
        self.bounds = [extent * i // self.n for i in range(self.n + 1)] if self.n > 0 else []


def split(plan, blas_fns):
    """The Chunks of a product worth splitting over the pool, else None: one of at least
    SPLIT_WORK multiply-adds (below it OpenBLAS runs single-threaded too) and two chunks, where the
    BLAS's thread count can be set (each chunk's call then runs on one thread: see the module)."""
    if not blas_fns.get("set_threads") or plan["m"] * plan["n"] * plan["k"] * math.prod(plan["batch"]) < SPLIT_WORK:
        return None
    chunks = Chunks(plan)
    return chunks if chunks.n > 1 else None


def region_entry(name, plan, chunks, itype, reg_slots):
    """`void @name(ptr %table, i64 %lo, i64 %hi)`: the BLAS calls of a split product's chunk."""
    lines, ptrs = pointer_lines("c", reg_slots, [])
    return (f"define void @{name}(ptr nocapture readonly %table, i64 %lo, i64 %hi) #1 {{\nentry:\n"
            + "\n".join(lines + gemm_lines("c", plan, itype, ptrs, "%lo", "%hi", chunks.axis)) + "\n  ret void\n}")


def one_thread(c, blas_slots, region):
    """LLVM lines running `region` (a split product's region_call lines) with the BLAS on one thread,
    its thread count restored after (table slots `blas_slots`: driver.gemm_slots)."""
    lines, fns = pointer_lines(f"{c}bt", {"s": blas_slots["set_threads"], "g": blas_slots["get_threads"]}, [])
    return (lines + [f"  %{c}btn = call i32 {fns['g']}()", f"  call void {fns['s']}(i32 1)"] + region
            + [f"  call void {fns['s']}(i32 %{c}btn)"])
