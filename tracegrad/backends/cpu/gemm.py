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
that cannot split (no batch, fewer than 2 * MIN_ROWS rows and columns) keeps OpenBLAS's threads where
it is large (SOLO_WORK or more: `solo`), and runs on one thread where it is not.

Sizes known only at the call (dynamic=True) fold and split the same way: `x @ w` with x [B, T, K] is one
call of B*T rows where that holds for every size, and a product that some sizes make worth splitting gets
its region compiled in, which each call takes or not by its own sizes (`per_call`), its chunks cut for
the call's extent (`Chunks.cut`); the BLAS stays on one thread either way.
"""
import ctypes
import math

from ...ir.kernels import known
from ...symint import hint, is_sym, same_size

ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112
SPLIT_WORK = 1 << 18      # multiply-adds: OpenBLAS's own threshold for threads (SMP_THRESHOLD_MIN * 4)
SOLO_WORK = 1 << 23       # multiply-adds: an unsplit product below this runs with the BLAS on one thread
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
    None when no axis folds. Sizes and strides may be symbolic: an axis folds where that holds for
    every size (a symbolic extent that is 1 at a call folds too; no guard is recorded)."""
    sm, sk = a_strides
    batch, a_batch, b_batch = list(batch), list(a_batch), list(b_batch)
    folded = False
    while batch:
        size, sa = batch[-1], a_batch[-1]
        if not known(size, 1):
            if not known(b_batch[-1], 0):
                break
            row = sa if known(m, 1) else sm     # one row: the batch stride becomes the row stride
            if not same_size(sa, m * row) or operand((m * size, k), (row, sk)) is None:
                break
            m, sm = m * size, row
        batch.pop(), a_batch.pop(), b_batch.pop()
        folded = True
    if not folded:
        return None
    return m, operand((m, k), (sm, sk)), tuple(batch), a_batch, b_batch


def gemm_lines(c, plan, itype, ptrs, lo, hi, axis=None, size=None, lines=()):
    """LLVM lines (after `lines`) calling BLAS (`ptrs`: registers of a, b, c and the gemm function) for
    batch entries [lo, hi) of `plan` (at least one), or where it has no batch for its rows [lo, hi) (axis
    "rows"), its columns (axis "cols") or the whole product (axis None); lo, hi: i64 operands. `size(lines,
    d)`: the i64 operand of size d, lines computing it appended (sizes.driver_operand, for a plan with
    symbolic sizes; by default a literal). Registers and labels start with `c`."""
    lines = list(lines)
    ty = "float" if plan["dtype"] == "float32" else "double"
    batch, (ta, lda), (tb, ldb) = plan["batch"], plan["ta"], plan["tb"]
    op = (lambda d: str(int(d))) if size is None else (lambda d: size(lines, d))
    dims, offs = {"rows": op(plan["m"]), "cols": op(plan["n"]), "k": op(plan["k"])}, {}
    ldc = dims["cols"]
    if batch:
        lines += [f"  br label %{c}pre", f"{c}pre:", f"  br label %{c}loop", f"{c}loop:",
                  f"  %{c}i = phi i64 [{lo}, %{c}pre], [%{c}i1, %{c}loop]"]
        for reg, (offset, bstrides) in (("a", plan["a"]), ("b", plan["b"]),
                                        ("c", (0, contiguous(batch, plan["m"] * plan["n"])))):
            acc, inner = op(offset), 1
            for d in range(len(batch) - 1, -1, -1):
                if not known(bstrides[d], 0) and not known(batch[d], 1):
                    q = f"%{c}{reg}q{d}"
                    lines += [f"  {q}a = udiv i64 %{c}i, {op(inner)}", f"  {q}b = urem i64 {q}a, {op(batch[d])}",
                              f"  {q}c = mul i64 {q}b, {op(bstrides[d])}", f"  {q} = add i64 {acc}, {q}c"]
                    acc = q
                inner = inner * batch[d]
            offs[reg] = acc
    elif axis is None:      # the whole product
        offs = {"a": op(plan["a"][0]), "b": op(plan["b"][0]), "c": "0"}
    else:                   # rows of a (its unit-stride columns when transposed) or columns of b
        a_step = (lda if ta == NO_TRANS else 1) if axis == "rows" else 0
        b_step = (1 if tb == NO_TRANS else ldb) if axis == "cols" else 0
        c_step = plan["n"] if axis == "rows" else 1
        lines += [f"  %{c}ext = sub i64 {hi}, {lo}", f"  %{c}ar = mul i64 {lo}, {op(a_step)}",
                  f"  %{c}ao = add i64 %{c}ar, {op(plan['a'][0])}", f"  %{c}br = mul i64 {lo}, {op(b_step)}",
                  f"  %{c}bo = add i64 %{c}br, {op(plan['b'][0])}", f"  %{c}co = mul i64 {lo}, {op(c_step)}"]
        offs, dims[axis] = {"a": f"%{c}ao", "b": f"%{c}bo", "c": f"%{c}co"}, f"%{c}ext"
    for reg in "abc":
        lines.append(f"  %{c}{reg}x = getelementptr {ty}, ptr {ptrs[reg]}, i64 {offs[reg]}")
    narrow = _narrowing(lines, itype)
    lines.append(f"  call void {ptrs['fn']}(i32 {ROW_MAJOR}, i32 {ta}, i32 {tb}, {narrow(dims['rows'])}, "
                 f"{narrow(dims['cols'])}, {narrow(dims['k'])}, {ty} 1.0, ptr %{c}ax, {narrow(op(lda))}, ptr %{c}bx, "
                 f"{narrow(op(ldb))}, {ty} 0.0, ptr %{c}cx, {narrow(ldc)})")
    if batch:
        lines += [f"  %{c}i1 = add i64 %{c}i, 1", f"  %{c}more = icmp ult i64 %{c}i1, {hi}",
                  f"  br i1 %{c}more, label %{c}loop, label %{c}done", f"{c}done:"]
    return lines


def _narrowing(lines, itype):
    """operand -> typed argument of the BLAS interface's int type: an i64 register truncated (once) where
    it takes i32 (lines appended to `lines`)."""
    made = {}

    def narrow(x):
        if itype == "i64" or not x.startswith("%"):
            return f"{itype} {x}"
        if x not in made:
            made[x] = f"{x}.i32"
            lines.append(f"  {made[x]} = trunc i64 {x} to i32")
        return f"i32 {made[x]}"
    return narrow


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
    more), or where it has more columns than rows (or too few rows) its columns so; no partial results.
    `axis`: None (batch entries), "rows" or "cols". Measured one thread, CPU time, 1024^3 float32: 16
    chunks of 64 rows ran at 77 % of one sgemm call, 4 of 256 at 95 % (each call packs all of b; a
    chunk of columns packs all of a, so the longer side is cut): 128x2048 (K 576, W10's last
    convolution) 75 GFLOP/s in 2 chunks of rows, 84 in 8 of columns, 87 whole; 128x576 (K 2048) 83,
    89, 91; 256x1024 (K 256) 86, 91, 92; 256x768 (K 3072) 90, 93, 97; 256x2048 (K 128) 81, 77, 80.
    An extent known only at the call (symbolic) has MAX_CHUNKS chunks, cut per call (`cut`, from
    Region.resize) as a known one is, the chunks past the count empty."""
    outs, online, members, entry, per_call, counted, record = (), (), None, None, False, False, ()

    def __init__(self, plan):
        if plan["batch"]:
            self.axis, self.extent, self.least = None, math.prod(plan["batch"]), 2
        else:
            m, n = plan["m"], plan["n"]
            wide = not is_sym(m) and not is_sym(n) and n > m and n >= 2 * MIN_ROWS
            self.axis = "rows" if (is_sym(m) or m >= 2 * MIN_ROWS) and not wide else "cols"
            self.extent, self.least = (m if self.axis == "rows" else plan["n"]), 2 * MIN_ROWS
        self.n = MAX_CHUNKS if self.symbolic() else self.count(self.extent)
        self.bounds = self.cut(hint(self.extent))
        self.work = plan["m"] * plan["n"] * plan["k"] * math.prod(plan["batch"]) if varies(plan) else None

    def splits_at(self, size):
        """Whether a call whose sizes are `size(d)` (ints) runs it on the pool (`per_call`'s test)."""
        return self.work is None or size(self.work) >= SPLIT_WORK and size(self.extent) >= self.least

    def symbolic(self):
        """Whether the bounds follow the call's sizes (Region.resize), not constants."""
        return is_sym(self.extent)

    def count(self, extent):
        """How many chunks an extent of `extent` (an int) is cut into: 1 where it does not split."""
        if extent < self.least:
            return 1
        return min(MAX_CHUNKS, extent if self.axis is None else max(2, extent // BLOCK_ROWS))

    def cut(self, extent):
        """The n + 1 chunk bounds for an extent of `extent`: count(extent) even chunks, then empty ones."""
        k = self.count(extent)
        return [extent * i // k for i in range(k + 1)] + [extent] * (self.n - k)


def varies(plan):
    """Whether a product's sizes (M, N, K, batch) are known only at the call."""
    return any(map(is_sym, (plan["m"], plan["n"], plan["k"], *plan["batch"])))


def split(plan, blas_fns):
    """The Chunks of a product worth splitting over the pool, else None: one of at least SPLIT_WORK
    multiply-adds (below it OpenBLAS runs single-threaded too) and two chunks, where the BLAS's thread
    count can be set (each chunk's call then runs on one thread: see the module). A product whose sizes
    vary is split where some sizes make it worth it; `per_call` decides at each call."""
    if not blas_fns.get("set_threads"):
        return None
    chunks = Chunks(plan)
    if chunks.n < 2 or not varies(plan) and plan["m"] * plan["n"] * plan["k"] * math.prod(plan["batch"]) < SPLIT_WORK:
        return None
    return chunks


def solo(plan):
    """Whether a product of known sizes that does not split runs with the BLAS on one thread: below
    SOLO_WORK multiply-adds (~0.1 ms on one core) a second OpenBLAS thread saves little, and on a busy
    host its call waits for that thread: W9's Linear products (64x400x120) took 23-57 ms each at a
    load of 8 with OpenBLAS's threads, under 0.1 ms on one."""
    return not varies(plan) and plan["m"] * plan["n"] * plan["k"] * math.prod(plan["batch"]) < SOLO_WORK


def per_call(c, plan, chunks, size, split_lines, whole_lines):
    """LLVM lines running a product whose sizes vary (`varies`) split (`split_lines`: its region) where the
    call's sizes make it worth it (SPLIT_WORK multiply-adds or more, an extent of chunks.least or more), else
    whole (`whole_lines`: its registers and labels named after `c` + "u"); `size(lines, d)`:
    sizes.driver_operand with registers named after `c`."""
    lines = []
    work = size(lines, plan["m"] * plan["n"] * plan["k"] * math.prod(plan["batch"]))
    extent = size(lines, chunks.extent)
    lines += [f"  %{c}wbig = icmp sge i64 {work}, {SPLIT_WORK}", f"  %{c}wwide = icmp sge i64 {extent}, {chunks.least}",
              f"  %{c}worth = and i1 %{c}wbig, %{c}wwide", f"  br i1 %{c}worth, label %{c}split, label %{c}whole",
              f"{c}split:"]
    return (lines + split_lines + [f"  br label %{c}joined", f"{c}whole:"] + whole_lines
            + [f"  br label %{c}joined", f"{c}joined:"])


def region_entry(name, plan, chunks, itype, reg_slots, size=None):
    """`void @name(ptr %record, i64 %lo, i64 %hi)`: the BLAS calls of a split product's chunk, none for an
    empty one; `size`: as gemm_lines' (registers named after "c"). The operands' table slots (`reg_slots`:
    operand_slots) are data, not constants: `chunks.record` is set to them, and the region's descriptor
    (regions.Region) hands each chunk the record [pointer table, slots...], so that products alike but
    for their buffers share one entry (ModuleBuilder.shared): W11's 133 entries are 8."""
    chunks.record = tuple(reg_slots.values())
    lines = ["  %table = load ptr, ptr %record", "  %empty = icmp sge i64 %lo, %hi",
             "  br i1 %empty, label %end, label %go", "go:"]
    for i, reg in enumerate(reg_slots, 1):
        lines += [f"  %c{reg}sp = getelementptr i64, ptr %record, i64 {i}", f"  %c{reg}s = load i64, ptr %c{reg}sp"]
    lines, ptrs = pointer_lines("c", {reg: f"%c{reg}s" for reg in reg_slots}, lines)
    lines = gemm_lines("c", plan, itype, ptrs, "%lo", "%hi", chunks.axis, size, lines)
    return (f"define void @{name}(ptr nocapture readonly %record, i64 %lo, i64 %hi) #1 {{\nentry:\n"
            + "\n".join(lines) + "\n  br label %end\nend:\n  ret void\n}")


def one_thread(c, blas_slots, region):
    """LLVM lines running `region` (a split product's region_call lines) with the BLAS on one thread,
    its thread count restored after (table slots `blas_slots`: driver.gemm_slots)."""
    lines, fns = pointer_lines(f"{c}bt", {"s": blas_slots["set_threads"], "g": blas_slots["get_threads"]}, [])
    return (lines + [f"  %{c}btn = call i32 {fns['g']}()", f"  call void {fns['s']}(i32 1)"] + region
            + [f"  call void {fns['s']}(i32 %{c}btn)"])
