"""Trace one call of the user function into a forward graph and the plan of its effects.

Tensor arguments become graph inputs; tensors read through closures, globals, modules and
optimizers are lifted as they are read (trace.py). The result records the outputs (tensors and
static values), the in-place updates of real tensors and the .grad assignments to write back
after each call, and the guards on the state read.
"""
import os
import warnings

import numpy as np

from .. import dtypes as D
from ..device import CPU
from ..ir import Graph
from ..modes import interpreting
from ..ops import PRIMS
from ..pytree import flatten, object_state, unflatten
from ..symint import hints
from ..tensor import Tensor, TraceError
from ..frozen_draws import watch_draws
from ..trace import Tracer
from .aliases import plan_aliases
from ..backends.cuda.run import overlapping
from .free_vars import code_reads, free_objects, global_bindings, is_user_code
from .guards import Guards
from .signature import STATIC
from .state import reachable, roots, set_slot
from .walk import MAX_DEPTH, MAX_ITEMS, dynamic_slots, is_number, slot_value, walk_state
from .writeback import CALLERS, views_of

_PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Capture:
    """The traced forward graph of one signature and what a call must do around it.

    graph.outputs: the user's tensor outputs, then the new values of updated inputs, then the new
    .grad values (the reverse-mode pass appends the values saved for backward)."""

    def __init__(self, fn, name, args, kwargs, leaves, paths, runs=None, shapes=None):
        """shapes: {leaf position: its shape with symbols} for the tensor arguments with symbolic sizes."""
        self.graph = graph = Graph(name)
        names = {}
        self.tracer = tracer = CaptureTracer(graph, names)
        new_leaves = list(leaves)
        for k, (x, p) in enumerate(zip(leaves, paths)):
            if isinstance(x, Tensor):
                st = tracer.lift(x, ("arg", k), name=p, shape=(shapes or {}).get(k))
                new_leaves[k] = st
                tracer.arg_grads[id(st)] = (k, x, p)
        objects = reachable(fn, leaves, paths)
        bindings = free_objects(fn)
        _name_tensors(objects + [(n, obj) for _, n, _, obj in bindings if isinstance(obj, Tensor)], names)
        _, _, struct = flatten(tuple(list(args) + list(kwargs.values())), "")
        call_args, call_kwargs = _rebuild_call(args, kwargs, new_leaves, struct)
        dynamic = _lift_dynamic(tracer, objects)
        try:
            with interpreting(tracer), watch_draws(name) as draws:
                out = (runs or fn)(*call_args, **call_kwargs)
        except Exception as e:
            _explain_leaf(e, tracer)
            _annotate(e, name)
            _draw_as_eager(graph)
            raise
        finally:
            grad_changes = tracer.grad_changes()
            _restore_dynamic(dynamic, name)
        # a tensor (or view) over memory updated through another tensor (a and a.detach(), a.data)
        # holds, like the memory, the last value: what the backward reads, and what is written back
        tracer.lift_inputs(tuple(e.standin for e in tracer.order if e.source[0] != "const") +
                           tuple(view for view, _, _ in list(tracer.views.values())))
        self._plan_outputs(out, name)
        self._plan_writes(grad_changes, name)
        self.aliases = plan_aliases(tracer, [(k, st) for k, (kind, _, st) in enumerate(self.out_plan)
                                             if kind == "tensor"], grad_changes)
        inputs = [(e.source, e.real) for e in tracer.order]
        lifted = {id(obj) for _, obj in objects if object_state(obj) is not None}   # their lr: read per call
        bindings, module_attrs = _with_called(bindings, draws, name)
        objects += roots([(n, obj) for _, n, _, obj in bindings], objects)
        self.guards = Guards(tracer, bindings, objects, lifted, module_attrs, inputs,
                             bool(self.mutations or self.grad_writes))
        if self.guards.truncated:
            warnings.warn(f"compiled function {name} reads {', '.join(self.guards.truncated[:3])}, which hold more "
                          f"than {MAX_ITEMS} items or {MAX_DEPTH} levels: a change past those is not seen by its "
                          f"guards; pass such data as tensors", RuntimeWarning, stacklevel=4)
        # where each graph input comes from at a call; an argument (or its .grad) is read from the
        # call's arguments, so the entry keeps no reference to the first call's tensors
        self.inputs = [(s, None if s[0] in CALLERS else real) for s, real in inputs]

    def _plan_outputs(self, out, name):
        out_leaves, _, self.out_struct = flatten(out, "out")
        self.out_plan, values = [], []
        for x in out_leaves:
            if isinstance(x, Tensor):
                st = self.tracer.lift_inputs((x,))[0]      # a view sees updates of its base
                self.out_plan.append(("tensor", len(values), st))
                values.append(st._ir)
            elif isinstance(x, STATIC):
                self.out_plan.append(("static", x, None))
            else:
                raise TypeError(f"compiled function {name} returned a {type(x).__name__}; return tensors, "
                                f"Python numbers, None, or tuples/lists/dicts of them")
        self.n_user = len(values)
        self.graph.outputs = values

    def _plan_writes(self, grad_changes, name):
        """In-place updates of real tensors, then .grad assignments, as extra graph outputs."""
        tracer, values = self.tracer, self.graph.outputs
        self.mutations, self.inplace = [], []      # inplace: (output index, input index) candidates
        # bumps[j]: what mutation j adds to its tensor's version counter: the in-place updates the trace
        # made through it (a .grad zeroed, then accumulated into: 2, as eagerly), once per shared counter
        self.bumps, counted = [], set()
        for i, e in enumerate(tracer.order):
            if e.standin._ir is not e.value and e.source[0] != "const":
                if e.standin.grad_fn is not None:
                    raise TraceError(f"compiled function {name} updates {e.value.name} in place with a value that has "
                                     f"autograd history (it requires grad); the caller's tensor would not get that "
                                     f"history. Compute the new value out of place and return it (y = x * w), or "
                                     f"update under tg.no_grad()")
                self.mutations.append((e.source, e.real))
                self.bumps.append(0 if id(e.standin._ver) in counted else e.standin._ver[0])
                counted.add(id(e.standin._ver))
                self.inplace.append((len(values), i))
                values.append(e.standin._ir)
        self.shared = shared = _overlaps(tracer, name, values[:self.n_user])
        # an update of memory another input shares is written back after the call, not in place
        self.updates, self.inplace = self.inplace, [(oi, ii) for oi, ii in self.inplace if ii not in shared]
        self.grad_writes = []
        standins = {id(e.standin): e for e in tracer.order}
        # graph inputs whose memory a call overwrites: updated tensors (a .grad accumulated in place too)
        self.written = {i for i, e in enumerate(tracer.order) if e.standin._ir is not e.value and
                        e.source[0] != "const"} | shared
        made = {}       # id(a tensor the trace set as .grad) -> its grad write: one object, as eagerly
        for t, before, after in grad_changes:
            e = standins.get(id(t))
            target = ("arg", e.source[1]) if e is not None else ("captured", t)
            held = standins.get(id(after))
            if after is None:
                how = None
            elif held is not None and held.source[0] in ("arg", "captured"):
                how = (held.source, held.real)          # a tensor the caller holds: that object
            elif after.grad_fn is not None:             # backward(create_graph=True): history to keep
                raise TraceError(f"compiled function {name} sets the .grad of {_grad_name(tracer, t)} to a tensor "
                                 f"with autograd history (backward(create_graph=True), or .grad assigned a result "
                                 f"of tensors requiring grad); a compiled call writes .grad back as a plain "
                                 f"tensor, which would drop that history. Take the gradient with "
                                 f"tg.autograd.grad(..., create_graph=True) and return it, or call the function "
                                 f"without tg.compile")
            else:                                       # a new tensor, as eagerly (never the old .grad)
                how = made.get(id(after))
                if how is None:     # on its tensor's device (a cpu scalar's gradient computed on cuda)
                    how = made[id(after)] = (len(values), after._dtype, t._device, after._ver[0])
                    values.append(tracer.lift(after)._ir)
            self.grad_writes.append((target, how))


class CaptureTracer(Tracer):
    """The tracer of a compiled call; notes where in the graph each tensor is first updated."""

    def __init__(self, graph, names):
        super().__init__(graph, names=names)
        self.first_write = {}        # id(stand-in) -> number of graph nodes when first updated

    def mutate(self, t, new):
        n = len(self.graph.nodes)
        st = super().mutate(t, new)
        self.first_write.setdefault(id(st), n)
        return st


def _overlaps(tracer, name, results):
    """Input positions sharing memory with an updated input. Tensors over one array (a and
    a.detach()) are one storage to the tracer, which reads the storage's latest value through
    either. Other overlaps (views of one storage) get their own graph values, which matches eager
    code as long as the other input, and any view of it, is read only before the update (not
    returned, not updated itself); otherwise refuse it, naming both."""
    lifted = [(i, e) for i, e in enumerate(tracer.order) if e.source[0] != "const"]
    near = overlapping([e.real._data for _, e in lifted])
    out = set()
    for k, (i, e) in enumerate(lifted):
        if e.standin._ir is e.value:
            continue
        for j, o in (lifted[m] for m in near.get(k, ())):
            out.update((i, j))
            if e.real._data is o.real._data:
                continue
            since = tracer.first_write.get(id(e.standin), 0)
            read = {id(o.value)}
            late = o.standin._ir is not o.value or any(views_of(v, read) for v in results) or any(
                views_of(v, read) for n in tracer.graph.nodes[since:] for v in n.inputs)
            if late:
                raise TraceError(f"compiled function {name} updates {e.value.name} in place while it also reads "
                                 f"{o.value.name}, which shares its memory (a view of it or its base), after the "
                                 f"update; compute the view inside the function from the updated tensor instead")
    return out


def _grad_name(tracer, t):
    """The readable name of the tensor whose .grad is `t`'s field (an argument's stand-in, a captured tensor)."""
    e = next((e for e in tracer.order if e.standin is t or e.real is t), None)
    return e.value.name if e is not None else "a tensor"


def _with_called(bindings, draws, name):
    """(the bindings of the compiled function's own code, then the globals read by the code of every
    user function that ran while it was traced (free_vars.is_user_code), each once; the attribute
    names that code loads, or None where the code that ran is not known)."""
    if not draws.hooked:
        warnings.warn(f"compiled function {name} was traced while a C-level profiler (cProfile) held the "
                      f"profile hook: the globals read by the functions it calls are not guarded, only its "
                      f"own; trace it outside the profiler", RuntimeWarning, stacklevel=5)
        return bindings, None
    out, seen = list(bindings), {(id(b[2]), b[1]) for b in bindings if b[0] == "global"}
    attrs = set()
    for code, globals_ in draws.code.items():
        if not is_user_code(code.co_filename):
            continue
        names, loaded = code_reads(code)
        attrs |= loaded
        names = [n for n in names if (id(globals_), n) not in seen]
        seen.update((id(globals_), n) for n in names)
        out += global_bindings(names, globals_)
    return out, attrs


def _name_tensors(objects, names):
    """Readable graph-input names for the tensors (and their .grad) that the roots hold."""
    held = [(p, t) for p, t in objects if isinstance(t, Tensor)]
    held += [(p, t) for p, t, _ in walk_state([(p, o) for p, o in objects if not isinstance(o, Tensor)]).entries
             if isinstance(t, Tensor)]
    for n, t in held:
        names.setdefault(id(t), n)
        if t._grad is not None:
            names.setdefault(id(t._grad), n + ".grad")


def _lift_dynamic(tracer, objects):
    """Replace each dynamic number (an optimizer group's lr) by a graph input for the trace:
    [(holder, key, label, number, stand-in)]. A call reads the number again (writeback.resolve)."""
    out = []
    for name, obj in objects:
        if object_state(obj) is None:
            continue
        for label, holder, key in dynamic_slots(obj):
            v = slot_value(holder, key)
            if not is_number(v):
                continue
            like = next((t for _, t, _ in walk_state([(name, obj)]).entries if isinstance(t, Tensor)
                         and t._dtype.is_floating_point), None)
            dtype, dev = (like._dtype, like._device) if like is not None else (D.float32, CPU)
            holder_t = Tensor._wrap(np.array(v, dtype.np), dtype, dev)
            st = tracer.lift(holder_t, ("dynamic", holder, key, dtype, dev), name=f"{name}.{label}")
            set_slot(holder, key, st)
            out.append((holder, key, f"{type(obj).__name__}.{label}", v, st))
    return out


def _restore_dynamic(dynamic, name):
    for holder, key, label, v, st in dynamic:
        now = slot_value(holder, key)
        set_slot(holder, key, v)
        if now is not st:
            raise TraceError(f"compiled function {name} assigned {label}; it is read at each "
                             f"call, so set it outside the compiled function (e.g. a learning-rate schedule "
                             f"between steps)")


def _rebuild_call(args, kwargs, new_leaves, struct):
    rebuilt = unflatten(struct, new_leaves)
    n = len(args)
    return list(rebuilt[:n]), dict(zip(kwargs, rebuilt[n:]))


def _explain_leaf(e, tracer):
    """Eager's in-place error on a leaf, raised for an input that is not a leaf outside: inside the
    trace every input is a leaf of the graph; say so."""
    if not (isinstance(e, RuntimeError) and e.args and str(e.args[0]).startswith("a leaf Variable")):
        return
    inner = [e.value.name for e in tracer.order if e.source[0] in ("arg", "captured") and e.real.grad_fn is not None]
    if inner:
        e.args = (f"{e.args[0]} Inside a compiled function its inputs ({', '.join(inner)}, results of autograd "
                  f"outside) are leaves of the traced graph, so an in-place update of them that autograd would "
                  f"record is not supported: compute the new value out of place and return it (y = x * w), or "
                  f"update under tg.no_grad()",) + e.args[1:]


def _draw_as_eager(graph):
    """A trace that raises (the user's error, raised as eager raises it) takes from the generator what
    eager drew before the error: the random draws recorded so far, in order, at the call's sizes (as the
    compiled program draws them), so the draws after the error are eager's too."""
    for n in graph.nodes:
        p = PRIMS.get(n.op)
        if p is not None and p.kind == "random":
            p.impl(**hints(n.attrs))


def _annotate(e, name):
    """Make an error raised while tracing name the user's line, not tracegrad's internals."""
    if isinstance(e, TraceError) or not e.args or not isinstance(e.args[0], str):
        return
    tb, where = e.__traceback__, None
    while tb is not None:
        fname = tb.tb_frame.f_code.co_filename
        if not os.path.abspath(fname).startswith(_PKG_DIR):
            where = f"{fname}:{tb.tb_lineno}"
        tb = tb.tb_next
    if where and where not in e.args[0]:
        e.args = (f"{e.args[0]} (while tracing {name}, at {where})",) + e.args[1:]
