"""Matrix product: an extern call (BLAS), never fused."""
import math

import numpy as np

from ..broadcast import broadcast_shapes, unbroadcast
from ..core import prim
from .rules import same_dtype, sum_tangents


def _matmul_rule(shapes, dtypes):
    a, b = shapes
    d = same_dtype("matmul", dtypes)
    if len(a) < 2 or len(b) < 2:
        raise RuntimeError(f"matmul primitive needs 2-D or batched operands, got {a} and {b}")
    if a[-1] != b[-2]:
        raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({a[-2]}x{a[-1]} and {b[-2]}x{b[-1]}): "
                           f"operand shapes {a} and {b}")
    return broadcast_shapes(a[:-2], b[:-2]) + (a[-2], b[-1]), d   # batch dims: never a BroadcastWarning


def _grad_b(n, g):
    """b's gradient: where b is one matrix for every batch of a (x @ w of a linear layer), the batch
    folds into the contraction, one (B*T) x K by (B*T) x N product instead of B products and a sum."""
    a, sb = n.x(0), n.shapes[1]
    if len(n.shapes[0]) > 2 and math.prod(sb[:-2]) == 1:
        rows = math.prod(n.shapes[0][:-1])          # not -1: k or n may be 0
        return (a.reshape(rows, sb[-2]).mT @ g.reshape(rows, sb[-1])).reshape(sb)
    return unbroadcast(a.mT @ g, sb)


prim("matmul", "extern", _matmul_rule, np.matmul,
     vjp=(lambda n, g: unbroadcast(g @ n.x(1).mT, n.shapes[0]), _grad_b),
     jvp=lambda n, ts: sum_tangents([None if ts[0] is None else ts[0] @ n.x(1),
                                     None if ts[1] is None else n.x(0) @ ts[1]]),
     save={0: (1,), 1: (0,)}, lower=None, dtypes=(), cost=None, zero="any")
