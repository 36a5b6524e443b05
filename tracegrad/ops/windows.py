"""Sliding windows: the view under convolution and pooling (im2col without a copy), and its transpose.

`windows(x, axes, size, step, dilation)`: each axis `a` of `axes` becomes the number of windows
along it, `(x.shape[a] - dilation*(size-1) - 1) // step + 1`, and one axis per window axis is appended
holding the window's elements (PyTorch's `Tensor.unfold(dim, size, step)` over several axes at once,
with a dilation). A view: its strides are the input's, scaled (`remap`), so fusion reads the windows
of a padded input in place and a reshape of them is the im2col copy.
`unwindows(g, shape, axes, size, step, dilation)`: the transpose, a scatter-add of every window back
to its place in zeros of `shape` (col2im; overlapping windows accumulate; kind "index" as index_add:
a scatter, run as a host kernel). Each is the other's VJP,
so a convolution's input gradient and `conv_transpose` fall out of these two."""
import numpy as np

from ..core import bind, prim

_NOT_LOWERED = dict(lower=None, dtypes=(), cost=None)


def window_counts(shape, axes, size, step, dilation):
    """The number of windows along each axis of `axes`; RuntimeError naming the shapes when a window
    is larger than its axis or the parameters do not fit."""
    if not (len(axes) == len(size) == len(step) == len(dilation)) or list(axes) != sorted(set(axes)) \
            or any(a < 0 or a >= len(shape) for a in axes):
        raise RuntimeError(f"windows: axes {axes} (distinct, ascending, in range of shape {shape}) need one "
                         f"size, step and dilation each; got size {size}, step {step}, dilation {dilation}")
    if min((*size, *step, *dilation), default=1) < 1:
        raise RuntimeError(f"windows: size {size}, step {step} and dilation {dilation} must be positive")
    counts = []
    for a, k, s, d in zip(axes, size, step, dilation):
        span = d * (k - 1) + 1
        if span > shape[a]:
            raise RuntimeError(f"windows: a window spanning {span} elements (size {k}, dilation {d}) is larger "
                             f"than dimension {a} of size {shape[a]} (input shape {tuple(shape)})")
        counts.append((shape[a] - span) // s + 1)
    return counts


def _windows_rule(shapes, dtypes, axes, size, step, dilation):
    shape = list(shapes[0])
    for a, c in zip(axes, window_counts(shape, axes, size, step, dilation)):
        shape[a] = c
    return tuple(shape) + tuple(size), dtypes[0]


def _windows_remap(in_shape, out_shape, strides, offset, axes, size, step, dilation):
    out = list(strides)
    for a, s in zip(axes, step):
        out[a] = strides[a] * s
    return out + [strides[a] * d for a, d in zip(axes, dilation)], offset


def _windows_impl(x, axes, size, step, dilation):
    """A NumPy view; read-only where windows may share elements (an in-place write would repeat)."""
    shape = _windows_rule([x.shape], [None], axes, size, step, dilation)[0]
    strides = _windows_remap(x.shape, shape, list(x.strides), 0, axes, size, step, dilation)[0]
    overlap = any(c > 1 and s < d * (k - 1) + 1 for c, s, d, k in zip((shape[a] for a in axes), step, dilation, size))
    return np.lib.stride_tricks.as_strided(x, shape, strides, writeable=not overlap)


def _unwindows_impl(g, shape, axes, size, step, dilation):
    out = np.zeros(shape, g.dtype)
    counts = [g.shape[a] for a in axes]
    for offs in np.ndindex(*size):
        place = [slice(None)] * len(shape)
        for a, o, c, s, d in zip(axes, offs, counts, step, dilation):
            place[a] = slice(o * d, o * d + (c - 1) * s + 1, s)
        out[tuple(place)] += g[(Ellipsis,) + offs]
    return out


def _unwindows_rule(shapes, dtypes, shape, axes, size, step, dilation):
    want = _windows_rule([shape], dtypes, axes, size, step, dilation)[0]
    if tuple(shapes[0]) != want:
        raise RuntimeError(f"unwindows: windows of shape {tuple(shapes[0])} do not fit shape {tuple(shape)} "
                         f"(expected {want})")
    return tuple(shape), dtypes[0]


def _attrs(n):
    return {k: n.attrs[k] for k in ("axes", "size", "step", "dilation")}


prim("windows", "view", _windows_rule, _windows_impl,
     vjp=(lambda n, g: bind("unwindows", g, shape=n.shapes[0], **n.attrs),),
     jvp=lambda n, ts: bind("windows", ts[0], **n.attrs), save=(), remap=_windows_remap, **_NOT_LOWERED)
prim("unwindows", "index", _unwindows_rule, _unwindows_impl,
     vjp=(lambda n, g: bind("windows", g, **_attrs(n)),),
     jvp=lambda n, ts: bind("unwindows", ts[0], **n.attrs), save=(), zero="first", **_NOT_LOWERED)
