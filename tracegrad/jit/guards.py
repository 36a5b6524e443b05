"""Guards: what a compiled entry assumed about the world outside its signature, checked per call.

- globals and closure variables the code reads, and the function's default argument values: a
  tensor, module or optimizer is still the same object, a number, string or tuple the same value;
- tensors read through closures, globals, modules and optimizers keep shape, dtype, requires_grad;
- for an entry whose trace depended on memory layouts (it asked contiguous(), is_contiguous(),
  stride() or view(), or took a reshape, a view or a copy as the layout decides, and updated a
  tensor in place): each argument and captured tensor keeps its layout;
- each .grad of a captured tensor the trace read or wrote is still None, or still a tensor of the
  same dtype and device (read per call: after zero_grad() and backward() it is a new tensor, as
  eagerly), the same object where the trace also read it by another path;
- the state of reachable modules and optimizers (state.py) is unchanged, and each tensor argument is
  still the same object as the same held tensors (a parameter passed as an argument and also held
  by the optimizer is one graph input);
- for an entry that writes to its inputs: which inputs share memory, and which are over one array
  (a and a.detach(): the trace reads the storage's latest value through either), is unchanged.
A failed guard retraces, with the reason in stats()["retrace_reasons"].
"""

import numpy as np

from ..pytree import object_state
from ..tensor import Tensor
from ..trace import Traced
from ..strides import of_array
from .device import shares_memory
from .free_vars import cell_value, defaults, free_objects
from .signature import STATIC
from .state import is_static, read_state, state_change, unchanged, watched
from .writeback import CALLERS, resolve


class Guards:
    def __init__(self, fn, tracer, objects, inputs, writes):
        self.names = {id(e.real): e.value.name for e in tracer.order}
        self.input_names = [e.value.name for e in tracer.order]
        self.arg_names = {e.source[1]: e.value.name for e in tracer.order if e.source[0] == "arg"}
        self.tensors = [(e.real, e.real._shape, e.real._dtype, e.real.requires_grad, e.real._device)
                        for e in tracer.order if e.source[0] == "captured"]
        self.layouts = [(s, real, layout_of(real)) for s, real in inputs if s[0] in (*CALLERS, "captured")] \
            if tracer.layout_used else []
        # a captured tensor's .grad: the same object where the trace read that object by another path
        # (a closure, a module); else, None or not as then, a tensor of the same dtype and device
        same = {id(e.real) for e in tracer.order if e.source[0] != "grad_of"}
        self.grads = [(t, before, id(before) in same) for t, before in tracer.grads.values()
                      if not isinstance(t, Traced)]
        self.bindings = [b for b in free_objects(fn) if _guarded_binding(b[3], tracer)]
        self.objects = objects
        self._read(objects)
        self.arg_links = [(s[1], self.held.get(id(real))) for s, real in inputs if s[0] == "arg"] \
            if self.held else []
        # which inputs share memory, for an entry that writes to inputs: the storage of captured
        # tensors and constants is fixed; that of arguments and their .grad is looked up per call
        self.storage = None
        if writes:
            arrays = [real._data for _, real in inputs]
            self.storage = _pattern(arrays, [id(_storage(a)) for a in arrays])
            self.fixed_arrays = [None if s[0] in CALLERS else real._data for s, real in inputs]
            self.fixed_roots = [None if a is None else id(_storage(a)) for a in self.fixed_arrays]
            self.variable = [(i, s) for i, (s, _) in enumerate(inputs) if s[0] in CALLERS]

    def __bool__(self):
        return bool(self.tensors or self.grads or self.bindings or self.objects or self.layouts) or \
            self.storage is not None

    def _read(self, objects):
        """Read the reachable state: its values, the watch lists, which held tensors are where."""
        self.state = read_state(objects) if objects else None
        self.watch = watched(objects) if objects else None
        held = {}
        for name, v, ident in self.state or ():
            if ident and isinstance(v, Tensor):
                held.setdefault(id(v), []).append(name)
        for _, name, _, obj in self.bindings:
            if isinstance(obj, Tensor):
                held.setdefault(id(obj), []).append(name)
        self.held = {k: tuple(v) for k, v in held.items()}

    def failure(self, leaves):
        """None when every guard holds, else the reason of the first that fails."""
        for kind, name, holder, obj in self.bindings:
            now = holder.get(name) if kind == "global" else cell_value(holder) if kind == "closure variable" \
                else defaults(holder).get(name)
            if now is not obj and (not isinstance(obj, STATIC) or type(now) is not type(obj) or now != obj):
                return f"{kind} {name}: " + (f"{obj!r} -> {now!r}" if isinstance(obj, STATIC) else
                                             "rebound to another object")
        for t, shape, dtype, rg, dev in self.tensors:
            if t._shape != shape or t._dtype is not dtype or t.requires_grad != rg:
                return f"captured tensor {self.names.get(id(t), 'a captured tensor')}: {dtype.name}{list(shape)} " \
                       f"requires_grad={rg} -> {t._dtype.name}{list(t._shape)} requires_grad={t.requires_grad}"
            if t._device is not dev and t._device != dev:
                return f"captured tensor {self.names.get(id(t), 'a captured tensor')}: device {dev} -> {t._device}"
        # .grad before layouts: a .grad read per call must be there to have one
        for t, before, identity in self.grads:
            g = t._grad
            if g is not before and (identity or g is None or before is None or g._dtype is not before._dtype
                                    or g._device is not before._device and g._device != before._device):
                return f"{self.names.get(id(t), 'a captured tensor')}.grad: {_grad_text(before)} -> " + \
                    ("another tensor" if identity and g is not None else _grad_text(g))
        for s, real, layout in self.layouts:
            t = resolve(s, real, leaves)
            if layout_of(t) != layout:
                name = self.arg_names.get(s[1]) if s[0] == "arg" else self.names.get(id(real))
                return f"{name}: layout {layout} -> {layout_of(t)}"
        if self.objects:
            reason = self._state_failure()
            if reason is not None:
                return reason
            for k, names in self.arg_links:
                now = self.held.get(id(leaves[k]))
                if now != names:
                    return f"{self.input_names_of_arg(k)}: held by {' and '.join(names or ('nothing reachable',))} " \
                           f"when traced, now by {' and '.join(now or ('nothing reachable',))}"
        if self.storage is not None:
            arrays, roots = list(self.fixed_arrays), list(self.fixed_roots)
            for i, s in self.variable:
                arrays[i] = a = resolve(s, None, leaves)._data
                roots[i] = id(_storage(a))
            now = _pattern(arrays, roots)
            if now != self.storage:
                return "inputs sharing memory: " + _sharing(self.input_names, now)
        return None

    def _state_failure(self):
        if self.watch is not None and unchanged(self.watch):
            return None
        reason = state_change(self.state, read_state(self.objects))
        if reason is None:           # equal values in new objects (a float set again): re-read once
            self._read(self.objects)
        return reason

    def input_names_of_arg(self, k):
        return self.arg_names.get(k, f"argument {k}")


def _grad_text(g):
    return "None" if g is None else f"a {g._dtype.name} tensor on {g._device}"


def layout_of(x):
    """A real tensor's memory layout, as the guards compare it."""
    a = x._data
    if not isinstance(a, np.ndarray):         # a device array
        from ..cuda import memory
        return "row-major" if memory.row_major(a) else f"strides {memory.strides_of(a)}"
    return "row-major" if a.flags.c_contiguous else f"strides {of_array(a)}"


def _guarded_binding(obj, tracer):
    """Globals and closure variables worth a guard: a tensor the trace lifted, a module or optimizer,
    a number, string, None or tuple of them (a Python value the code may read), a list or dict (by
    identity: rebound to another one retraces; its items are guarded as state)."""
    if isinstance(obj, Tensor):
        return id(obj) in tracer.lifted
    return object_state(obj) is not None or is_static(obj) or isinstance(obj, (list, dict))


def _storage(a):
    """The object owning array a's memory: the base of its chain of views (an array, bytes, mmap);
    all device memory counts as one storage (address ranges tell arrays apart)."""
    if not isinstance(a, np.ndarray):
        return _DEVICE
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a if a.base is None else a.base


_DEVICE = "device memory"


def _pattern(arrays, roots):
    """The pairs (i, j, same array) of arrays whose memory may overlap: arrays of one storage (roots:
    the id of each array's storage) whose ranges overlap (disjoint slices of one buffer do not)."""
    first, overlaps = {}, []
    for i, r in enumerate(roots):
        j = first.setdefault(r, i)
        if j != i:
            overlaps += [(k, i, arrays[k] is arrays[i]) for k in range(j, i)
                         if roots[k] == r and shares_memory(arrays[k], arrays[i])]
    return tuple(overlaps)


def _sharing(names, pattern):
    return ", ".join(f"{names[i]} and {names[j]}" + (" (one array)" if same else "") for i, j, same in pattern) or \
        "none (some shared memory when traced)"
