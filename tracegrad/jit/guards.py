"""Guards: what a compiled entry assumed about the world outside its signature, checked per call.

- the globals that the function's code and the code of every user function it called while traced
  read (free_vars.py: code outside tracegrad, the standard library and installed packages), its
  closure variables and default argument values: a tensor, module, optimizer, function or other
  object is still the same object, a number, string or tuple of them the same value (floats bit for
  bit); what those values hold is walked by one rule (walk.py) and guarded as state;
- tensors read through closures, globals, modules and optimizers keep shape, dtype, requires_grad;
- for an entry whose trace depended on memory layouts (it asked contiguous(), is_contiguous(),
  stride() or view(), or took a reshape, a view or a copy as the layout decides, and updated a
  tensor in place): each argument and captured tensor keeps its layout;
- each .grad of a captured tensor the trace read or wrote is still None, or still a tensor of the
  same dtype and device (read per call: after zero_grad() and backward() it is a new tensor, as
  eagerly), the same object where the trace also read it by another path;
- the state of reachable modules, optimizers, containers, functions and plain objects (state.py,
  walk.py) is unchanged, and each tensor argument is
  still the same object as the same held tensors (a parameter passed as an argument and also held
  by the optimizer is one graph input);
- for an entry that writes to its inputs: which inputs share memory, and which are over one array
  (a and a.detach(): the trace reads the storage's latest value through either), is unchanged.
A failed guard retraces, with the reason in stats()["retrace_reasons"].

Per call, `Guards.failure` is straight-line Python generated for the entry (`failure_source`): the
fixed inputs' arrays by identity with a snapshot taken when the full check (`full_failure`) last
passed, which proves their shapes, dtypes, devices, layouts and shared memory unchanged; each
captured tensor's requires_grad; each .grad; the state's watch (dicts by version tag, state.py);
the layouts and shared memory of the inputs read per call. Whatever differs runs the full check,
which names the reason or takes a new snapshot. On a 64-layer Adam step (520 tensors, 1438 state
items) this is 25 us of CPU time per call where the loops over generic lists took 175.
"""

import numpy as np

from ..tensor import Tensor
from ..trace import Traced, values_key
from ..strides import dense_order, of_array
from ..backends.cuda.run import shares_memory
from .free_vars import MISSING, cell_value, defaults
from .signature import same_value
from .state import state_change, watched
from .walk import is_static, walk_state
from .writeback import CALLERS, resolve


class Guards:
    def __init__(self, tracer, bindings, objects, lifted_dynamic, module_attrs, inputs, writes):
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
                      if not isinstance(t, Traced) and id(t) not in tracer.written_first]
        self.bindings = [list(b) for b in bindings if _guarded_binding(b[3], tracer)]
        self.values = list(tracer.values.values())      # real tensors read as Python values: by their values
        self.objects, self.lifted_dynamic, self.module_attrs = objects, lifted_dynamic, module_attrs
        self._read(objects)
        self.arg_links = [(s[1], self.held.get(id(real))) for s, real in inputs if s[0] == "arg"] \
            if self.held else []
        # which inputs share memory, for an entry that writes to inputs: that of the arguments and their
        # .grad is looked up per call; that of the captured tensors and constants proved unchanged by
        # the snapshot below
        self.storage = None
        if writes:
            arrays = [real._data for _, real in inputs]
            self.storage = _pattern(arrays, [id(_storage(a)) for a in arrays])
            self.variable = [(i, s) for i, (s, _) in enumerate(inputs) if s[0] in CALLERS]
            # the tensors of the other inputs (an argument's is looked up per call: none is held)
            self.held_inputs = [None if s[0] in CALLERS else real for s, real in inputs]
            var = {i for i, _ in self.variable}
            self.storage_variable = tuple(p for p in self.storage if p[0] in var or p[1] in var)
        # the fixed inputs (captured tensors, constants): their arrays when the full check last passed.
        # The same array objects again prove their shapes, dtypes, devices, layouts and which of them
        # share memory unchanged (a tensor's shape, dtype and device change only with its array:
        # Tensor.data's setter), so a call checks them by identity (`fast_failure`)
        self.fixed = [(i, real) for i, (s, real) in enumerate(inputs) if s[0] not in (*CALLERS, "dynamic")]
        self.varying_layouts = [x for x in self.layouts if x[0][0] != "captured"]
        self.snapshot = [None]
        self.fixed_roots = {}
        self.failure = _fast_failure(self) or self.full_failure

    def binding_failure(self):
        """None when every global, closure variable and default argument the code reads is as traced."""
        for b in self.bindings:
            kind, name, holder, obj = b
            now = holder.get(name, MISSING) if kind == "global" else cell_value(holder) \
                if kind == "closure variable" else defaults(holder).get(name)
            if now is not obj:
                if not is_static(obj) or not same_value(now, obj):
                    return f"{kind} {name}: " + (f"{obj!r} -> {now!r}" if is_static(obj) and is_static(now) else
                                                 "deleted" if now is MISSING else "defined" if obj is MISSING else
                                                 "rebound to another object")
                b[3] = now          # an equal value in a new object: the fast check compares identity
        return None

    def values_failure(self):
        """None when each real tensor the trace read as Python values (item(), numpy()) holds them still."""
        for t, key in self.values:
            if values_key(t) != key:
                return f"{self.names.get(id(t), 'a tensor')}: its values, read as Python values while traced, changed"
        return None

    @staticmethod
    def default_value(fn, name):
        return defaults(fn).get(name)

    def __bool__(self):
        return bool(self.tensors or self.grads or self.bindings or self.objects or self.layouts or self.values) or \
            self.storage is not None

    def _read(self, objects):
        """Read the reachable state: its values, the watch lists, which held tensors are where."""
        walk = walk_state(objects, self.lifted_dynamic, self.module_attrs)
        self.state, self.truncated = (walk.entries if objects else None), walk.truncated
        self.watch = watched(walk) if objects else None
        held = {}
        for name, v, ident in self.state or ():
            if ident and isinstance(v, Tensor):
                held.setdefault(id(v), []).append(name)
        for _, name, _, obj in self.bindings:
            if isinstance(obj, Tensor):
                held.setdefault(id(obj), []).append(name)
        self.held = {k: tuple(v) for k, v in held.items()}

    def full_failure(self, leaves):
        """None when every guard holds (then the fixed inputs' arrays become the snapshot), else the
        reason of the first that fails."""
        reason = self.binding_failure() or self.values_failure()
        if reason is not None:
            return reason
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
            reason = self._links_failure(leaves)
            if reason is not None:
                return reason
        snapshot = [real._data for _, real in self.fixed]
        if self.storage is not None:
            arrays = [None if real is None else real._data for real in self.held_inputs]
            for i, s in self.variable:
                arrays[i] = resolve(s, None, leaves)._data
            now = _pattern(arrays, [id(_storage(a)) for a in arrays])
            if now != self.storage:
                return "inputs sharing memory: " + _sharing(self.input_names, now)
            roots = {}
            for (i, _), a in zip(self.fixed, snapshot):
                roots.setdefault(id(_storage(a)), []).append((i, a))
            self.fixed_roots = roots
        self.snapshot[0] = snapshot
        return None

    def _links_failure(self, leaves):
        """None when each tensor argument is held by the same reachable names as when traced."""
        for k, names in self.arg_links:
            now = self.held.get(id(leaves[k]))
            if now != names:
                return f"{self.input_names_of_arg(k)}: held by {' and '.join(names or ('nothing reachable',))} " \
                       f"when traced, now by {' and '.join(now or ('nothing reachable',))}"
        return None

    def varying_changed(self, leaves):
        """Whether an argument's or a .grad's layout, or which of them share memory with any input,
        differs from the trace (the fixed inputs being the snapshot's arrays)."""
        for s, real, layout in self.varying_layouts:
            if layout_of(resolve(s, real, leaves)) != layout:
                return True
        if self.storage is None:
            return False
        roots, pairs, seen = self.fixed_roots, [], {}
        for i, s in self.variable:
            a = resolve(s, None, leaves)._data
            r = id(_storage(a))
            for k, b in [*roots.get(r, ()), *seen.get(r, ())]:
                if shares_memory(a, b):
                    pairs.append((k, i, a is b) if k < i else (i, k, a is b))
            seen.setdefault(r, []).append((i, a))
        return tuple(sorted(pairs, key=_by_later)) != self.storage_variable

    def _state_failure(self):
        if self.watch is not None and self.watch.unchanged():
            return None
        reason = state_change(self.state, walk_state(self.objects, self.lifted_dynamic, self.module_attrs).entries)
        if reason is None:           # equal values in new objects (a float set again): re-read once
            self._read(self.objects)
        return reason

    def input_names_of_arg(self, k):
        return self.arg_names.get(k, f"argument {k}")


def _fast_failure(g):
    """failure(leaves) of Guards g as straight-line Python written for its guards: each fixed input's
    array by identity with the snapshot and each captured tensor's requires_grad, each .grad as the
    full check asks, the state's watch lists by identity, the arguments' holders, and layouts and
    shared memory of the inputs read per call; whatever differs (or no snapshot yet) runs
    `g.full_failure`, which says why or takes a new snapshot. The text is kept as `g.failure_source`."""
    if g.objects and g.watch is None:       # the state is read at each call: nothing to gain
        return None
    env = {"snap": g.snapshot, "full": g.full_failure, "G": g, "id_": id}
    lines = ["def failure(leaves):",
             "    S = snap[0]",
             "    if S is None:",
             "        return full(leaves)"]
    env["MISSING"], env["cell_value"] = MISSING, cell_value
    for q, b in enumerate(g.bindings):      # each binding's value by identity (the full check compares values)
        env[f"BH{q}"], env[f"BV{q}"] = b[2], b
        now = f"BH{q}.get({b[1]!r}, MISSING)" if b[0] == "global" else f"cell_value(BH{q})" \
            if b[0] == "closure variable" else f"G.default_value(BH{q}, {b[1]!r})"
        lines += [f"    if {now} is not BV{q}[3]:", "        return full(leaves)"]
    if g.values:
        lines += ["    if G.values_failure() is not None:", "        return full(leaves)"]
    at = {id(real): p for p, (_, real) in enumerate(g.fixed)}
    rg = {id(t): r for t, _, _, r, _ in g.tensors}
    for p, (_, real) in enumerate(g.fixed):
        env[f"F{p}"] = real
        check = f"F{p}._data is not S[{p}]"
        if id(real) in rg:
            check += f" or F{p}._requires_grad != {bool(rg[id(real)])}"
        lines += [f"    if {check}:", "        return full(leaves)"]
    for t, _, _, r, _ in g.tensors:         # a captured tensor that is not an input (none, as traced)
        if id(t) not in at:
            return None
    for q, (t, before, identity) in enumerate(g.grads):
        env[f"P{q}"], env[f"B{q}"] = t, before
        if identity or before is None:
            lines += [f"    if P{q}._grad is not B{q}:", "        return full(leaves)"]
        else:
            env[f"DT{q}"], env[f"DEV{q}"] = before._dtype, before._device
            lines += [f"    g = P{q}._grad",
                      f"    if g is not B{q} and (g is None or g._dtype is not DT{q} or g._device is not DEV{q}):",
                      "        return full(leaves)"]
    if g.objects:
        lines += ["    if not G.watch.unchanged():", "        return full(leaves)"]
        for k, names in g.arg_links:
            env[f"N{k}"] = names
            lines += [f"    if G.held.get(id_(leaves[{k}])) != N{k}:", "        return full(leaves)"]
    if g.varying_layouts or g.storage is not None:
        lines += ["    if G.varying_changed(leaves):", "        return full(leaves)"]
    lines.append("    return None")
    source = "\n".join(lines) + "\n"
    exec(compile(source, "<guards>", "exec"), env)
    g.failure_source = source
    return env["failure"]


def _by_later(pair):
    return pair[1], pair[0]


def _grad_text(g):
    return "None" if g is None else f"a {g._dtype.name} tensor on {g._device}"


def layout_of(x):
    """A real tensor's memory layout, as the guards compare it."""
    a = x._data
    if not isinstance(a, np.ndarray):         # a device array
        from ..backends.cuda import memory
        return "row-major" if memory.row_major(a) else f"strides {memory.strides_of(a)}"
    if a.flags.c_contiguous:
        return "row-major"
    strides = of_array(a)
    order = dense_order(a.shape, strides)       # a transpose: the same whatever the sizes
    return f"dense, axes in memory order {order}" if order is not None else f"strides {strides}"


def _guarded_binding(obj, tracer):
    """Globals and closure variables worth a guard: any value but a tensor the trace did not lift (a
    Python module too: rebinding `np` retraces; its attributes are not walked)."""
    return id(obj) in tracer.lifted if isinstance(obj, Tensor) else True



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
