"""Selecting by index tensors: embedding, gather, take_along_dim (and `_along`, the shared gather along
one axis that sort and pooling use)."""
from .. import dtypes as D
from ..broadcast import broadcast_shapes
from ..ops import normalize_axes
from ..tensor.base import TensorBase
from ..tensor.dispatch import _named
from ..tensor.factories import arange
from ..tensor.functions import where
from ..tensor.indexing import _getitem


def embedding(input, weight, padding_idx=None):
    """Rows of `weight` picked by the int tensor `input` (a gather; the gradient scatter-adds into
    the picked rows). The row `padding_idx` gets no gradient."""
    if not isinstance(input, TensorBase) or input.dtype not in (D.int64, D.int32):
        raise TypeError(f"embedding: indices must be an int64 (or int32) tensor, got "
                        f"{getattr(input, 'dtype', type(input).__name__)}")
    if weight.ndim != 2:
        raise ValueError(f"embedding: weight must be 2-D (num_embeddings, embedding_dim), got {weight.shape}")
    out = _getitem(weight, input, wrap=False)      # a negative index raises, as PyTorch's
    if padding_idx is not None:
        pad = (input == padding_idx % weight.shape[0]).unsqueeze(-1)
        out = where(pad, out.detach(), out)
    return _named(out, "EmbeddingBackward")


def _take_along(x, idx, axis):
    """x[..., idx[...], ...] along `axis` (take_along_axis), through integer-tensor indexing."""
    index = []
    for d in range(x.ndim):
        if d == axis:
            index.append(idx)
        else:
            shape = [1] * idx.ndim
            k = d if d < axis else d - 1
            shape[k] = x.shape[d]
            index.append(arange(x.shape[d], device=x.device).reshape(shape))
    return x[tuple(index)]


def _index_tensor(name, index):
    if not isinstance(index, TensorBase) or index.dtype not in (D.int64, D.int32):
        raise TypeError(f"{name}(): index must be an int64 (or int32) tensor, got "
                        f"{getattr(index, 'dtype', type(index).__name__)}")


def gather(input, dim, index):
    """torch.gather: out[i][j][k] = input[i][index[i][j][k]][k] for dim=1 (out has index's shape;
    index has input's number of axes and, off `dim`, sizes no larger than input's). Fused in compiled
    code: only the picked elements are read, and the gradient scatter-adds into them."""
    _index_tensor("gather", index)
    dim = normalize_axes(dim, input.ndim)[0] if input.ndim else 0
    if index.ndim != max(input.ndim, 1) or any(
            index.shape[d] > input.shape[d] for d in range(input.ndim) if d != dim):
        raise RuntimeError(f"gather(): index {tuple(index.shape)} must have as many axes as input "
                           f"{tuple(input.shape)} and no larger sizes than it except along dim {dim}")
    if not input.ndim:
        return _along(input.reshape(1), index, 0, wrap=False)
    part = input[tuple(slice(0, index.shape[d]) if d != dim else slice(None) for d in range(input.ndim))]
    return _along(part, index, dim, wrap=False)


def take_along_dim(input, indices, dim=None):
    """torch.take_along_dim: input's entries picked along `dim` by `indices` (broadcast with input on
    the other axes; dim None: both flattened). Fused in compiled code, as gather."""
    _index_tensor("take_along_dim", indices)
    if dim is None:
        return _along(input.reshape(-1), indices.reshape(-1), 0)
    dim = normalize_axes(dim, input.ndim)[0]
    if indices.ndim != input.ndim:
        raise RuntimeError(f"take_along_dim(): input {tuple(input.shape)} and indices {tuple(indices.shape)} "
                           f"should have the same number of dimensions")
    rest = broadcast_shapes(*[tuple(1 if d == dim else s for d, s in enumerate(t.shape)) for t in (input, indices)])
    x = input.expand(*[input.shape[d] if d == dim else rest[d] for d in range(input.ndim)])
    i = indices.expand(*[indices.shape[d] if d == dim else rest[d] for d in range(input.ndim)])
    return _along(x, i, dim)


def _along(x, idx, axis, wrap=True):
    """x[..., idx, ...] along `axis` for idx of x's shape but along `axis` (aranges on the other axes);
    a negative idx counts from the end unless `wrap` is False (gather: it raises)."""
    index = [idx if d == axis else arange(x.shape[d], device=x.device).reshape(
        tuple(x.shape[d] if e == d else 1 for e in range(x.ndim))) for d in range(x.ndim)]
    return _named(_getitem(x, tuple(index), wrap), "GatherBackward")
