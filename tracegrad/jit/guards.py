"""Guards: what a compiled entry assumed about the world outside its signature, checked per call.

- globals and closure variables the code reads: a tensor, module or optimizer is still the same
  object, a number, string or tuple still the same value;
- tensors read through closures, globals, modules and optimizers keep shape, dtype, requires_grad;
- each .grad the trace read or wrote is still the same object;
- the state of reachable modules and optimizers (state.py) is unchanged, and each tensor argument is
  still the same object as the same held tensors (a parameter passed as an argument and also held
  by the optimizer is one graph input);
- for an entry that writes to its inputs: which inputs share memory is unchanged (the trace refused
  updates of shared memory, so a call must not sneak them in).
A failed guard retraces, with the reason in stats()["retrace_reasons"].
"""
import types

import numpy as np

from ..pytree import object_state
from ..tensor import Tensor
from .signature import STATIC


class Guards:
    def __init__(self, fn, tracer, objects, inputs, writes):
        from .state import read_state
        self.tracer = tracer
        self.tensors = [(e.real, e.real._shape, e.real._dtype, e.real.requires_grad) for e in tracer.order
                        if e.source[0] == "captured"]
        self.grads = [(t, before) for t, before in tracer.grads.values() if t._data is not None]
        self.bindings = [b for b in free_objects(fn) if _guarded_binding(b[3], tracer)]
        self.objects = objects
        self.state = read_state(objects) if objects else None
        held = self._held(self.state)
        self.arg_links = [(s[1], held.get(id(real))) for s, real in inputs if s[0] == "arg"] if held else []
        self.inputs = inputs if writes else None
        self.storage = storage_pattern([real for _, real in inputs]) if writes else None

    def __bool__(self):
        return bool(self.tensors or self.grads or self.bindings or self.objects or self.inputs)

    def _held(self, state):
        """id(tensor) -> the names under which the reachable state and free variables hold it."""
        held = {}
        for name, v, ident in state or ():
            if ident and isinstance(v, Tensor):
                held.setdefault(id(v), []).append(name)
        for _, name, _, obj in self.bindings:
            if isinstance(obj, Tensor):
                held.setdefault(id(obj), []).append(name)
        return {k: tuple(v) for k, v in held.items()}

    def failure(self, leaves):
        """None when every guard holds, else the reason of the first that fails."""
        for kind, name, holder, obj in self.bindings:
            now = holder.get(name) if kind == "global" else cell_value(holder)
            if now is not obj and (not isinstance(obj, STATIC) or type(now) is not type(obj) or now != obj):
                return f"{kind} {name}: " + (f"{obj!r} -> {now!r}" if isinstance(obj, STATIC) else
                                             "rebound to another object")
        for t, shape, dtype, rg in self.tensors:
            if t._shape != shape or t._dtype is not dtype or t.requires_grad != rg:
                return f"captured tensor {self._name_of(t)}: {dtype.name}{list(shape)} requires_grad={rg} -> " \
                       f"{t._dtype.name}{list(t._shape)} requires_grad={t.requires_grad}"
        for t, before in self.grads:
            if t._grad is not before:
                return f"{self._name_of(t)}.grad: {'None' if before is None else 'a tensor'} -> " \
                       f"{'None' if t._grad is None else 'another tensor'}"
        if self.objects:
            from .state import read_state, state_change
            now = read_state(self.objects)
            reason = state_change(self.state, now)
            if reason is not None:
                return reason
            held = self._held(now)
            for k, names in self.arg_links:
                if held.get(id(leaves[k])) != names:
                    return f"{self._arg_name(k)}: held by {' and '.join(names or ('nothing reachable',))} when " \
                           f"traced, now by {' and '.join(held.get(id(leaves[k])) or ('nothing reachable',))}"
        if self.inputs is not None:
            from .writeback import resolve
            now = storage_pattern([resolve(s, r, leaves) for s, r in self.inputs])
            if now != self.storage:
                return "inputs sharing memory: " + _sharing([e.value.name for e in self.tracer.order], now)
        return None

    def _name_of(self, t):
        for e in self.tracer.order:
            if e.real is t:
                return e.value.name
        return "a captured tensor"

    def _arg_name(self, k):
        for e in self.tracer.order:
            if e.source == ("arg", k):
                return e.value.name
        return f"argument {k}"


def _guarded_binding(obj, tracer):
    """Globals and closure variables worth a guard: a tensor the trace lifted, a module or optimizer,
    a number, string, None or tuple of them (a Python value the code may read)."""
    from .state import is_static
    if isinstance(obj, Tensor):
        return id(obj) in tracer.lifted
    return object_state(obj) is not None or is_static(obj)


def storage(t):
    """The object owning t's memory: the base of its array's chain of views (an array, bytes, mmap)."""
    a = t._data
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a if a.base is None else a.base


def storage_pattern(tensors):
    """For each tensor, the position of the first tensor with the same storage (None: no tensor)."""
    first, out = {}, []
    for i, t in enumerate(tensors):
        out.append(None if t is None else first.setdefault(id(storage(t)), i))
    return tuple(out)


def _sharing(names, pattern):
    groups = {}
    for i, j in enumerate(pattern):
        if j is not None and j != i:
            groups.setdefault(j, [names[j]]).append(names[i])
    return "; ".join(" and ".join(g) for g in groups.values()) or "none (they shared memory when traced)"


def free_objects(fn):
    """(kind, name, holder, object) for the globals and closure variables that `fn`'s code (nested
    code included) reads."""
    if isinstance(fn, types.MethodType):
        fn = fn.__func__
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


def cell_value(cell):
    try:
        return cell.cell_contents
    except ValueError:       # an empty cell
        return None
