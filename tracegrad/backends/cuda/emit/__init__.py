"""The numba.cuda code generator: kernels of the kernel IR (ir/kernels.py) lowered to generated
numba.cuda source, compiled once and cached (compile.py). expr.py translates the primitives'
scalar lowerings, reduce.py accumulates and combines, skeletons.py holds the kernel shapes and
lower.py picks one per kernel with its launch geometry.

Entry for compiled programs: `compile_kernels(kernels, name) -> [[CudaKernel] | None]`.
"""
from .lower import CudaKernel, compile_kernels, lower_kernel

__all__ = ["CudaKernel", "compile_kernels", "lower_kernel"]
