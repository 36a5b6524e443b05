"""Pieces and rearrangements: split, chunk, unbind, narrow (views); flip, roll, repeat, repeat_interleave,
index_select, tril, triu, masked_fill."""
from .. import dtypes as D
from ..broadcast import broadcast_shapes
from ..ops import _norm_axis, normalize_axes
from ..symint import as_size, hint, is_size
from ..tensor.base import _ArgError, TensorBase
from ..tensor.dispatch import _named
from ..tensor.factories import arange
from ..tensor.functions import cat, where
from ..tensor.indexing import _getitem


def split(x, split_size_or_sections, dim=0):
    """Views of consecutive pieces along `dim`: pieces of one size (the last may be smaller), or of
    the listed sizes, which must add up to the dimension's size."""
    if x.ndim == 0:
        raise RuntimeError("split expects at least a 1-dimensional tensor")
    a = _norm_axis(dim, x.ndim)
    n = x._shape[a]
    if isinstance(split_size_or_sections, (list, tuple)):
        sizes = [as_size(s) for s in split_size_or_sections]
        if sum(sizes) != n or any(s < 0 for s in sizes):
            raise RuntimeError(f"split_with_sizes expects split_sizes to sum exactly to {n} (input tensor's size "
                               f"at dimension {a}), but got split_sizes={sizes}")
    else:
        size = as_size(split_size_or_sections)
        if size < 0 or size == 0 and n:
            raise RuntimeError(f"split expects split_size be positive (0 only for a dimension of size 0), but "
                               f"got split_size={size} for dimension {a} of size {n}")
        sizes = _pieces(n, size) if n else [0]
    label = "SplitWithSizesBackward" if isinstance(split_size_or_sections, (list, tuple)) else "SplitBackward"
    out, start = [], 0
    for s in sizes:
        out.append(_named(x[(slice(None),) * a + (slice(start, start + s),)], label, x))
        start += s
    return tuple(out)


def chunk(x, chunks, dim=0):
    """`chunks` views along `dim` of ceil(n / chunks) elements each (fewer pieces when n is small)."""
    if chunks <= 0:
        raise RuntimeError(f"chunk expects `chunks` to be greater than 0, got: {chunks}")
    if x.ndim == 0:
        raise RuntimeError("chunk expects at least a 1-dimensional tensor")
    n = x._shape[_norm_axis(dim, x.ndim)]
    if n == 0:
        return split(x, [0] * chunks, dim)
    return split(x, (n + chunks - 1) // chunks, dim)


def _pieces(n, size):
    """The sizes of split(n, size) for n > 0: size each, the last the rest. Where n or size is symbolic
    the count is decided by guards ((m-1)*size < n <= m*size), the sizes stay expressions: chunk(B, 2)
    gives [(B+1)//2, B-(B+1)//2] for any B >= 2, and [B//2, B//2] after a test B % 2 == 0."""
    m = -(-hint(n) // hint(size))
    counted = n > (m - 1) * size and n <= m * size      # true at the hints; records the count's guards
    assert counted
    return [size] * (m - 1) + [n - (m - 1) * size]


def flip(x, dims):
    """The elements in reverse order along each of `dims` (a gather, as PyTorch copies)."""
    dims = normalize_axes(dims, x.ndim)
    out = x
    for d in dims:
        n = x._shape[d]
        out = out[(slice(None),) * d + (arange(n - 1, -1, -1, device=x.device),)] if n > 1 else out
    return _named(out.clone() if out is x else out, "FlipBackward")


def roll(x, shifts, dims=None):
    """Elements shifted by `shifts` along `dims`, wrapping around; no dims: over the flattened tensor."""
    if dims is None:
        return _named(roll(x.reshape(-1), shifts, 0).reshape(x.shape), "RollBackward")
    shifts = (shifts,) if is_size(shifts) else tuple(shifts)
    dims = (dims,) if is_size(dims) else tuple(dims)
    if len(shifts) != len(dims):
        raise RuntimeError(f"shifts and dimensions must align. shifts: {len(shifts)}, dims:{len(dims)}")
    out = x
    for s, d in zip(shifts, dims):
        d = _norm_axis(d, x.ndim)
        n = x._shape[d]
        if n == 0 or s % n == 0:
            continue
        s %= n
        head = (slice(None),) * d
        out = cat([out[head + (slice(n - s, n),)], out[head + (slice(0, n - s),)]], d)
    return _named(out.clone() if out is x else out, "RollBackward")


def repeat(x, sizes):
    """x tiled sizes[i] times along each axis (extra leading sizes add axes), as Tensor.repeat."""
    sizes = tuple(as_size(s) for s in sizes)
    if len(sizes) < x.ndim:
        raise RuntimeError("Number of dimensions of repeat dims can not be smaller than number of dimensions "
                           "of tensor")
    shape = (1,) * (len(sizes) - x.ndim) + tuple(x.shape)
    spread = x.reshape(tuple(a for n in shape for a in (1, n)))
    tiled = spread.expand(*(a for s, n in zip(sizes, shape) for a in (s, n)))
    return _named(tiled.reshape(tuple(s * n for s, n in zip(sizes, shape))), "RepeatBackward")


def index_select(x, dim, index):
    """The slices of x along `dim` at the positions of the 1-D int tensor `index` (a gather)."""
    if not isinstance(index, TensorBase) or index.dtype not in (D.int64, D.int32) or index.ndim > 1:
        raise _ArgError("index_select(): index must be a 1-D int64 or int32 tensor, got "
                        f"{getattr(index, 'dtype', type(index).__name__)} of shape {list(getattr(index, 'shape', ()))}")
    d = _norm_axis(dim, x.ndim)
    return _named(_getitem(x, (slice(None),) * d + (index.reshape(-1),), wrap=False), "IndexSelectBackward")


def _triangle(x, diagonal, upper):
    if x.ndim < 2:
        raise RuntimeError(f"{'triu' if upper else 'tril'}: input tensor must have at least 2 dimensions")
    rows, cols = x.shape[-2:]
    i = arange(rows, device=x.device).reshape(rows, 1)
    j = arange(cols, device=x.device).reshape(1, cols)
    keep = j - i >= diagonal if upper else j - i <= diagonal
    return where(keep, x, False if x.dtype is D.bool_ else 0)     # a bool tensor stays bool, as PyTorch's


def tril(x, diagonal=0):
    return _named(_triangle(x, diagonal, False), "TrilBackward")


def triu(x, diagonal=0):
    return _named(_triangle(x, diagonal, True), "TriuBackward")


def masked_fill(x, mask, value):
    """x with `value` where the bool `mask` (broadcast to x's shape) is True."""
    if not isinstance(mask, TensorBase) or mask.dtype != D.bool_:
        raise _ArgError(f"masked_fill only supports boolean masks, but got mask with dtype "
                        f"{getattr(mask, 'dtype', type(mask).__name__)}")
    if broadcast_shapes(x.shape, mask.shape) != tuple(x.shape):
        raise RuntimeError(f"masked_fill: the mask of shape {list(mask.shape)} must broadcast to the tensor's shape "
                           f"{list(x.shape)}")
    if isinstance(value, TensorBase) and value.ndim:
        raise RuntimeError(f"masked_fill only supports a 0-dimensional value tensor, but got tensor with "
                           f"{value.ndim} dimension(s).")
    fill = value.to(x.dtype) if isinstance(value, TensorBase) else value
    return _named(where(mask, fill, x).to(x.dtype), "MaskedFillBackward")


def unbind(x, dim=0):
    d = _norm_axis(dim, x.ndim)
    return tuple(_named(x[(slice(None),) * d + (i,)], "UnbindBackward", x) for i in range(x.shape[d]))


def narrow(x, dim, start, length):
    d = _norm_axis(dim, x.ndim)
    n = x.shape[d]
    start = start + n if start < 0 else start
    if not 0 <= start <= n or length < 0 or start + length > n:
        raise IndexError(f"narrow(): start ({start}) + length ({length}) exceeds dimension size ({n}).")
    return x[(slice(None),) * d + (slice(start, start + length),)]


def repeat_interleave(x, repeats, dim=None):
    """Each element repeated `repeats` times along `dim` (none: over the flattened tensor)."""
    if isinstance(repeats, TensorBase):
        if repeats.numel() != 1:
            raise NotImplementedError("repeat_interleave with a tensor of per-element repeats is not supported; "
                                      "pass an int (or index with the positions it expands to)")
        repeats = int(repeats.item())
    if repeats < 0:
        raise RuntimeError("repeat_interleave: repeats can not be negative")
    if dim is None:
        x, dim = x.reshape(-1), 0
    d = _norm_axis(dim, x.ndim)
    shape = tuple(x.shape)
    spread = x.reshape(shape[:d + 1] + (1,) + shape[d + 1:]).expand(*shape[:d + 1], repeats, *shape[d + 1:])
    return _named(spread.reshape(shape[:d] + (shape[d] * repeats,) + shape[d + 1:]), "RepeatInterleaveBackward")
