"""The primitive table: every primitive declared once.

Each `Prim` carries what the rest of tracegrad needs to know about it:

- `kind`: "elementwise" | "reduction" | "movement" | "extern" | "index" | "creation" (fusion uses it)
- `rule(shapes, dtypes, **attrs) -> (shape, dtype)`: the type rule (eager dispatch and shape inference)
- `impl(*arrays, **attrs)`: the NumPy implementation (eager tensors and the `interpret` backend)
- `vjp`: reverse mode, one rule per input `(n, g) -> gradient` (None: not differentiable in that
  input), or for variadic primitives one rule returning a tuple. Written with tensor methods so it
  runs on eager tensors, builds differentiable graphs (create_graph) and emits the backward IR under
  the tracer. `n` is the autograd node: `n.x(i)` saved input, `n.out`, `n.shapes`, `n.dtypes`, `n.attrs`.
- `jvp(n, ts)`: forward mode from the input tangents `ts` (None = zero tangent).
- `save`: which inputs the VJP reads (their version counters are checked), `save_out` likewise; or a
  dict {input i: inputs read by i's VJP rule}, so only what a needed rule reads is saved; or, for
  variadic primitives, a function of the number of inputs returning one of those.
- `lower`: the scalar lowering used by the code generators (filled in by codegen).

Nothing here imports from above: VJP rules call `bind(name, ...)` for primitives that have no
tensor method, and the tensor module installs the dispatcher behind `bind`.
"""
import math

import numpy as np

from . import dtypes as D
from .broadcast import broadcast_shapes, elementwise_shape, unbroadcast

PRIMS = {}
RNG = [np.random.default_rng()]   # the generator behind tg.manual_seed, rand/randn and dropout
_dispatch = None  # installed by tensor.py: _dispatch(prim, inputs, attrs) -> Tensor


def bind(name, *inputs, **attrs):
    """Apply primitive `name` to tensors (eager, traced or forward-mode alike)."""
    return _dispatch(PRIMS[name], inputs, attrs)


class Prim:
    __slots__ = ("name", "kind", "rule", "impl", "vjp", "jvp", "save", "save_out", "differentiable",
                 "lower", "backward_name")

    def __init__(self, name, kind, rule, impl, vjp=None, jvp=None, save=(), save_out=False, lower=None):
        self.name, self.kind, self.rule, self.impl = name, kind, rule, impl
        self.vjp, self.jvp, self.save, self.save_out, self.lower = vjp, jvp, save, save_out, lower
        self.differentiable = vjp is not None
        self.backward_name = "".join(p.capitalize() for p in name.split("_")) + "Backward"

    def __repr__(self):
        return f"<prim {self.name}>"


def prim(name, kind, rule, impl, **kw):
    PRIMS[name] = p = Prim(name, kind, rule, impl, **kw)
    return p


# ---------------------------------------------------------------- type rules

def _same_dtype(name, dtypes):
    if dtypes.count(dtypes[0]) != len(dtypes):
        raise TypeError(f"{name}: operands have dtypes {', '.join(map(str, dtypes))}; "
                        f"they must match (the front end promotes; cast with .to(dtype))")
    return dtypes[0]


def _ew_rule(name, out_dtype=None, float_only=False):
    def rule(shapes, dtypes):
        d = _same_dtype(name, dtypes)
        if float_only and not d.is_floating_point:
            raise TypeError(f"{name} needs a floating-point tensor, got {d}")
        return elementwise_shape(shapes), out_dtype or d
    return rule


def _norm_axis(axis, ndim):
    if not isinstance(axis, (int, np.integer)) or isinstance(axis, (bool, np.bool_)):
        raise TypeError(f"a dimension must be an int, not {type(axis).__name__} ({axis!r})")
    if not -max(ndim, 1) <= axis < max(ndim, 1):
        raise IndexError(f"Dimension out of range (expected to be in range of "
                         f"[{-max(ndim, 1)}, {max(ndim, 1) - 1}], but got {axis})")
    return axis % max(ndim, 1)


class _RepeatedAxis(ValueError, RuntimeError):
    """RuntimeError as PyTorch raises, ValueError as NumPy does."""


def normalize_axes(axis, ndim):
    """None | int | sequence -> a sorted tuple of non-negative axes; IndexError when out of range."""
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, (int, np.integer)) and not isinstance(axis, bool):
        axis = (int(axis),)
    try:
        axes = tuple(_norm_axis(a, ndim) for a in axis)
    except TypeError:
        raise TypeError(f"axis must be None, an int or a tuple of ints, not {axis!r}") from None
    if len(set(axes)) != len(axes):
        raise _RepeatedAxis(f"dim {axis} repeats a dimension: dim {next(a for a in axes if axes.count(a) > 1)} appears multiple times in the "
                            f"list of dims")
    return tuple(sorted(a for a in axes if a < ndim or ndim == 0))[:ndim] if ndim else ()


def _reduce_shape(shape, axis, keepdims):
    if keepdims:
        return tuple(1 if i in axis else s for i, s in enumerate(shape))
    return tuple(s for i, s in enumerate(shape) if i not in axis)


def _reduce_rule(name, need_nonempty=False):
    def rule(shapes, dtypes, axis, keepdims):
        (shape,) = shapes
        if need_nonempty and any(shape[a] == 0 for a in axis) :
            raise RuntimeError(f"{name}(): cannot reduce over a zero-size dimension of shape {shape}")
        return _reduce_shape(shape, axis, keepdims), dtypes[0]
    return rule


def _g_keep(g, n):
    """Reshape a reduction's cotangent so it broadcasts against the input."""
    shape, axis = n.shapes[0], n.attrs["axis"]
    return g if n.attrs["keepdims"] else g.reshape(_reduce_shape(shape, axis, True))


# ---------------------------------------------------------------- elementwise

def _quiet(f):
    """NumPy's float warnings (log(-1), 1/0) off: results are nan/inf, as in PyTorch."""
    return np.errstate(all="ignore")(f)   # the decorator form: cheaper per call than a `with` block


def _unary(name, impl, vjp, save=(0,), save_out=False, float_only=True):
    """An elementwise unary primitive; its JVP is its (linear in g) VJP applied to the tangent."""
    return prim(name, "elementwise", _ew_rule(name, float_only=float_only), _quiet(impl), vjp=(vjp,),
                jvp=lambda n, ts: vjp(n, ts[0]), save=save, save_out=save_out)


_unary("neg", np.negative, lambda n, g: -g, save=(), float_only=False)
_unary("exp", np.exp, lambda n, g: g * n.out, save=(), save_out=True)
_unary("log", np.log, lambda n, g: g / n.x(0))
_unary("sqrt", np.sqrt, lambda n, g: g / (n.out * 2.0), save=(), save_out=True)
_unary("tanh", np.tanh, lambda n, g: g * (1.0 - n.out * n.out), save=(), save_out=True)


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


_unary("sigmoid", _sigmoid, lambda n, g: g * (n.out * (1.0 - n.out)), save=(), save_out=True)
_unary("relu", lambda x: np.maximum(x, 0).astype(x.dtype, copy=False),
       lambda n, g: bind("where", n.out > 0, g, 0.0), save=(), save_out=True, float_only=False)
_unary("sin", np.sin, lambda n, g: g * n.x(0).cos())
_unary("cos", np.cos, lambda n, g: -(g * n.x(0).sin()))
_unary("abs", np.abs, lambda n, g: g * n.x(0).sign(), float_only=False)
prim("sign", "elementwise", _ew_rule("sign"), np.sign,  # piecewise constant: zero gradient, as PyTorch
     vjp=(lambda n, g: g * 0.0,), jvp=lambda n, ts: ts[0] * 0.0, save=())


def _binary(name, impl, vjp=None, jvp=None, save=(0, 1), save_out=False, out_dtype=None, float_only=False):
    return prim(name, "elementwise", _ew_rule(name, out_dtype, float_only), _quiet(impl), vjp=vjp, jvp=jvp,
                save=save, save_out=save_out)


def _sum_tangents(parts):
    parts = [p for p in parts if p is not None]
    out = parts[0]
    for p in parts[1:]:
        out = out + p
    return out


def _lin_jvp(n, ts):
    """JVP of add/sub from their sign pattern, broadcast to the output shape."""
    a, b = ts
    if n.prim_name == "sub" and b is not None:
        b = -b
    out = _sum_tangents([a, b])
    return out if out.shape == n.out_shape else out.expand(*n.out_shape)


_binary("add", np.add, (lambda n, g: unbroadcast(g, n.shapes[0]), lambda n, g: unbroadcast(g, n.shapes[1])),
        jvp=_lin_jvp, save=())
_binary("sub", np.subtract, (lambda n, g: unbroadcast(g, n.shapes[0]), lambda n, g: unbroadcast(-g, n.shapes[1])),
        jvp=_lin_jvp, save=())
_binary("mul", np.multiply,
        (lambda n, g: unbroadcast(g * n.x(1), n.shapes[0]), lambda n, g: unbroadcast(g * n.x(0), n.shapes[1])),
        jvp=lambda n, ts: _sum_tangents([None if ts[0] is None else ts[0] * n.x(1),
                                         None if ts[1] is None else n.x(0) * ts[1]]),
        save={0: (1,), 1: (0,)})


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


_binary("floordiv", _floordiv_impl)    # piecewise constant: no gradient, as PyTorch's floor_divide
_binary("remainder", _remainder_impl,
        (lambda n, g: unbroadcast(g, n.shapes[0]),
         lambda n, g: unbroadcast(-(g * bind("floordiv", n.x(0), n.x(1))), n.shapes[1])),
        save={1: (0, 1)})
prim("floor", "elementwise", _ew_rule("floor"), np.floor, vjp=(lambda n, g: g * 0.0,),
     jvp=lambda n, ts: ts[0] * 0.0, save=())


_binary("div", _div_impl,
        (lambda n, g: unbroadcast(g / n.x(1), n.shapes[0]),
         lambda n, g: unbroadcast(-(g * n.x(0)) / (n.x(1) * n.x(1)), n.shapes[1])),
        jvp=lambda n, ts: _sum_tangents([None if ts[0] is None else ts[0] / n.x(1),
                                         None if ts[1] is None else -(n.x(0) * ts[1]) / (n.x(1) * n.x(1))]),
        save={0: (1,), 1: (0, 1)})


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
        jvp=lambda n, ts: _sum_tangents([None if ts[0] is None else ts[0] * _pow_grad_base(n),
                                         None if ts[1] is None else ts[1] * _pow_grad_exp(n)]),
        save_out=True)


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


_binary("maximum", np.maximum, _minmax_vjp(lambda a, b: a > b), jvp=_minmax_jvp(lambda a, b: a >= b))
_binary("minimum", np.minimum, _minmax_vjp(lambda a, b: a < b), jvp=_minmax_jvp(lambda a, b: a <= b))
for _name, _f in (("lt", np.less), ("le", np.less_equal), ("gt", np.greater), ("ge", np.greater_equal),
                  ("eq", np.equal), ("ne", np.not_equal)):
    _binary(_name, _f, out_dtype=D.bool_)
_binary("logical_and", np.logical_and, out_dtype=D.bool_)
_binary("logical_or", np.logical_or, out_dtype=D.bool_)
prim("logical_not", "elementwise", _ew_rule("logical_not", D.bool_), np.logical_not)


def _where_rule(shapes, dtypes):
    if dtypes[0] is not D.bool_:
        raise TypeError(f"where: the condition must be a bool tensor, got {dtypes[0]}")
    return elementwise_shape(shapes), _same_dtype("where", dtypes[1:])


prim("where", "elementwise", _where_rule, np.where,
     vjp=(None, lambda n, g: unbroadcast(bind("where", n.x(0), g, 0.0), n.shapes[1]),
          lambda n, g: unbroadcast(bind("where", n.x(0), 0.0, g), n.shapes[2])),
     jvp=lambda n, ts: bind("where", n.x(0), ts[1] if ts[1] is not None else 0.0,
                            ts[2] if ts[2] is not None else 0.0),
     save=(0,))


def _cast_rule(shapes, dtypes, dtype):
    return shapes[0], dtype


def _cast_vjp(n, g):
    return g.to(n.dtypes[0]) if n.dtypes[0].is_floating_point else None


prim("cast", "elementwise", _cast_rule, lambda x, dtype: x.astype(dtype.np),
     vjp=(_cast_vjp,), jvp=lambda n, ts: ts[0].to(n.attrs["dtype"]), save=())


# ---------------------------------------------------------------- reductions

def _sum_impl(x, axis, keepdims):
    return np.add.reduce(x, axis=axis, keepdims=keepdims, dtype=x.dtype if x.dtype != np.bool_ else np.int64)


def _sum_rule(shapes, dtypes, axis, keepdims):
    d = dtypes[0]
    return _reduce_shape(shapes[0], axis, keepdims), D.int64 if d is D.bool_ else d


prim("sum", "reduction", _sum_rule, _sum_impl,
     vjp=(lambda n, g: _g_keep(g, n).expand(*n.shapes[0]),),
     jvp=lambda n, ts: ts[0].sum(axis=n.attrs["axis"], keepdims=n.attrs["keepdims"]))


def _minmax_reduce_vjp(n, g):
    """The gradient goes to the extreme elements, split evenly among ties (as PyTorch's amax)."""
    x = n.x(0)
    out = n.out if n.attrs["keepdims"] else n.out.reshape(_reduce_shape(n.shapes[0], n.attrs["axis"], True))
    mask = (x == out).to(x.dtype)
    count = mask.sum(axis=n.attrs["axis"], keepdims=True)
    return mask * (_g_keep(g, n) / count)


def _minmax_reduce_jvp(n, ts):
    x = n.x(0)
    out = n.out if n.attrs["keepdims"] else n.out.reshape(_reduce_shape(n.shapes[0], n.attrs["axis"], True))
    mask = (x == out).to(x.dtype)
    count = mask.sum(axis=n.attrs["axis"], keepdims=n.attrs["keepdims"])
    return (mask * ts[0]).sum(axis=n.attrs["axis"], keepdims=n.attrs["keepdims"]) / count


prim("max", "reduction", _reduce_rule("max", True),
     lambda x, axis, keepdims: np.maximum.reduce(x, axis, keepdims=keepdims),
     vjp=(_minmax_reduce_vjp,), jvp=_minmax_reduce_jvp, save=(0,), save_out=True)
prim("min", "reduction", _reduce_rule("min", True),
     lambda x, axis, keepdims: np.minimum.reduce(x, axis, keepdims=keepdims),
     vjp=(_minmax_reduce_vjp,), jvp=_minmax_reduce_jvp, save=(0,), save_out=True)


def _prod_vjp(n, g):
    """d prod / dx_i = product of the others; computed without dividing so zeros are exact."""
    x, axis = n.x(0), n.attrs["axis"]
    return bind("prod_others", x, axis=axis) * _g_keep(g, n)


def _prod_others_impl(x, axis):
    """For each element, the product of the other elements along `axis` (exclusive products)."""
    moved = np.moveaxis(x, axis, tuple(range(x.ndim - len(axis), x.ndim)))
    flat = moved.reshape(moved.shape[:x.ndim - len(axis)] + (-1,))
    ones = np.ones(flat.shape[:-1] + (1,), x.dtype)
    left = np.cumprod(np.concatenate([ones, flat[..., :-1]], -1), -1)
    right = np.cumprod(np.concatenate([ones, flat[..., :0:-1]], -1), -1)[..., ::-1]
    return np.moveaxis((left * right).reshape(moved.shape), tuple(range(x.ndim - len(axis), x.ndim)), axis)


def _prod_others_grad(n, g):
    """Gradient of the exclusive product (second derivatives of prod): for x_j != 0 it is
    (sum_i g_i*others_i - g_j*others_j) / x_j. At x_j == 0 this formula does not apply and the
    result there is 0 — a known limitation, exact everywhere else."""
    x, axis = n.x(0), n.attrs["axis"]
    weighted = g * bind("prod_others", x, axis=axis)
    safe = bind("where", x == 0, 1.0, x)
    return bind("where", x == 0, 0.0, (weighted.sum(axis=axis, keepdims=True) - weighted) / safe)


prim("prod", "reduction", _reduce_rule("prod"), lambda x, axis, keepdims: np.prod(x, axis, keepdims=keepdims),
     vjp=(_prod_vjp,), jvp=lambda n, ts: (bind("prod_others", n.x(0), axis=n.attrs["axis"]) * ts[0]).sum(
         axis=n.attrs["axis"], keepdims=n.attrs["keepdims"]), save=(0,))
prim("prod_others", "reduction", lambda shapes, dtypes, axis: (shapes[0], dtypes[0]), _prod_others_impl,
     vjp=(_prod_others_grad,), save=(0,))


def _arg_rule(shapes, dtypes, axis, keepdims):
    shape = shapes[0]
    if axis is None:
        if 0 in shape:
            raise RuntimeError(f"argmax/argmin of an empty tensor of shape {shape}")
        return ((1,) * len(shape) if keepdims else ()), D.int64
    if shape and shape[axis] == 0:
        raise RuntimeError(f"argmax/argmin over a zero-size dimension of shape {shape}")
    return _reduce_shape(shape, (axis,), keepdims), D.int64


def _arg_impl(f):
    def impl(x, axis, keepdims):
        if axis is None:
            r = np.asarray(f(x.reshape(-1)), np.int64)
            return r.reshape((1,) * x.ndim) if keepdims else r
        return np.asarray(f(x, axis=axis, keepdims=keepdims), np.int64)
    return impl


prim("argmax", "reduction", _arg_rule, _arg_impl(np.argmax))
prim("argmin", "reduction", _arg_rule, _arg_impl(np.argmin))


# ---------------------------------------------------------------- movement (views)

def _reshape_rule(shapes, dtypes, shape):
    if math.prod(shapes[0]) != math.prod(shape):
        raise RuntimeError(f"shape '{list(shape)}' is invalid for input of size {math.prod(shapes[0])}")
    return tuple(shape), dtypes[0]


prim("reshape", "movement", _reshape_rule, lambda x, shape: x.reshape(shape),
     vjp=(lambda n, g: g.reshape(n.shapes[0]),), jvp=lambda n, ts: ts[0].reshape(n.attrs["shape"]))


def _permute_rule(shapes, dtypes, perm):
    if sorted(perm) != list(range(len(shapes[0]))):
        raise RuntimeError(f"permute: dims {perm} are not a permutation of the {len(shapes[0])} "
                           f"dimensions of shape {shapes[0]}")
    return tuple(shapes[0][p] for p in perm), dtypes[0]


prim("permute", "movement", _permute_rule, lambda x, perm: x.transpose(perm),
     vjp=(lambda n, g: g.permute(*np.argsort(n.attrs["perm"]).tolist()),),
     jvp=lambda n, ts: ts[0].permute(*n.attrs["perm"]))


def _expand_rule(shapes, dtypes, shape):
    src = shapes[0]
    if len(shape) < len(src):
        raise RuntimeError(f"expand: the target shape {shape} has fewer dimensions than the tensor's {src}")
    off = len(shape) - len(src)
    for i, s in enumerate(src):
        if s != 1 and s != shape[off + i]:
            raise RuntimeError(f"The expanded size of the tensor ({shape[off + i]}) must match the existing size "
                               f"({s}) at non-singleton dimension {off + i}.  Target sizes: {list(shape)}.  "
                               f"Tensor sizes: {list(src)}")
    return tuple(shape), dtypes[0]


prim("expand", "movement", _expand_rule, lambda x, shape: np.broadcast_to(x, shape),
     vjp=(lambda n, g: unbroadcast(g, n.shapes[0]),), jvp=lambda n, ts: ts[0].expand(*n.attrs["shape"]))


def _slice_rule(shapes, dtypes, index):
    out = []
    for size, (start, stop, step) in zip(shapes[0], index):
        out.append(len(range(start, stop, step)))
    return tuple(out) + tuple(shapes[0][len(index):]), dtypes[0]


def _slices(index):
    return tuple(slice(a, b, c) for a, b, c in index)


prim("slice", "movement", _slice_rule, lambda x, index: x[_slices(index)],
     vjp=(lambda n, g: bind("unslice", g, shape=n.shapes[0], index=n.attrs["index"]),),
     jvp=lambda n, ts: bind("slice", ts[0], index=n.attrs["index"]))


def _unslice_impl(g, shape, index):
    out = np.zeros(shape, g.dtype)
    out[_slices(index)] = g
    return out


prim("unslice", "movement", lambda shapes, dtypes, shape, index: (tuple(shape), dtypes[0]), _unslice_impl,
     vjp=(lambda n, g: bind("slice", g, index=n.attrs["index"]),),
     jvp=lambda n, ts: bind("unslice", ts[0], **n.attrs))


def _cat_rule(shapes, dtypes, axis):
    ref = shapes[0]
    for s in shapes[1:]:
        if len(s) != len(ref) or any(a != b for i, (a, b) in enumerate(zip(s, ref)) if i != axis):
            raise RuntimeError(f"cat: tensors must have the same shape except in dimension {axis}; "
                               f"got {ref} and {s}")
    return ref[:axis] + (sum(s[axis] for s in shapes),) + ref[axis + 1:], _same_dtype("cat", dtypes)


def _cat_vjp(n, g):
    axis, out, start = n.attrs["axis"], [], 0
    for shape in n.shapes:
        index = tuple((start, start + s, 1) if i == axis else (0, s, 1) for i, s in enumerate(shape))
        out.append(bind("slice", g, index=index))
        start += shape[axis]
    return tuple(out)


prim("cat", "movement", _cat_rule, lambda *xs, axis: np.concatenate(xs, axis),
     vjp=_cat_vjp, jvp=lambda n, ts: bind("cat", *[t if t is not None else bind("zeros_like", n.x(i))
                                                   for i, t in enumerate(ts)], axis=n.attrs["axis"]),
     save=())


# ---------------------------------------------------------------- integer-tensor indexing

def _index_rule(shapes, dtypes, axes):
    x, idx = shapes[0], shapes[1:]
    for d in dtypes[1:]:
        if d not in (D.int32, D.int64):
            raise IndexError(f"tensors used as indices must be int32 or int64 tensors, got {d}")
    bshape = broadcast_shapes(*idx)
    rest = [s for i, s in enumerate(x) if i not in axes]
    adjacent = list(axes) == list(range(axes[0], axes[0] + len(axes)))
    if adjacent:
        before = [s for i, s in enumerate(x) if i < axes[0]]
        after = [s for i, s in enumerate(x) if i > axes[-1]]
        return tuple(before) + tuple(bshape) + tuple(after), dtypes[0]
    return tuple(bshape) + tuple(rest), dtypes[0]


def _index_tuple(ndim, axes, idx):
    t = [slice(None)] * ndim
    for a, i in zip(axes, idx):
        t[a] = i
    return tuple(t)


def _index_impl(x, *idx, axes):
    try:
        return x[_index_tuple(x.ndim, axes, idx)]
    except IndexError as e:          # NumPy checks the bounds; say it in PyTorch's words
        raise IndexError(str(e).replace("for axis", "for dimension")) from None


def _index_add_impl(g, *idx, shape, axes):
    """Scatter-add g into zeros of `shape`; repeated indices accumulate."""
    if len(axes) == len(shape) and g.size:     # every axis indexed: one bincount over flat positions
        idx = [np.where(i < 0, i + n, i) for i, n in zip(np.broadcast_arrays(*idx), shape)]
        flat = np.ravel_multi_index(idx, shape).ravel()
        return np.bincount(flat, weights=g.ravel(), minlength=math.prod(shape)).astype(g.dtype).reshape(shape)
    out = np.zeros(shape, g.dtype)
    np.add.at(out, _index_tuple(len(shape), axes, idx), g)
    return out


def _indices_only(n_inputs):
    """index/index_add backward needs the index tensors, not the data (so, as in PyTorch, writing
    into the indexed tensor afterwards does not invalidate the gradient)."""
    return range(1, n_inputs)


prim("index", "index", _index_rule, _index_impl,
     vjp=lambda n, g: (bind("index_add", g, *[n.x(i) for i in range(1, len(n.shapes))],
                            shape=n.shapes[0], axes=n.attrs["axes"]),) + (None,) * (len(n.shapes) - 1),
     jvp=lambda n, ts: bind("index", ts[0], *[n.x(i) for i in range(1, len(n.shapes))], axes=n.attrs["axes"]),
     save=_indices_only)
prim("index_add", "index", lambda shapes, dtypes, shape, axes: (tuple(shape), dtypes[0]), _index_add_impl,
     vjp=lambda n, g: (bind("index", g, *[n.x(i) for i in range(1, len(n.shapes))], axes=n.attrs["axes"]),)
     + (None,) * (len(n.shapes) - 1),
     jvp=lambda n, ts: bind("index_add", ts[0], *[n.x(i) for i in range(1, len(n.shapes))], **n.attrs),
     save=_indices_only)


# ---------------------------------------------------------------- matmul (extern: BLAS)

def _matmul_rule(shapes, dtypes):
    a, b = shapes
    d = _same_dtype("matmul", dtypes)
    if len(a) < 2 or len(b) < 2:
        raise RuntimeError(f"matmul primitive needs 2-D or batched operands, got {a} and {b}")
    if a[-1] != b[-2]:
        raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({a[-2]}x{a[-1]} and {b[-2]}x{b[-1]}): "
                           f"operand shapes {a} and {b}")
    return broadcast_shapes(a[:-2], b[:-2]) + (a[-2], b[-1]), d   # batch dims: never a BroadcastWarning


prim("matmul", "extern", _matmul_rule, np.matmul,
     vjp=(lambda n, g: unbroadcast(g @ n.x(1).mT, n.shapes[0]), lambda n, g: unbroadcast(n.x(0).mT @ g, n.shapes[1])),
     jvp=lambda n, ts: _sum_tangents([None if ts[0] is None else ts[0] @ n.x(1),
                                      None if ts[1] is None else n.x(0) @ ts[1]]),
     save={0: (1,), 1: (0,)})


# ---------------------------------------------------------------- creation

prim("zeros_like", "creation", lambda shapes, dtypes: (shapes[0], dtypes[0]), np.zeros_like)
prim("copy", "elementwise", lambda shapes, dtypes: (shapes[0], dtypes[0]), lambda x: np.array(x, order="C"),
     vjp=(lambda n, g: g,), jvp=lambda n, ts: ts[0], save=())


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


def _erf_vjp(n, g):
    x = n.x(0)
    return g * ((x * x * -1.0).exp() * (2.0 / math.sqrt(math.pi)))


prim("erf", "elementwise", _ew_rule("erf", float_only=True), _erf_impl, vjp=(_erf_vjp,),
     jvp=lambda n, ts: _erf_vjp(n, ts[0]), save=(0,))


# ---------------------------------------------------------------- random (never merged or folded)

def _random_rule(shapes, dtypes, shape, dtype):
    if not dtype.is_floating_point:
        raise TypeError(f"random tensors need a floating-point dtype, got {dtype}")
    return tuple(shape), dtype


prim("rand", "random", _random_rule, lambda shape, dtype: RNG[0].random(shape, dtype=np.float64).astype(dtype.np))
prim("randn", "random", _random_rule,
     lambda shape, dtype: RNG[0].standard_normal(shape, dtype=np.float64).astype(dtype.np))


# ---------------------------------------------------------------- scalar lowering (fusing code generators)
# One element in, one out, as a target-neutral expression over the inputs a, b, c. The vocabulary
# (exp log sqrt tanh sigmoid sin cos erf pow maximum minimum abs sign where cast, + - * / unary -,
# comparisons, & | ~) is what every code generator implements; `cast` converts to the output dtype.
# Division and pow of integers are not lowered (they run through NumPy).
_LOWER = {
    "neg": "-a", "exp": "exp(a)", "log": "log(a)", "sqrt": "sqrt(a)", "tanh": "tanh(a)",
    "sigmoid": "sigmoid(a)", "relu": "maximum(a, 0)", "sin": "sin(a)", "cos": "cos(a)", "abs": "abs(a)",
    "sign": "sign(a)", "erf": "erf(a)", "add": "a + b", "sub": "a - b", "mul": "a * b", "div": "a / b",
    "pow": "pow(a, b)", "maximum": "maximum(a, b)", "minimum": "minimum(a, b)", "lt": "a < b", "le": "a <= b",
    "gt": "a > b", "ge": "a >= b", "eq": "a == b", "ne": "a != b", "logical_and": "a & b", "logical_or": "a | b",
    "logical_not": "~a", "where": "where(a, b, c)", "cast": "cast(a)", "copy": "a",
}
FLOAT_ONLY_LOWERING = {"div", "pow", "exp", "log", "sqrt", "tanh", "sigmoid", "sin", "cos", "erf"}
for _name, _expr in _LOWER.items():
    PRIMS[_name].lower = _expr
