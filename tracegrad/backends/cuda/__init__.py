"""The cuda backend (numba.cuda on a GPU, or numba's simulator with NUMBA_ENABLE_CUDASIM=1); `tg.cuda`
(tracegrad/cuda) re-exports its public names. numba.cuda is imported on first use.

Below the eager tensors (they hold device arrays and call eager kernels): gpu.py (whether a device is
usable, how many, its name), arrays.py (device arrays: allocation through allocator.py's caching
allocator, views, layout), memory.py (the counted host<->device copies, constants, synchronize; it
re-exports arrays.py), eager/ (eager primitives on the device, by kind: kernels.py copy, gather,
scatter-add, fill, random; matmul.py cuBLAS or a tiled kernel; argreduce.py, rounding.py, blockscan.py),
info.py (`backend_info()`).

Above the IR (the compiler): plan.py (each kernel -> launches: one strategy and its geometry each),
lower.py (emits each strategy), emit/ (the numba.cuda source of each shape), compile.py (compiled
once, cached), program.py (a compiled program's kernels and buffers), run.py (what a compiled call
does with device tensors), ptxcheck.py (the PTX check of recorded launches), and eager/generated.py
with pointwise.py and scan.py (the eager elementwise, reduction and scan kernels the compiler
generates; tracegrad/cuda hands them to eager/).
"""
