"""Tensors made from shapes (zeros_like), aranges a trace makes (iota: start + step * i, which fusion
reads as its index without memory) and random tensors (never merged or folded)."""
import numpy as np

from ..core import RNG, prim

prim("zeros_like", "creation", lambda shapes, dtypes: (shapes[0], dtypes[0]), np.zeros_like,
     vjp=None, jvp=None, save=(), lower=None, dtypes=(), cost=None)


def _random_rule(shapes, dtypes, shape, dtype):
    if not dtype.is_floating_point:
        raise TypeError(f"random tensors need a floating-point dtype, got {dtype}")
    return tuple(shape), dtype


prim("rand", "random", _random_rule, lambda shape, dtype: RNG[0].random(shape, dtype=np.float64).astype(dtype.np),
     vjp=None, jvp=None, save=(), lower=None, dtypes=(), cost=None)
prim("randn", "random", _random_rule,
     lambda shape, dtype: RNG[0].standard_normal(shape, dtype=np.float64).astype(dtype.np),
     vjp=None, jvp=None, save=(), lower=None, dtypes=(), cost=None)
prim("randint", "random", lambda shapes, dtypes, low, high, shape, dtype: (tuple(shape), dtype),
     lambda low, high, shape, dtype: RNG[0].integers(low, high, shape).astype(dtype.np),
     vjp=None, jvp=None, save=(), lower=None, dtypes=(), cost=None)
prim("randperm", "random", lambda shapes, dtypes, n, dtype: ((n,), dtype),
     lambda n, dtype: RNG[0].permutation(n).astype(dtype.np),
     vjp=None, jvp=None, save=(), lower=None, dtypes=(), cost=None)
prim("iota", "creation", lambda shapes, dtypes, n, start, step, dtype: ((n,), dtype),
     lambda n, start, step, dtype: (start + step * np.arange(n, dtype=np.int64)).astype(dtype.np),
     vjp=None, jvp=None, save=(), lower=None, dtypes=(), cost=None)
