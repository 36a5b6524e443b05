"""A BLAS call whose sizes are symbolic (issue 26): M, N, K, leading dimensions, batch sizes, strides and
offsets are read from the call's sizes array (sizes.py) at run time; the call is skipped where the product
is empty and writes zeros where K is 0. The calls themselves are gemm.py's `gemm_lines`, given the sizes'
operands (the same lines run a split product's chunks, gemm.region_entry)."""
import math

from .gemm import gemm_lines, operand_slots, pointer_lines
from .sizes import driver_operand, symbolic


def sized_size(c, symbol_index, sizes):
    """size(lines, d) for gemm_lines: the operand of size d, read from the sizes array (table slot `sizes`)."""
    return lambda lines, d: driver_operand(lines, c, d, symbol_index, sizes)


def sized_gemm_lines(c, kernel, plan, slots, gemm_slot, lines, symbol_index, sizes, blas):
    """LLVM lines (after `lines`) running matmul `kernel` by BLAS with the plan's symbolic sizes;
    `blas`: driver.blas."""
    size = sized_size(c, symbol_index, sizes)
    lines, ptrs = pointer_lines(c, operand_slots(kernel, slots, gemm_slot), list(lines))
    nb = math.prod(plan["batch"])
    if not symbolic((nb, plan["m"], plan["n"], plan["k"])):
        return gemm_lines(c, plan, blas()[0], ptrs, "0", size(lines, nb), None, size, lines)
    m, n, k, count = (size(lines, d) for d in (plan["m"], plan["n"], plan["k"], nb))
    mn = f"%{c}mn"           # an empty product: no call; K = 0: zeros
    lines += [f"  {mn}0 = mul i64 {m}, {n}", f"  {mn} = mul i64 {mn}0, {count}",
              f"  %{c}none = icmp eq i64 {mn}, 0", f"  br i1 %{c}none, label %{c}end, label %{c}some", f"{c}some:",
              f"  %{c}k0 = icmp eq i64 {k}, 0", f"  br i1 %{c}k0, label %{c}zero, label %{c}call", f"{c}zero:",
              f"  %{c}bytes = mul i64 {mn}, {4 if plan['dtype'] == 'float32' else 8}",
              f"  call void @llvm.memset.p0.i64(ptr %{c}c, i8 0, i64 %{c}bytes, i1 false)",
              f"  br label %{c}end", f"{c}call:"]
    return gemm_lines(c, plan, blas()[0], ptrs, "0", count, None, size, lines) + [f"  br label %{c}end", f"{c}end:"]
