"""Products and diagonals: cross (the vector product along an axis of size 3), diagonal (the view
primitive), trace and frac, as PyTorch's; composites, so differentiable and compiled."""
import warnings

from ..broadcast import broadcast_shapes
from ..ops import _norm_axis, bind
from ..tensor.dispatch import _named


def cross(a, b, dim=None):
    """a x b along `dim` (both broadcast); dim None: the first axis of size 3, as torch.cross
    (with its deprecation warning; torch.linalg.cross takes dim=-1)."""
    shape = broadcast_shapes(tuple(a.shape), tuple(b.shape))
    if dim is None:
        warnings.warn("Using torch.cross without specifying the dim arg is deprecated. Please either pass the dim "
                      "explicitly or simply use torch.linalg.cross. The default value of dim will change to agree "
                      "with that of linalg.cross in a future release.", UserWarning, stacklevel=3)
        dim = next((d for d, s in enumerate(shape) if s == 3), None)
        if dim is None:
            raise RuntimeError(f"no dimension of size 3 in input (shapes {tuple(a.shape)} and {tuple(b.shape)})")
    d = _norm_axis(dim, len(shape))
    if shape[d] != 3:
        raise RuntimeError(f"linalg.cross: inputs dimension {d} must have length 3. Got {a.shape[d - len(shape)] if a.ndim else 1} "
                           f"and {b.shape[d - len(shape)] if b.ndim else 1} (shapes {tuple(a.shape)} and {tuple(b.shape)})")
    a, b = a.expand(*shape), b.expand(*shape)
    # (a x b)_i = a_{i+1} b_{i+2} - a_{i+2} b_{i+1}: rolled copies line those components up
    out = a.roll(-1, d) * b.roll(-2, d) - a.roll(-2, d) * b.roll(-1, d)
    return _named(out, "LinalgCrossBackward")


def diagonal(x, offset=0, dim1=0, dim2=1):
    """The view of x[..., i, i + offset] over axes dim1, dim2 (appended as the last axis)."""
    d1, d2 = _norm_axis(dim1, x.ndim), _norm_axis(dim2, x.ndim)
    if d1 == d2:
        raise RuntimeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    return bind("diagonal", x, k=int(offset), dim1=d1, dim2=d2)


def trace(x):
    """The sum of a matrix's diagonal (integers sum in int64, as PyTorch)."""
    if x.ndim != 2:
        raise RuntimeError(f"trace: expected a matrix, but got tensor with dim {x.ndim}")
    return _named(diagonal(x).sum(), "TraceBackward")


def frac(x):
    """x - trunc(x): the fractional part, with x's sign; gradient 1."""
    return _named(x - bind("trunc", x), "FracBackward")
