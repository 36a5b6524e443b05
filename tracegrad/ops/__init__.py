"""The primitives, one complete `prim(...)` declaration each (the fields: tracegrad/core.py).

elementwise.py  math, arithmetic, comparisons, logic, where, cast, copy
reductions.py   sum, max, min, prod, argmax, argmin
layout.py       views (reshape, permute, expand, slice) and rearranging copies (unslice, cat)
indexing.py     integer-tensor indexing and its scatter-add
matmul.py       the matrix product (extern: BLAS)
windows.py      sliding windows (the view under convolution and pooling) and their scatter-add
creation.py     zeros_like, rand, randn
collective.py   all_reduce, broadcast, all_gather, reduce_scatter across the processes of a distributed run
rounding_trig.py ceil, trunc; asin, acos, atan, atan2, sinh, cosh (host kernels; declared surfaces)
bitwise.py      bitwise and, or, xor, not
sorting.py      argsort (sort, topk, kthvalue gather by it)
diagonal.py     the diagonal view
rules.py        the type rules and axis helpers they share

A new elementwise primitive is one `prim(...)` (or `_unary`/`_binary`) call in elementwise.py with
its scalar lowering (an expression over tracegrad/scalar.py's vocabulary), lowered dtypes and cost;
fusion, remat, the runtime and the code generators pick it up from there, and tests/test_table.py
checks its fields and compiles its lowering against its NumPy implementation for every dtype it
declares. A lowering that calls a new math function also needs that function declared (scalar.fn)
and its two routines in backends/cpu/mathlib/ (f32.py, f64.py). Its `surface=` (core.Surface) makes its
Tensor method, in-place form, tg.<name> function and docs/api.md row (xlogy is an example). A new view is likewise one declaration
(layout.py) whose `remap` says where its elements sit.
"""
from ..core import PRIMS, RNG, Prim, bind
from . import (collective, creation, elementwise, indexing, layout, matmul, reductions,  # noqa: F401  (each registers its prims)
               windows)
from . import bitwise, diagonal, rounding_trig, sorting  # noqa: F401
from .rules import _norm_axis, _reduce_shape, normalize_axes

__all__ = ["PRIMS", "RNG", "Prim", "bind", "normalize_axes", "_norm_axis", "_reduce_shape"]
