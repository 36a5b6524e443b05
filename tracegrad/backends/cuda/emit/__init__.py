"""The numba.cuda emitters: generated numba.cuda source for the kernels of the kernel IR. expr.py
translates the scalar expressions, reduce.py accumulates and combines, skeletons.py writes each kernel
shape, vector.py the vector loads and stores, eager.py the kernels of single eager primitives. They
write what they are given: plan.py (one level up) chooses the strategy and its geometry, lower.py
hands each strategy to its skeleton, compile.py compiles and caches.
"""
