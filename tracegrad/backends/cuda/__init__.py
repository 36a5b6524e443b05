"""The cuda backend (numba.cuda on a GPU, or numba's simulator with NUMBA_ENABLE_CUDASIM=1); `tg.cuda`
(tracegrad/cuda) re-exports its public names. numba.cuda is imported on first use.

The package: gpu.py (whether a device is usable, how many, its name), memory.py (device arrays, the counted host<->device copies) and allocator.py (the
caching allocator behind them); eager/ (eager primitives on the device: kernels.py copy, gather,
scatter-add, fill, random; matmul.py cuBLAS or a tiled kernel; pointwise.py elementwise and reduction
kernels; argreduce.py, rounding.py, scan.py, blockscan.py for primitives without a scalar lowering);
the compiler: lower.py (a fused kernel -> its launch shape and geometry), emit/ (the numba.cuda source
of each shape), compile.py (compiled once, cached), program.py (a compiled program's kernels and
buffers), run.py (what a compiled call does with device tensors); info.py (`backend_info()`) and
ptxcheck.py (the PTX check of recorded launches).
"""
