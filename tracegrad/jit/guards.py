"""Guards: what a compiled entry assumed about the world outside its arguments, checked per call.

Tensors read through closures, globals, modules and optimizers keep their shape, dtype and
requires_grad; the .grad a trace read or wrote is still the same object; globals and closure
variables that held a lifted tensor still hold it. A failed guard retraces, with a reason.
"""
import types

from ..tensor import Tensor


class Guards:
    def __init__(self, fn, tracer):
        self.tracer = tracer
        self.tensors = [(e.real, e.real._shape, e.real._dtype, e.real.requires_grad) for e in tracer.order
                        if e.source[0] == "captured"]
        self.grads = [(t, before) for t, before in tracer.grads.values() if t._data is not None]
        self.bindings = captured_bindings(fn, tracer)

    def __bool__(self):
        return bool(self.tensors or self.grads or self.bindings)

    def failure(self):
        """None when every guard holds, else the reason of the first that fails."""
        for kind, name, holder, obj in self.bindings:
            now = holder.get(name) if kind == "global" else cell_value(holder)
            if now is not obj:
                return f"{kind} {name}: rebound to another object"
        for t, shape, dtype, rg in self.tensors:
            if t._shape != shape or t._dtype is not dtype or t.requires_grad != rg:
                return f"captured tensor {self._name_of(t)}: {dtype.name}{list(shape)} requires_grad={rg} -> " \
                       f"{t._dtype.name}{list(t._shape)} requires_grad={t.requires_grad}"
        for t, before in self.grads:
            if t._grad is not before:
                return f"{self._name_of(t)}.grad: {'None' if before is None else 'a tensor'} -> " \
                       f"{'None' if t._grad is None else 'another tensor'}"
        return None

    def _name_of(self, t):
        for e in self.tracer.order:
            if e.real is t:
                return e.value.name
        return "a captured tensor"


def free_objects(fn):
    """(kind, name, holder, object) for the globals and closure variables that `fn`'s code (nested
    code included) reads."""
    if not isinstance(fn, types.FunctionType):
        return []
    codes, names = [fn.__code__], set()
    while codes:
        c = codes.pop()
        names.update(c.co_names)
        codes.extend(k for k in c.co_consts if isinstance(k, types.CodeType))
    out = [("global", n, fn.__globals__, fn.__globals__[n]) for n in sorted(names) if n in fn.__globals__]
    for n, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
        out.append(("closure variable", n, cell, cell_value(cell)))
    return out


def captured_bindings(fn, tracer):
    """Globals and closure variables of `fn` that held a tensor the trace lifted: rebinding one to
    another object must retrace, as eager code would read the new one."""
    return [b for b in free_objects(fn) if isinstance(b[3], Tensor) and id(b[3]) in tracer.lifted]


def cell_value(cell):
    try:
        return cell.cell_contents
    except ValueError:       # an empty cell
        return None
