"""Elementwise primitives: math, arithmetic, comparisons, logic, where, cast, copy."""
import math

import numpy as np

from .. import dtypes as D
from ..broadcast import elementwise_shape, unbroadcast
from ..core import ALL, FLOAT, NUMERIC, Surface, bind, prim
from .. import scalar as S
from ..scalar import a, b, c
from .rules import ew_rule, quiet, same_dtype, sum_tangents

CHEAP, TRANSCENDENTAL = "cheap", "transcendental"


def _unary(name, impl, vjp, *, lower, cost, save=(0,), save_out=False, float_only=True, dtypes=FLOAT, zero=None,
           surface=None):
    """An elementwise unary primitive; its JVP is its (linear in g) VJP applied to the tangent."""
    return prim(name, "elementwise", ew_rule(name, float_only=float_only), quiet(impl), vjp=(vjp,),
                jvp=lambda n, ts: vjp(n, ts[0]), save=save, save_out=save_out,
                lower=lower, dtypes=dtypes, cost=cost, zero=zero, surface=surface)


def _math(name):
    """The surface of a float function of the math library: tg.<name>, x.<name>(), x.<name>_()."""
    how = "one instruction" if name == "sqrt" else "the math library's vectorized routine"
    return Surface(name, f"torch.{name}", f"integers become the default float dtype; fused in compiled code ({how})")


# NumPy has no negative, sign or subtract of bools: those run on the host, which raises as eager does
_unary("neg", np.negative, lambda n, g: -g, save=(), float_only=False, lower=-a, cost=CHEAP, dtypes=NUMERIC,
       zero="first")
_unary("exp", np.exp, lambda n, g: g * n.out, save=(), save_out=True, lower=S.exp(a), cost=TRANSCENDENTAL,
       surface=_math("exp"))
_unary("log", np.log, lambda n, g: g / n.x(0), lower=S.log(a), cost=TRANSCENDENTAL, surface=_math("log"))
_unary("sqrt", np.sqrt, lambda n, g: g / (n.out * 2.0), save=(), save_out=True, lower=S.sqrt(a), cost=CHEAP,
       surface=_math("sqrt"))
_unary("tanh", np.tanh, lambda n, g: g * (1.0 - n.out * n.out), save=(), save_out=True,
       lower=S.tanh(a), cost=TRANSCENDENTAL, surface=_math("tanh"))


def _sigmoid(x):
    """1/(1+e^-x), in place in one buffer; where e^-x overflows (x < -88 in float32) the result
    is recomputed as e^x/(1+e^x), so tiny values are kept."""
    s = np.empty_like(x)
    np.negative(x, out=s)
    np.exp(s, out=s)
    np.add(s, 1, out=s)
    np.reciprocal(s, out=s)
    if not s.all():
        tail = s == 0
        e = np.exp(x[tail])
        s[tail] = e / (1 + e)
    return s


_unary("sigmoid", _sigmoid, lambda n, g: g * (n.out * (1.0 - n.out)), save=(), save_out=True,
       lower=S.sigmoid(a), cost=TRANSCENDENTAL, surface=_math("sigmoid"))
_unary("relu", lambda x: np.maximum(x, 0).astype(x.dtype, copy=False),
       lambda n, g: bind("where", n.out > 0, g, 0.0), save=(), save_out=True, float_only=False,
       lower=S.maximum(a, 0), cost=CHEAP, dtypes=ALL)
_unary("sin", np.sin, lambda n, g: g * n.x(0).cos(), lower=S.sin(a), cost=TRANSCENDENTAL, surface=_math("sin"))
_unary("cos", np.cos, lambda n, g: -(g * n.x(0).sin()), lower=S.cos(a), cost=TRANSCENDENTAL,
       surface=_math("cos"))
_unary("abs", np.abs, lambda n, g: g * n.x(0).sign(), float_only=False, lower=S.abs(a), cost=CHEAP, dtypes=ALL)
def _sign(x):
    """(x > 0) - (x < 0), as PyTorch's sign: +0 for -0 and 0 for NaN (np.sign gives -0 and NaN)."""
    if x.dtype.kind != "f":
        return np.sign(x)
    out = (x > 0).astype(x.dtype)
    out -= x < 0
    return out


# piecewise constant: zero gradient, as PyTorch
_unary("sign", _sign, lambda n, g: g * 0.0, save=(), float_only=False, lower=S.sign(a), cost=CHEAP,
       dtypes=NUMERIC)


def _erf_impl(x):
    """erf through numba's vectorized libm erf (exact to the last bit of the C library).
    numba has no float16 arithmetic: half inputs are computed in float32 and rounded back."""
    if x.dtype == np.float16:
        return _erf_ufunc()(x.astype(np.float32)).astype(np.float16)
    return _erf_ufunc()(x)


_ERF = []


def _erf_ufunc():
    if not _ERF:
        import numba

        @numba.vectorize(["float32(float32)", "float64(float64)"], cache=True)
        def erf(v):
            return math.erf(v)
        _ERF.append(erf)
    return _ERF[0]


_unary("erf", _erf_impl, lambda n, g: g * ((n.x(0) * n.x(0) * -1.0).exp() * (2.0 / math.sqrt(math.pi))),
       lower=S.erf(a), cost=TRANSCENDENTAL)


def _binary(name, impl, vjp=None, jvp=None, *, lower, cost=CHEAP, dtypes=ALL, save=(0, 1), save_out=False,
            out_dtype=None, zero=None):
    return prim(name, "elementwise", ew_rule(name, out_dtype), quiet(impl), vjp=vjp, jvp=jvp,
                save=save if vjp else (), save_out=save_out, lower=lower, dtypes=dtypes, cost=cost, zero=zero)


def _lin_jvp(n, ts):
    """JVP of add/sub from their sign pattern, broadcast to the output shape."""
    a, b = ts
    if n.prim_name == "sub" and b is not None:
        b = -b
    out = sum_tangents([a, b])
    return out if out.shape == n.out_shape else out.expand(*n.out_shape)


_binary("add", np.add, (lambda n, g: unbroadcast(g, n.shapes[0]), lambda n, g: unbroadcast(g, n.shapes[1])),
        jvp=_lin_jvp, save=(), lower=a + b, zero="all")
_binary("sub", np.subtract, (lambda n, g: unbroadcast(g, n.shapes[0]), lambda n, g: unbroadcast(-g, n.shapes[1])),
        jvp=_lin_jvp, save=(), lower=a - b, dtypes=NUMERIC, zero="all")
_binary("mul", np.multiply,
        (lambda n, g: unbroadcast(g * n.x(1), n.shapes[0]), lambda n, g: unbroadcast(g * n.x(0), n.shapes[1])),
        jvp=lambda n, ts: sum_tangents([None if ts[0] is None else ts[0] * n.x(1),
                                        None if ts[1] is None else n.x(0) * ts[1]]),
        save={0: (1,), 1: (0,)}, lower=a * b, zero="any")


def _div_impl(a, b):
    if a.dtype.kind in "iub":
        if not np.all(b):       # NumPy would give 0 with a warning; PyTorch raises
            raise RuntimeError("ZeroDivisionError")
        return np.floor_divide(a, b)
    return np.true_divide(a, b)


def _floordiv_impl(a, b):
    return _div_impl(a, b) if a.dtype.kind in "iub" else np.floor_divide(a, b)   # exact, as PyTorch's


def _remainder_impl(a, b):
    if a.dtype.kind in "iub" and not np.all(b):
        raise RuntimeError("ZeroDivisionError")
    return np.remainder(a, b)          # the divisor's sign, as Python and PyTorch


# integer division and pow are not lowered (they raise on zero divisors / negative powers)
_binary("div", _div_impl,
        (lambda n, g: unbroadcast(g / n.x(1), n.shapes[0]),
         lambda n, g: unbroadcast(-(g * n.x(0)) / (n.x(1) * n.x(1)), n.shapes[1])),
        jvp=lambda n, ts: sum_tangents([None if ts[0] is None else ts[0] / n.x(1),
                                        None if ts[1] is None else -(n.x(0) * ts[1]) / (n.x(1) * n.x(1))]),
        save={0: (1,), 1: (0, 1)}, lower=a / b, dtypes=FLOAT, zero="first")
# floordiv is piecewise constant: no gradient, as PyTorch's floor_divide
prim("floordiv", "elementwise", ew_rule("floordiv"), quiet(_floordiv_impl), vjp=None, jvp=None, save=(),
     lower=None, dtypes=(), cost=None)
prim("remainder", "elementwise", ew_rule("remainder"), quiet(_remainder_impl),
     vjp=(lambda n, g: unbroadcast(g, n.shapes[0]),
          lambda n, g: unbroadcast(-(g * bind("floordiv", n.x(0), n.x(1))), n.shapes[1])),
     jvp=lambda n, ts: sum_tangents([ts[0], None if ts[1] is None else -(ts[1] * bind("floordiv", n.x(0), n.x(1)))]),
     save={1: (0, 1)}, lower=None, dtypes=(), cost=None)
prim("floor", "elementwise", ew_rule("floor"), np.floor, vjp=(lambda n, g: g * 0.0,),
     jvp=lambda n, ts: ts[0] * 0.0, save=(), lower=S.floor(a), dtypes=FLOAT, cost=CHEAP)
# half to even, as PyTorch's round; piecewise constant: zero gradient
prim("round", "elementwise", ew_rule("round"), np.round, vjp=(lambda n, g: g * 0.0,),
     jvp=lambda n, ts: ts[0] * 0.0, save=(), lower=None, dtypes=(), cost=None)


def _pow_impl(a, b):
    """np.power, but floats to a scalar power 2 or 3 are multiplied out (as PyTorch; np.power is slow)."""
    if a.dtype.kind in "iu" and (b < 0).any():
        raise RuntimeError("Integers to negative integer powers are not allowed.")
    if b.ndim == 0 and a.dtype.kind == "f":
        e = b.item()
        if e == 2:
            return np.square(a)
        if e == 3:
            s = np.square(a)
            s *= a
            return s
    return np.power(a, b)


def _pow_grad_exp(n):
    """d(a**b)/db = a**b * log(a), taken as 0 where a == 0 (as PyTorch does)."""
    a = n.x(0)
    return bind("where", a == 0, 0.0, n.out * a.log())


def _pow_grad_base(n):
    """d(a**b)/da = b * a**(b-1), taken as 0 where b == 0 (so 0**0 gives 0, not nan, as PyTorch does)."""
    b = n.x(1)
    return bind("where", b == 0, 0.0, b * n.x(0) ** (b - 1.0))


_binary("pow", _pow_impl,
        (lambda n, g: unbroadcast(g * _pow_grad_base(n), n.shapes[0]),
         lambda n, g: unbroadcast(g * _pow_grad_exp(n), n.shapes[1])),
        jvp=lambda n, ts: sum_tangents([None if ts[0] is None else ts[0] * _pow_grad_base(n),
                                        None if ts[1] is None else ts[1] * _pow_grad_exp(n)]),
        save_out=True, lower=S.pow(a, b), cost=TRANSCENDENTAL, dtypes=FLOAT)


def _xlogy_impl(x, y):
    """x * log(y), 0 where x is 0, NaN where y is (as torch.xlogy)."""
    out = x * np.log(y)
    return np.where(np.isnan(y), y, np.where(x == 0, out.dtype.type(0), out))


def _xlogy_dx(n, t):
    """t * log(y), 0 where x is 0 and y <= 0 (PyTorch's rule: xlogy(t, y) masked)."""
    x, y = n.x(0), n.x(1)
    return bind("where", (x == 0) & (y <= 0), 0.0, bind("xlogy", t, y))


prim("xlogy", "elementwise", ew_rule("xlogy", float_only=True), quiet(_xlogy_impl),
     vjp=(lambda n, g: unbroadcast(_xlogy_dx(n, g), n.shapes[0]),
          lambda n, g: unbroadcast(g * n.x(0) / n.x(1), n.shapes[1])),
     jvp=lambda n, ts: sum_tangents([None if ts[0] is None else _xlogy_dx(n, ts[0]),
                                     None if ts[1] is None else ts[1] * n.x(0) / n.x(1)]),
     save=(0, 1), lower=S.where(S.ne(b, b), b, S.where(S.eq(a, 0), 0, a * S.log(b))), dtypes=FLOAT,
     cost=TRANSCENDENTAL,
     surface=Surface("xlogy", "torch.xlogy", "differentiable (PyTorch's gradients: 0 in `input` where "
                     "`input` is 0 and `other` <= 0); integers become the default float dtype; fused in compiled "
                     "code", params=("input", "other")))


def _minmax_vjp(pick):
    """Gradient to the chosen operand; ties split evenly, as PyTorch does."""
    def rule(i):
        def vjp(n, g):
            a, b = n.x(0), n.x(1)
            wins = pick(a, b) if i == 0 else pick(b, a)
            return unbroadcast(bind("where", a == b, g * 0.5, bind("where", wins, g, 0.0)), n.shapes[i])
        return vjp
    return rule(0), rule(1)


def _minmax_jvp(pick):
    def jvp(n, ts):
        a, b = n.x(0), n.x(1)
        ta = ts[0] if ts[0] is not None else a * 0.0
        tb = ts[1] if ts[1] is not None else b * 0.0
        # ties take the mean of both tangents, the transpose of the VJP's even split (as PyTorch)
        return bind("where", a == b, (ta + tb) * 0.5, bind("where", pick(a, b), ta, tb)) + n.out * 0.0
    return jvp


_binary("maximum", np.maximum, _minmax_vjp(lambda a, b: a > b), jvp=_minmax_jvp(lambda a, b: a >= b),
        lower=S.maximum(a, b))
_binary("minimum", np.minimum, _minmax_vjp(lambda a, b: a < b), jvp=_minmax_jvp(lambda a, b: a <= b),
        lower=S.minimum(a, b))
_binary("lt", np.less, lower=a < b, out_dtype=D.bool_)
_binary("le", np.less_equal, lower=a <= b, out_dtype=D.bool_)
_binary("gt", np.greater, lower=a > b, out_dtype=D.bool_)
_binary("ge", np.greater_equal, lower=a >= b, out_dtype=D.bool_)
_binary("eq", np.equal, lower=S.eq(a, b), out_dtype=D.bool_)
_binary("ne", np.not_equal, lower=S.ne(a, b), out_dtype=D.bool_)
_binary("logical_and", np.logical_and, lower=a & b, out_dtype=D.bool_)
_binary("logical_or", np.logical_or, lower=a | b, out_dtype=D.bool_)
prim("logical_not", "elementwise", ew_rule("logical_not", D.bool_), np.logical_not, vjp=None, jvp=None, save=(),
     lower=S.eq(a, 0), dtypes=ALL, cost=CHEAP)


def _where_rule(shapes, dtypes):
    if dtypes[0] is not D.bool_:
        raise TypeError(f"where: the condition must be a bool tensor, got {dtypes[0]}")
    return elementwise_shape(shapes), same_dtype("where", dtypes[1:])


prim("where", "elementwise", _where_rule, np.where,
     vjp=(None, lambda n, g: unbroadcast(bind("where", n.x(0), g, 0.0), n.shapes[1]),
          lambda n, g: unbroadcast(bind("where", n.x(0), 0.0, g), n.shapes[2])),
     jvp=lambda n, ts: bind("where", n.x(0), ts[1] if ts[1] is not None else 0.0,
                            ts[2] if ts[2] is not None else 0.0),
     save=(0,), lower=S.where(a, b, c), dtypes=ALL, cost=CHEAP, zero="branches")


def _cast_vjp(n, g):
    return g.to(n.dtypes[0]) if n.dtypes[0].is_floating_point else None


prim("cast", "elementwise", lambda shapes, dtypes, dtype: (shapes[0], dtype),
     quiet(lambda x, dtype: x.astype(dtype.np)),   # overflow to inf (float32 to float16) is quiet, as PyTorch
     vjp=(_cast_vjp,), jvp=lambda n, ts: ts[0].to(n.attrs["dtype"]), save=(),
     lower=S.cast(a), dtypes=ALL, cost=CHEAP, zero="first")
prim("copy", "elementwise", lambda shapes, dtypes: (shapes[0], dtypes[0]), lambda x: np.array(x, order="C"),
     vjp=(lambda n, g: g,), jvp=lambda n, ts: ts[0], save=(), lower=a, dtypes=ALL, cost=CHEAP, zero="first")
