"""Forward mode (tg.jvp) through a compiled function.

A compiled call runs compiled code on arrays, which no interpreter sees, so under `tg.jvp` its
results would carry no tangents. Instead, a call made under forward mode runs a second compiled
function of the same code: `TangentsOf(fn)`, traced with the arguments' tangents as extra inputs
and fn run in forward mode inside the trace, so the compiled program returns the results and their
tangents together (from the primitives' JVP rules, as eagerly). It is an ordinary compiled
function — signatures, guards on what fn reads, in-place updates, random draws in eager's order —
cached apart from the plain calls (CompiledFunction._forward_mode)."""
from ..forward import forward_mode
from ..modes import _thread, interpreter
from ..pytree import flatten
from ..tensor import Tensor, TraceError


class TangentsOf:
    """What the forward-mode twin of compiled `fn` traces: (fn(*args, **kwargs), the tangent of each
    leaf of the result, None where it has none), the i-th tensor among the leaves of (args, kwargs)
    carrying tangents[i]."""

    def __init__(self, fn, name):
        self.fn, self.name = fn, name

    def __call__(self, args, kwargs, tangents):
        tracer = interpreter()
        for x, t in zip(_tensors((args, kwargs)), tangents):
            if t is not None:
                x._tangent = t
        with forward_mode():
            out = self.fn(*args, **kwargs)
        held = [e for e in tracer.order if e.source[0] == "captured" and e.real._tangent is not None]
        if held:
            raise TraceError(f"compiled function {self.name} is called under tg.jvp and reads {held[0].value.name} "
                             f"{held[0].real._dtype.name}{list(held[0].real._shape)}, which carries a tangent, "
                             f"through a closure, a global or a module; forward mode through a compiled function "
                             f"follows the tangents of its arguments. Pass that tensor as an argument")
        return out, [x._tangent if isinstance(x, Tensor) else None for x in flatten(out)[0]]


def call_with_tangents(twin, args, kwargs):
    """The results of a call made under forward mode, each carrying its tangent: `twin` (the
    compiled TangentsOf) run on the arguments and their tangents, outside the interpreters."""
    tangents = [x._tangent for x in _tensors((args, kwargs))]
    stack, _thread.interpreters = _thread.interpreters, []
    try:
        out, out_tangents = twin(args, kwargs, tangents)
    finally:
        _thread.interpreters = stack
    for x, t in zip(flatten(out)[0], out_tangents):
        if t is not None:
            x._tangent = t
    return out


def _tensors(tree):
    return [x for x in flatten(tree)[0] if isinstance(x, Tensor)]
