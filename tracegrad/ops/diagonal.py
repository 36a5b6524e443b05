"""diagonal: the view of the elements x[..., i, i + k] of two axes (dim1, dim2), moved to the end,
as PyTorch's (writes through it reach x). Its gradient places the cotangent on that diagonal of
zeros: an unslice of the two axes flattened, with step size2 + 1 (fused like a slice's gradient)."""
import numpy as np

from ..core import bind, prim


def _length(shape, k, dim1, dim2):
    return max(min(shape[dim1], shape[dim2] - k) if k >= 0 else min(shape[dim1] + k, shape[dim2]), 0)


def _rule(shapes, dtypes, k, dim1, dim2):
    (shape,) = shapes
    if dim1 == dim2 or not (0 <= dim1 < len(shape) and 0 <= dim2 < len(shape)):
        raise RuntimeError(f"diagonal dimensions cannot be identical {dim1}, {dim2} (shape {shape})"
                           if dim1 == dim2 else f"diagonal: dims {dim1}, {dim2} out of range for shape {shape}")
    rest = tuple(s for i, s in enumerate(shape) if i not in (dim1, dim2))
    return rest + (_length(shape, k, dim1, dim2),), dtypes[0]


def _impl(x, k, dim1, dim2):
    """A writable view of x (NumPy's diagonal is read-only)."""
    d = np.diagonal(x, k, dim1, dim2)
    index = [slice(None)] * x.ndim
    if k:
        index[dim2 if k > 0 else dim1] = slice(abs(k), None)
    start = x[tuple(index)]
    if 0 in d.shape:
        return d.copy()
    return np.lib.stride_tricks.as_strided(start, d.shape, d.strides, writeable=x.flags.writeable)


def _remap(in_shape, out_shape, strides, offset, k, dim1, dim2):
    kept = [s for i, s in enumerate(strides) if i not in (dim1, dim2)]
    shift = k * strides[dim2] if k >= 0 else -k * strides[dim1]
    return kept + [strides[dim1] + strides[dim2]], offset + shift


def _vjp(n, g):
    """Zeros of the input's shape with g on the diagonal: the two axes moved last and flattened, g
    unsliced onto every (size2 + 1)-th place from the diagonal's start, moved back."""
    shape, (k, d1, d2) = n.shapes[0], (n.attrs["k"], n.attrs["dim1"], n.attrs["dim2"])
    rest = [i for i in range(len(shape)) if i not in (d1, d2)]
    s1, s2 = shape[d1], shape[d2]
    length = g.shape[-1]
    start = k if k >= 0 else -k * s2
    stop = start + (length - 1) * (s2 + 1) + 1 if length else start
    index = tuple((0, shape[i], 1) for i in rest) + ((start, stop, s2 + 1),)
    flat = bind("unslice", g, shape=tuple(shape[i] for i in rest) + (s1 * s2,), index=index)
    moved = flat.reshape(tuple(shape[i] for i in rest) + (s1, s2))
    perm = rest + [d1, d2]
    return moved.permute(*np.argsort(perm).tolist())


prim("diagonal", "view", _rule, _impl, vjp=(_vjp,), jvp=lambda n, ts: bind("diagonal", ts[0], **n.attrs),
     save=(), remap=_remap, lower=None, dtypes=(), cost=None)
