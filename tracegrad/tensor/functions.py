"""Operations over several tensors: matmul (and mm, bmm, mv, dot), where, cat, stack."""
from .. import dtypes as D
from .. import ops
from ..symint import hints
from .base import TensorBase, _ArgError
from .dispatch import _P, _axis_kw, check_fits, _named, _operands, _promote, dispatch


_C_NAMES = {"bool": "bool", "uint8": "unsigned char", "int8": "signed char", "int16": "short int", "int32": "int",
            "int64": "long int", "float16": "c10::Half", "float32": "float", "float64": "double"}  # PyTorch's words


def matmul(a, b):
    """NumPy's matmul semantics: 1-D operands are promoted and the added axis removed."""
    if not isinstance(a, TensorBase) or not isinstance(b, TensorBase):
        raise TypeError(f"matmul expects tensors, got {type(a).__name__} and {type(b).__name__}")
    if a.ndim == 0 or b.ndim == 0:
        raise RuntimeError(f"both arguments to matmul need to be at least 1D, but they are {a.ndim}D and {b.ndim}D")
    if a._dtype is not b._dtype:            # PyTorch does not promote the operands of a product
        raise RuntimeError(f"expected m1 and m2 to have the same dtype, but got: {_C_NAMES[a._dtype.name]} != "
                           f"{_C_NAMES[b._dtype.name]}")
    a2 = a.unsqueeze(0) if a.ndim == 1 else a
    b2 = b.unsqueeze(-1) if b.ndim == 1 else b
    out = dispatch(_P["matmul"], (a2, b2), {})
    if a.ndim == 1:
        out = out.squeeze(-2)
    if b.ndim == 1:
        out = out.squeeze(-1)
    name = {(2, 2): "MmBackward", (2, 1): "MvBackward", (1, 1): "DotBackward", (1, 2): "SqueezeBackward",
            (3, 3): "BmmBackward"}.get((a.ndim, b.ndim), "UnsafeViewBackward")
    return _named(out, name)


def _need_dims(name, pairs):
    for what, t, nd in pairs:
        if not isinstance(t, TensorBase):
            raise TypeError(f"{name}(): {what} must be a tensor, got {type(t).__name__}")
        if t.ndim != nd:
            raise RuntimeError(f"{name}(): {what} must be a {nd}-D tensor, got a {t.ndim}-D tensor of shape "
                               f"{t.shape}")


def mm(input, mat2):
    """Matrix product of two 2-D tensors (no broadcasting; matmul broadcasts)."""
    _need_dims("mm", [("self", input, 2), ("mat2", mat2, 2)])
    return matmul(input, mat2)


def bmm(input, mat2):
    """Batched matrix product of (b, n, m) and (b, m, p) tensors with equal batch sizes."""
    _need_dims("bmm", [("batch1", input, 3), ("batch2", mat2, 3)])
    if input.shape[0] != mat2.shape[0]:
        raise RuntimeError(f"bmm(): batch1 and batch2 must have the same batch size, got {input.shape} and "
                           f"{mat2.shape}")
    return matmul(input, mat2)


def mv(input, vec):
    _need_dims("mv", [("self", input, 2), ("vec", vec, 1)])
    return matmul(input, vec)


def dot(input, other):
    _need_dims("dot", [("self", input, 1), ("tensor", other, 1)])
    if input.shape != other.shape:
        raise RuntimeError(f"inconsistent tensor size, expected tensor {list(input.shape)} and src "
                           f"{list(other.shape)} to have the same number of elements, but got {input.shape[0]} "
                           f"and {other.shape[0]} elements respectively")
    return matmul(input, other)


def div_rounded(a, b, rounding_mode):
    """a / b rounded "floor" (down) or "trunc" (towards zero), as torch.div(rounding_mode=...).
    Integers divide exactly (never through a float) and a zero divisor raises as `//` does."""
    if rounding_mode != "floor" and rounding_mode != "trunc":     # modes, not the primitives of those names
        raise ValueError(f"div expected rounding_mode to be one of None, 'trunc', or 'floor' but found "
                         f"{rounding_mode!r}")
    a, b = _promote(a, b)
    if rounding_mode == "trunc" and a._dtype.is_floating_point:
        q = a / b
        return where(q < 0, -(-q).floor(), q.floor())
    q = a // b
    if rounding_mode == "floor":
        return q
    inexact = (q * b != a) & ((a < 0) != (b < 0))       # floor went one below the truncated quotient
    return q + inexact.to(q._dtype)


def where(cond, a, b):
    if not isinstance(cond, TensorBase):
        raise TypeError(f"where: the condition must be a bool tensor, got {type(cond).__name__}")
    if cond._dtype is not D.bool_:
        cond = cond != 0
    for v, t in ((a, b), (b, a)):
        if isinstance(t, TensorBase):
            check_fits(v, t._dtype)
    a, b = _promote(a, b, device=cond._device)
    return dispatch(_P["where"], (cond, a, b), {})


def _tensor_list(tensors, name, empty_message):
    """The tensors of cat/stack as a list: non-empty, every item a tensor."""
    if isinstance(tensors, TensorBase):         # cat(x, x): the list was forgotten
        raise TypeError(f"{name}(): argument 'tensors' (position 1) must be tuple of Tensors, not Tensor")
    tensors = list(tensors)
    if not tensors:
        raise _ArgError(empty_message)
    if not all(isinstance(t, TensorBase) for t in tensors):
        raise TypeError(f"{name} expects a sequence of tensors, got "
                        f"{', '.join(sorted({type(t).__name__ for t in tensors}))}")
    return tensors


def cat(tensors, axis=None, *, dim=None):
    tensors = _tensor_list(tensors, "cat", "cat(): expected a non-empty list of Tensors")
    axis = _axis_kw(axis, dim)
    axis = 0 if axis is None else axis
    ref = tensors[0]
    if ref.ndim == 0:
        raise RuntimeError("zero-dimensional tensor cannot be concatenated")
    axis = ops._norm_axis(axis, ref.ndim)
    if ref.ndim != 1:   # PyTorch skips empty 1-D tensors (the legacy "no data" tensor) beside others
        tensors = [t for t in tensors if t._shape != (0,)] or tensors[:1]
    tensors = _operands(*tensors)
    return dispatch(_P["cat"], tuple(tensors), {"axis": axis})


def stack(tensors, axis=None, *, dim=None):
    tensors = _tensor_list(tensors, "stack", "stack expects a non-empty TensorList")
    if any(t.shape != tensors[0].shape for t in tensors[1:]):    # guards on symbolic sizes (no hash: no pin)
        shapes = sorted({hints(t.shape) for t in tensors})
        raise RuntimeError(f"stack expects each tensor to be equal size, but got shapes {shapes}")
    axis = _axis_kw(axis, dim)
    axis = ops._norm_axis(0 if axis is None else axis, tensors[0].ndim + 1)
    return _named(cat([t.unsqueeze(axis) for t in tensors], axis), "StackBackward")

