"""Bitwise primitives of integer (and bool) tensors: and, or, xor, not. Lowered for int32 and int64
(and/or for bool too); the other integer widths run as NumPy host kernels. Not differentiable."""
import numpy as np

from ..core import prim
from ..scalar import a, b
from .rules import ew_rule

_INTS = ("int32", "int64")


def _int_rule(name):
    rule = ew_rule(name)

    def check(shapes, dtypes):
        out = rule(shapes, dtypes)
        if out[1].is_floating_point:
            raise TypeError(f"{name} is only supported for integer and bool tensors, got {out[1]}")
        return out
    return check


prim("bitwise_and", "elementwise", _int_rule("bitwise_and"), np.bitwise_and, vjp=None, jvp=None, save=(),
     lower=a & b, dtypes=_INTS + ("bool",), cost="cheap")
prim("bitwise_or", "elementwise", _int_rule("bitwise_or"), np.bitwise_or, vjp=None, jvp=None, save=(),
     lower=a | b, dtypes=_INTS + ("bool",), cost="cheap")
# a | b is a ^ b plus the shared bits a & b (disjoint), so the difference is the xor, modulo 2**n
prim("bitwise_xor", "elementwise", _int_rule("bitwise_xor"), np.bitwise_xor, vjp=None, jvp=None, save=(),
     lower=(a | b) - (a & b), dtypes=_INTS, cost="cheap")
prim("bitwise_not", "elementwise", _int_rule("bitwise_not"), np.invert, vjp=None, jvp=None, save=(),
     lower=-a - 1, dtypes=_INTS, cost="cheap")
