"""The Tensor methods (and in-place forms) of the primitives that declare a `surface` (core.Surface):
made from the declaration, so a new primitive has no method written by hand. `call` is also what
the function forms tg.<name> run (function_forms.py)."""
from ..core import PRIMS
from .base import TensorBase
from .dispatch import _float_operand, _promote, dispatch
from .named_methods import _inplace_form


def call(p, *operands, **named):
    """Primitive p on `operands` (tensors, or Python numbers beside a tensor; the surface's params may
    be named), promoted to one dtype as PyTorch does (and to the default float dtype first where the
    surface says `floats`)."""
    s = p.surface
    operands += tuple(named.pop(n) for n in s.params[len(operands):] if n in named)
    if named or len(operands) != len(s.params):
        raise TypeError(f"{s.name}() takes {len(s.params)} arguments ({', '.join(s.params)}), got "
                        f"{len(operands)}{' and ' + ', '.join(named) if named else ''}")
    if len(operands) == 2:
        operands = _promote(*operands)
    elif not isinstance(operands[0], TensorBase):
        raise TypeError(f"{s.name}(): argument '{s.params[0]}' must be Tensor, not {type(operands[0]).__name__}")
    if s.floats:
        operands = [_float_operand(x) for x in operands]
    return dispatch(p, tuple(operands), {})


def _method(p):
    floats = p.surface.floats

    def method(self, *others, **named):
        if others or named or len(p.surface.params) != 1:
            return call(p, self, *others, **named)
        return dispatch(p, (_float_operand(self) if floats else self,), {})      # x.exp(): the short way
    method.__name__ = method.__qualname__ = p.surface.name
    method.__doc__ = f"x.{p.surface.name}({', '.join(p.surface.params[1:])}): {p.surface.torch}. {p.surface.note}"
    return method


def install(cls):
    """Give class `cls` (Tensor) the method and in-place form of every primitive with a surface; an
    in-place form the class writes itself (exp_: into the tensor's memory, tensor/direct.py) stays."""
    for p in PRIMS.values():
        if p.surface is not None:
            for name in (p.surface.name,) + p.surface.aliases:
                if hasattr(cls, name):
                    raise TypeError(f"Tensor.{name} is written by hand and declared by primitive {p.name}")
                setattr(cls, name, _method(p))
                if not hasattr(cls, name + "_"):
                    setattr(cls, name + "_", _inplace_form(name))
    return cls
