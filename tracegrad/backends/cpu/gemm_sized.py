"""A BLAS call whose sizes are symbolic (issue 26): M, N, K, leading dimensions, batch sizes, strides and
offsets are read from the call's sizes array (sizes.py) at run time; the call is skipped where the product
is empty and writes zeros where K is 0. Plans with known sizes go through gemm.py (folds, thread splits)."""
import math

from ...symint import is_sym
from .gemm import ROW_MAJOR
from .sizes import driver_operand, symbolic


def sized_gemm_lines(c, kernel, plan, slots, gemm_slot, lines, symbol_index, sizes, blas):
    """LLVM lines (after `lines`) running matmul `kernel` by BLAS with the plan's symbolic sizes;
    `blas`: driver.blas."""
    itype = blas()[0]
    lines = list(lines)
    ty = "float" if plan["dtype"] == "float32" else "double"
    a, b = kernel.args

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
