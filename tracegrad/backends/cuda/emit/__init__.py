"""The numba.cuda emitters: generated numba.cuda source for the kernels of the kernel IR. expr.py
translates the scalar expressions, reduce.py accumulates and combines, skeletons.py writes each kernel
shape, vector.py the vector loads and stores, eager.py the kernels of single eager primitives. The
choice of shape and launch geometry is lower.py's (one level up); compile.py compiles and caches.
"""
