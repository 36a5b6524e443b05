"""Type rules and axis helpers the primitives share."""
import numpy as np

from ..broadcast import elementwise_shape


def same_dtype(name, dtypes):
    if dtypes.count(dtypes[0]) != len(dtypes):
        raise TypeError(f"{name}: operands have dtypes {', '.join(map(str, dtypes))}; "
                        f"they must match (the front end promotes; cast with .to(dtype))")
    return dtypes[0]


def ew_rule(name, out_dtype=None, float_only=False):
    """The type rule of an elementwise primitive: broadcast shapes, equal dtypes."""
    def rule(shapes, dtypes):
        d = same_dtype(name, dtypes)
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


def reduce_rule(name, need_nonempty=False):
    def rule(shapes, dtypes, axis, keepdims):
        (shape,) = shapes
        if need_nonempty and any(shape[a] == 0 for a in axis) :
            raise RuntimeError(f"{name}(): cannot reduce over a zero-size dimension of shape {shape}")
        return _reduce_shape(shape, axis, keepdims), dtypes[0]
    return rule


def g_keep(g, n):
    """Reshape a reduction's cotangent so it broadcasts against the input."""
    shape, axis = n.shapes[0], n.attrs["axis"]
    return g if n.attrs["keepdims"] else g.reshape(_reduce_shape(shape, axis, True))


def sum_tangents(parts):
    parts = [p for p in parts if p is not None]
    out = parts[0]
    for p in parts[1:]:
        out = out + p
    return out


def quiet(f):
    """NumPy's float warnings (log(-1), 1/0) off: results are nan/inf, as in PyTorch."""
    return np.errstate(all="ignore")(f)   # the decorator form: cheaper per call than a `with` block

