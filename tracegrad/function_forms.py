"""PyTorch's function forms of tensor operations: tg.add(input, other, *, alpha=1, out=None), tg.exp,
tg.sum(input, dim), tg.max(input, dim), ... with PyTorch's parameter names, and `out=` (the result is
written into a given tensor, as PyTorch does; not differentiable, as in PyTorch)."""
import warnings

from .core import PRIMS as _PRIMS
from .modes import is_grad_enabled, no_grad
from .tensor import Tensor, where as _where, zeros
from .tensor.declared import call as _call
from .tensor.functions import bmm as _bmm, div_rounded as _div_rounded, dot as _dot, matmul as _matmul, mm as _mm, mv as _mv


def _write_out(name, result, out):
    """Return `result`, or copy it into `out` (resized when its shape differs) and return `out`."""
    if out is None:
        return result
    if isinstance(result, tuple):
        if not isinstance(out, (tuple, list)) or len(out) != len(result):
            raise TypeError(f"{name}(): out must be a tuple of {len(result)} tensors")
        vals = [_write_out(name, r, o) for r, o in zip(result, out)]
        return type(result)(*vals) if hasattr(result, "_fields") else tuple(vals)
    if not isinstance(out, Tensor):
        raise TypeError(f"{name}(): argument 'out' must be Tensor, not {type(out).__name__}")
    if is_grad_enabled() and (result.requires_grad or out.requires_grad):
        raise RuntimeError(f"{name}(): functions with out=... arguments don't support automatic differentiation, "
                           f"but one of the arguments requires grad.")
    if result.dtype.kind > out.dtype.kind:
        raise RuntimeError(f"result type {result.dtype} can't be cast to the desired output type {out.dtype}")
    if out.shape != result.shape:
        if out.numel():
            warnings.warn(f"An output with one or more elements was resized since it had shape {list(out.shape)}, "
                          f"which does not match the required output shape {list(result.shape)}.", UserWarning,
                          stacklevel=3)
        out.data = zeros(result.shape, dtype=out.dtype, device=out.device)
    with no_grad():
        out.copy_(result)
    return out


def _tensor_arg(name, input):
    if not isinstance(input, Tensor):
        raise TypeError(f"{name}(): argument 'input' must be Tensor, not {type(input).__name__}")
    return input


def _method_form(name):
    def f(input, *args, out=None, **kwargs):
        return _write_out(name, getattr(_tensor_arg(name, input), name)(*args, **kwargs), out)
    f.__name__ = f.__qualname__ = name
    f.__doc__ = f"tg.{name}(input, ...) is input.{name}(...); out= writes the result into a tensor."
    return f


_METHODS = ("rsqrt relu abs sign neg reciprocal square log1p expm1 floor "
            "round isnan isinf isfinite cumsum sum mean prod max min amax amin var std logsumexp argmax argmin norm all any "
            "softmax log_softmax reshape transpose permute squeeze unsqueeze flatten expand broadcast_to t clone "
            "chunk gather take_along_dim flip roll index_select tril triu masked_fill unbind narrow outer lerp addmm "
            "repeat_interleave ceil trunc fix frac "
            "bitwise_and bitwise_or bitwise_xor bitwise_not logical_xor sort argsort msort topk kthvalue nonzero "
            "argwhere unique cross diagonal trace bernoulli multinomial").split()
for _name in _METHODS:
    globals()[_name] = _method_form(_name)
del _name
negative, absolute = neg, abs            # noqa: F821  (defined by the loop above)


def _declared_form(p):
    """tg.<name>(input, ..., out=None) of a primitive that declares its surface (core.Surface)."""
    s = p.surface

    def f(*operands, out=None, **named):
        return _write_out(s.name, _call(p, *operands, **named), out)
    f.__name__ = f.__qualname__ = s.name
    f.__doc__ = f"tg.{s.name}({', '.join(s.params)}, *, out=None): {s.torch}. {s.note}"
    return f


for _p in _PRIMS.values():
    if _p.surface is not None:
        for _name in (_p.surface.name,) + _p.surface.aliases:
            globals()[_name] = _declared_form(_p)
del _p, _name


def _binary(name, op):
    def f(input, other, *, out=None):
        return _write_out(name, op(input, other), out)
    f.__name__ = f.__qualname__ = name
    return f


mul = multiply = _binary("mul", lambda a, b: a * b)
maximum = _binary("maximum", lambda a, b: _tensor_arg("maximum", a).maximum(b))
minimum = _binary("minimum", lambda a, b: _tensor_arg("minimum", a).minimum(b))
eq = _binary("eq", lambda a, b: _tensor_arg("eq", a) == b)
ne = _binary("ne", lambda a, b: _tensor_arg("ne", a) != b)
lt = _binary("lt", lambda a, b: _tensor_arg("lt", a) < b)
le = _binary("le", lambda a, b: _tensor_arg("le", a) <= b)
gt = _binary("gt", lambda a, b: _tensor_arg("gt", a) > b)
ge = _binary("ge", lambda a, b: _tensor_arg("ge", a) >= b)
remainder = _binary("remainder", lambda a, b: a % b)
floor_divide = _binary("floor_divide", lambda a, b: a // b)
logical_and = _binary("logical_and", lambda a, b: _tensor_arg("logical_and", a).bool() & (b != 0))
logical_or = _binary("logical_or", lambda a, b: _tensor_arg("logical_or", a).bool() | (b != 0))


def logical_not(input, *, out=None):
    return _write_out("logical_not", ~_tensor_arg("logical_not", input).bool(), out)


def add(input, other, *, alpha=1, out=None):
    return _write_out("add", input + (other * alpha if alpha != 1 else other), out)


def sub(input, other, *, alpha=1, out=None):
    return _write_out("sub", input - (other * alpha if alpha != 1 else other), out)


subtract = sub


def div(input, other, *, rounding_mode=None, out=None):
    """True division; rounding_mode="floor" rounds the quotient down, "trunc" towards zero."""
    if rounding_mode is None:
        return _write_out("div", input / other, out)
    return _write_out("div", _div_rounded(input, other, rounding_mode), out)


divide, true_divide = div, _binary("true_divide", lambda a, b: a / b)


def pow(input, exponent, *, out=None):    # noqa: A001
    return _write_out("pow", input ** exponent, out)


def matmul(input, other, *, out=None):
    return _write_out("matmul", _matmul(input, other), out)


def mm(input, mat2, *, out=None):
    return _write_out("mm", _mm(input, mat2), out)


def bmm(input, mat2, *, out=None):
    return _write_out("bmm", _bmm(input, mat2), out)


def mv(input, vec, *, out=None):
    return _write_out("mv", _mv(input, vec), out)


def dot(input, tensor, *, out=None):
    return _write_out("dot", _dot(input, tensor), out)


def clamp(input, min=None, max=None, *, out=None):    # noqa: A002
    return _write_out("clamp", _tensor_arg("clamp", input).clamp(min, max), out)


clip = clamp


def where(condition, input, other, *, out=None):
    return _write_out("where", _where(condition, input, other), out)


def einsum(equation, *operands):
    from .composites import einsum as _einsum
    return _einsum(equation, *operands)


def split(tensor, split_size_or_sections, dim=None, *, axis=None):
    return _tensor_arg("split", tensor).split(split_size_or_sections, dim, axis=axis)


def numel(input):
    return _tensor_arg("numel", input).numel()


def is_tensor(obj):
    return isinstance(obj, Tensor)


def is_floating_point(input):
    return _tensor_arg("is_floating_point", input).dtype.is_floating_point


__all__ = [n for n in dir() if not n.startswith("_") and n not in ("warnings", "Tensor", "zeros",
                                                                     "is_grad_enabled", "no_grad")]
