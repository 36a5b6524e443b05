"""ceil and trunc (piecewise constant, zero gradient, as floor and round; lowered for floats, an
integer tensor is whole already), and the inverse trigonometric and hyperbolic functions asin, acos,
atan, atan2, sinh, cosh: NumPy host kernels in compiled code (the math library has no routines
for them)."""
import numpy as np

from ..broadcast import unbroadcast
from ..core import FLOAT, Surface, bind, prim
from .. import scalar as S
from ..scalar import a
from .rules import ew_rule, quiet, sum_tangents

_HOST = dict(lower=None, dtypes=(), cost=None)
_NOTE = "differentiable; a NumPy host kernel in compiled code (not fused: the math library has no routine for it)"


def _rounding(fn):
    """fn on floats; integers are already whole (a copy, keeping the dtype, as PyTorch)."""
    return lambda x: x.copy() if x.dtype.kind in "biu" else fn(x)


for _name, _fn in (("ceil", np.ceil), ("trunc", np.trunc)):
    prim(_name, "elementwise", ew_rule(_name), _rounding(_fn), vjp=(lambda n, g: g * 0.0,),
         jvp=lambda n, ts: ts[0] * 0.0, save=(), lower=getattr(S, _name)(a), dtypes=FLOAT, cost="cheap")


def _unary(name, impl, vjp, alias=None):
    prim(name, "elementwise", ew_rule(name, float_only=True), quiet(impl), vjp=(vjp,),
         jvp=lambda n, ts: vjp(n, ts[0]), save=(0,), **_HOST,
         surface=Surface(name, f"torch.{name}", _NOTE, aliases=(alias,) if alias else ()))


def _one_minus_square_root(x):
    return (1.0 - x * x).sqrt()


_unary("asin", np.arcsin, lambda n, g: g / _one_minus_square_root(n.x(0)), "arcsin")
_unary("acos", np.arccos, lambda n, g: -(g / _one_minus_square_root(n.x(0))), "arccos")
_unary("atan", np.arctan, lambda n, g: g / (1.0 + n.x(0) * n.x(0)), "arctan")
_unary("sinh", np.sinh, lambda n, g: g * bind("cosh", n.x(0)))
_unary("cosh", np.cosh, lambda n, g: g * bind("sinh", n.x(0)))


def _atan2_parts(n):
    """d atan2(y, x) / dy = x / (x^2 + y^2), / dx = -y / (x^2 + y^2)."""
    y, x = n.x(0), n.x(1)
    r = x * x + y * y
    return x / r, -y / r


prim("atan2", "elementwise", ew_rule("atan2", float_only=True), quiet(np.arctan2),
     vjp=(lambda n, g: unbroadcast(g * _atan2_parts(n)[0], n.shapes[0]),
          lambda n, g: unbroadcast(g * _atan2_parts(n)[1], n.shapes[1])),
     jvp=lambda n, ts: sum_tangents([None if t is None else t * d for t, d in zip(ts, _atan2_parts(n))]),
     save=(0, 1), **_HOST,
     surface=Surface("atan2", "torch.atan2", _NOTE, params=("input", "other"), aliases=("arctan2",)))
