"""Tracing: the interpreter that records primitive applications into an IR graph.

While a function is traced its `Tracer` is pushed on this thread's interpreter stack (modes.py):
every primitive the function applies is recorded instead of run, and yields a `Traced` value, a
Tensor that stands for an IR value and has no data. Every real tensor the function touches
(arguments, module parameters, closures, globals) is *lifted*: it becomes a graph input with a
traced stand-in, read at call time, never baked in. Tensors created inside the trace are constants
of the graph. In-place updates of real tensors and assignments to `.grad` are recorded
(functionalized) and written back after each call by the compiled function.
"""

import numpy as np

from . import dtypes as D
from . import strides as L
from .broadcast import user_frame
from .modes import interpreter, interpreters
from .ops.layout import reshape_strides
from .symint import hints, is_sym, same_size
from .tensor import Tensor, TraceError, ones_like
from .tensor.dispatch import view_of
from .trace_indices import check_known_indices


def location():
    """The user's file:line currently executing, or None."""
    f = user_frame()
    return f"{f.f_code.co_filename}:{f.f_lineno}" if f else None


class Traced(Tensor):
    """A value of a function being traced: it stands for the IR value `_ir` and has no data.

    It has every Tensor method (they dispatch to the tracer); what needs the data (item(), bool(),
    numpy(), ...) raises a TraceError naming the line. Its memory layout (`_strides`, in elements;
    None when not known) is the one eager code would give it (strides.py), so contiguous(),
    is_contiguous(), stride() and view() answer as eagerly."""

    __slots__ = ("_strides",)

    @classmethod
    def of(cls, shape, dtype, dev, ir, strides=()):
        t = cls._wrap(None, dtype, dev)
        t._shape, t._ir = tuple(shape), ir
        t._strides = L.contiguous_strides(hints(t._shape)) if strides == () else strides
        return t

    @property
    def _loc(self):
        """Where the value was made: the user's file:line of the op that produced it."""
        node = self._ir.node
        return node.loc if node is not None else None

    def _concrete(self, what):
        raise _value_error(self, what)

    def _layout(self, what=None):
        """The strides; None when not known, or for `what` (a method needing them) a TraceError."""
        s = getattr(self, "_strides", None)
        s = s if s is not None and len(s) == len(self._shape) else None
        if what is not None:
            _layout_read(what, self)
        if s is None and what is not None:
            raise TraceError(f"{what} needs the memory layout of a traced tensor (at {location()}), and the "
                             f"layout of this one ({self._dtype.name}{list(self._shape)}, made at {self._loc}) "
                             f"is not known inside a compiled function: its primitive's layout depends on the "
                             f"sizes. Call .clone() on it first (a row-major copy), or do this outside.")
        return s

    def _row_major(self):
        s = self._layout()
        return s is not None and L.is_row_major(hints(self._shape), s)

    def _viewable(self, shape):
        return reshape_strides(hints(self._shape), self._layout("view()"), hints(shape)) is not None

    def contiguous(self):
        self._layout("contiguous()")
        return super().contiguous()

    def is_contiguous(self):
        return L.is_row_major(hints(self._shape), self._layout("is_contiguous()"))

    def stride(self, dim=None):
        s = L.shown(hints(self._shape), self._layout("stride()"))
        if any(map(is_sym, self._shape)):
            order = L.dense_order(hints(self._shape), s)
            if order is not None:               # expressions of the symbolic sizes
                s = L.dense_strides(self._shape, order)
            else:
                for n in self._shape:           # the numbers of the traced sizes: pinned
                    int(n)
        return s if dim is None else s[dim if dim >= 0 else dim + len(s)]

    def _alias(self):
        """detach(), .data: the value this tensor holds now (a view re-read after an update of its
        base); an alias of a view is re-read as the view is."""
        tracer = next((i for i in interpreters() if isinstance(i, Tracer) and i.graph is self._ir.graph), None)
        if tracer is not None:
            tracer._current(self)
        t = super()._alias()
        t._strides = self._layout()
        view = tracer.views.get(id(self)) if tracer is not None else None
        if view is not None:          # (.data too: over the view's memory, with its own version)
            t._base = self._base
            tracer.views[id(t)] = (t,) + view[1:]
        return t

    @classmethod
    def _zeros(cls, shape, dtype, dev):
        """The zero cotangent the backward engine gives an unused output (of a custom Function with
        several outputs): a constant of the graph being traced, not an array."""
        return interpreter().constant(0, dtype, dev, shape)

    def _implicit_gradient(self, create_graph):
        return ones_like(self)

    def __repr__(self):
        return f"Tensor(traced, shape={self._shape}, dtype={self._dtype})"

    __str__ = __repr__

    def __format__(self, spec):
        return repr(self) if not spec else format(repr(self), spec)


def _value_error(t, what):
    """The TraceError for reading the value of traced `t` (what: "item()", "bool()", an op name, ...)."""
    here = location()
    where = f" at {here}" if here else ""
    if not _live(t):
        return escaped_error(t, where)
    if what == "bool()":
        return TraceError(f"bool() needs the value of a traced tensor{where}; Python control flow that depends on "
                          f"tensor values (if, while, and/or) cannot be compiled. Use tg.where(cond, a, b) to "
                          f"select values instead, or make the decision outside the compiled function.")
    return TraceError(f"{what} needs the value of a traced tensor{where}, and inside a compiled function tensors "
                      f"have no values yet (the compiled code computes them when it runs). Return the tensor "
                      f"from the compiled function and read its value from the result, or compute this outside "
                      f"the compiled function. (If the value only chooses between tensors, tg.where(cond, a, b) "
                      f"does that inside.)")


def escaped_error(t, where=""):
    """The TraceError for a traced value used after its trace ended (JAX's escaped-tracer error)."""
    graph = t._ir.graph
    made = f"created at {t._loc}" if t._loc else "an input of the trace"
    return TraceError(f"a traced tensor ({t._dtype.name}{list(t._shape)}, {made} while {graph.name} was being "
                      f"compiled) was used{where} after its trace ended: the function stored it outside itself "
                      f"(appended it to a list, assigned it to a global or an attribute). Python side effects of "
                      f"a compiled function run only while it is traced, not on later calls, so the stored value "
                      f"is a placeholder with no data. Return the tensor from the compiled function instead.")


def _live(t):
    """Whether traced `t` belongs to a trace running in this thread (or to the forward graph of a
    backward trace running in it)."""
    graph = t._ir.graph
    for interp in interpreters():
        tracer = interp if isinstance(interp, Tracer) else None
        while tracer is not None:
            if tracer.graph is graph:
                return True
            tracer = tracer.parent
    return False


def _layout_read(what, t):
    """The trace running in this thread depends on the layout of its inputs (guards.py); on the sizes
    too, unless only view() asked (what views at sizes of 2 or more views at 0 and 1) or contiguous()
    (a copy or the tensor itself, as a reshape: the same values, only an in-place update tells)."""
    for interp in interpreters():
        if isinstance(interp, Tracer):
            interp.layout_asked = True
            if what == "contiguous()":
                interp.took_reshape(t)
            else:
                interp.layout_sizes = interp.layout_sizes or what != "view()"


def _unit_dims_only(node):
    """Whether a reshape only adds or drops axes of size 1 (x[0], unsqueeze): a view whatever the
    layout, unlike a general reshape."""
    kept = [[n for n in v.shape if is_sym(n) or n != 1] for v in (node.inputs[0], node.out)]
    return len(kept[0]) == len(kept[1]) and all(map(same_size, *kept))


class Lifted:
    """A real tensor read by the trace: its graph input, its stand-in, where its value comes from.

    `source` is ("arg", k) for the k-th tensor argument, ("grad", k) for its .grad, ("captured",)
    for a tensor read through a closure, global, module or optimizer, ("grad_of", t) for the .grad of
    such a tensor t (read per call as t.grad: a call may find another tensor there, as eagerly after
    zero_grad() and backward()), ("const",) for a tensor made inside the trace (its array is
    `real._data`)."""
    __slots__ = ("real", "value", "standin", "source")

    def __init__(self, real, value, standin, source):
        self.real, self.value, self.standin, self.source = real, value, standin, source


class Tracer:
    """The interpreter of a function being traced into `graph` (see modes.py for the interface).
    A backward graph's tracer has the forward's as `parent`: forward values it reads are saved."""

    concrete = False

    def __init__(self, graph, parent=None, names=None):
        self.graph, self.parent = graph, parent
        self.lifted = {}           # id(real tensor) -> Lifted
        self.order = []            # Lifted, in graph-input order
        self.names = {} if names is None else names   # id(real tensor) -> preferred input name
        self.taken = (set(), 0)    # the names of the graph's first n inputs, and n
        self.grads = {}            # id(tensor) -> (tensor, .grad when the trace first touched it)
        self.written_first = set()  # id(tensor) of those whose .grad the trace assigned before reading it
        self.arg_grads = {}        # id(argument stand-in) -> (k, real argument, name)
        self.grad_of = {}          # id(a captured tensor's real .grad) -> that tensor, its owner
        self.saved = []            # backward graphs: the forward Values they read
        self._saved = {}
        self.loc = None            # while the engine runs a VJP: the forward op's file:line
        # storage, as eagerly: a tensor, its detach()/.data aliases and its views share one version
        # counter (the list _ver); an update through any of them is seen by all (see _current)
        self.roots = {}            # id(_ver) -> the traced tensor owning that storage
        self.owners = {}           # id(Value) -> the tensor whose storage held it first (.data aliases)
        self.views = {}            # id(view) -> (view, root's generation and value when it was taken)
        self.generation = {}       # id(root) -> how many in-place updates its storage has had
        self.storages = {}         # id(array of a lifted tensor) -> (stand-in owning it, the tensor)
        self.layout_asked = False  # contiguous(), is_contiguous(), stride() or view() was called
        self.layout_sizes = False  # one of them but view(): the answer may change with a size
        self.reshaped = self.updated = False   # a reshape (a view or a copy, as the layout decides), an update
        self.reshaped_roots, self.updated_roots = set(), set()     # id() of the storages' owners of each
        self.values = {}           # id(real tensor) -> (tensor, its values) for those read as Python values

    # ------------------------------------------------------------------ values
    def values_read(self, t):
        """Real tensor t's values were read as Python values (t.item(), t.numpy()): they are baked
        into the graph, so a compiled call compares them (the snapshot taken here) before it runs."""
        if type(t) is not Traced and id(t) not in self.values:
            self.values[id(t)] = (t, values_key(t))

    def lift(self, t, source=("captured",), name=None, shape=None):
        """The stand-in for `t` in this graph; real tensors become graph inputs on first use. `shape`:
        the shape it has in the graph where some sizes are symbols (symint.py), else t's own (strides,
        as every traced layout, are the numbers of the sizes seen: trace.py's hints)."""
        if type(t) is Traced:
            return self._current(t) if t._ir.graph is self.graph else self._from_parent(t)
        entry = self.lifted.get(id(t))
        if entry is not None:       # what its storage holds now (updated through a .data alias: a tied weight)
            return self._current(entry.standin)
        owner = self.grad_of.get(id(t)) if source[0] == "captured" else None
        if owner is not None:
            source, name = ("grad_of", owner), name or self.names.get(id(t)) or \
                (self.names[id(owner)] + ".grad" if id(owner) in self.names else None)
        if self.parent is not None and id(t) in self.parent.lifted:
            st = self._from_parent(self.parent.lifted[id(t)].standin)
        else:
            name = name or self.names.get(id(t)) or f"{'k' if source[0] == 'const' else 'c'}{len(self.order)}"
            taken = self._input_names()
            if name in taken:                  # e.g. a global and an argument of the same name
                name = next(f"{name}_{i}" for i in range(1, len(taken) + 2) if f"{name}_{i}" not in taken)
            value = self.graph.add_input(name, t._shape if shape is None else shape, t._dtype)
            st = Traced.of(value.shape, t._dtype, t._device, value, L.of_array(t._data))
            st._requires_grad = t.requires_grad
            first = self.storages.get(id(t._data)) if source[0] != "const" else None
            if first is None:
                self.roots[id(st._ver)] = st
                self.storages[id(t._data)] = (st, t)
                self.owners[id(value)] = st
            else:   # another tensor over the same array: one storage; a.detach() shares the version
                root, real = first          # counter too, a.data has its own (as eagerly)
                if t._ver is real._ver:
                    st._ver = root._ver
                self.owners[id(value)] = root
            entry = Lifted(t, value, st, source)
            self.order.append(entry)
            self.lifted[id(t)] = entry
        return self._current(st)         # first read after an update through another tensor over its array

    def _input_names(self):
        """The names of the graph's inputs (those added since the last call added to the set)."""
        names, n = self.taken
        inputs = self.graph.inputs
        if len(inputs) < n:
            names, n = set(), 0
        names.update(v.name for v in inputs[n:])
        self.taken = names, len(inputs)
        return names

    def _from_parent(self, t):
        """A backward graph reading a forward value: it becomes a saved input."""
        if self.parent is None or t._ir.graph is not self.parent.graph:
            raise escaped_error(t, f" at {location()}" if location() else "")
        st = self._saved.get(id(t._ir))
        node = t._ir.node
        if st is None and node is not None and node.op in ("const", "iota"):
            # a forward constant is re-emitted, not saved: the backward graph can fold it
            v = self.graph.add(node.op, [], node.attrs, t._shape, t._dtype, node.loc)
            st = self._saved[id(t._ir)] = Traced.of(t._shape, t._dtype, t._device, v)
        if st is None:
            v = self.graph.add_input(f"s{len(self.saved)}", t._shape, t._dtype)
            st = self._saved[id(t._ir)] = Traced.of(t._shape, t._dtype, t._device, v, t._layout())
            self.saved.append(t._ir)
        return st

    # ------------------------------------------------------------------ the interpreter
    def lift_inputs(self, inputs):
        graph = self.graph
        return tuple(self._current(t) if type(t) is Traced and t._ir.graph is graph else self.lift(t)
                     for t in inputs)

    def _root(self, t):
        """The traced tensor owning t's storage (of a view: its base's): by the shared version counter
        (views, detach), else by the value (.data aliases), else None."""
        if t._base is not None:
            t = t._base
        root = self.roots.get(id(t._ver))
        if root is None:
            owner = self.owners.get(id(t._ir))
            root = owner if owner is None else self.roots.get(id(owner._ver), owner)
        return root

    def _current(self, t):
        """t with the value its storage holds now: an alias (detach, .data) reads its root's latest
        value; a view taken before an in-place update of its base is taken again from the update."""
        root = self._root(t)
        if root is None or root is t:
            return t
        generation = self.generation.get(id(root), 0)
        if t._base is None:                # an alias reads what its storage holds since an update
            if generation:
                t._ir = root._ir
            return t
        view = self.views.get(id(t))
        if view is None or view[1] == generation:
            return t
        ops, v = [], t._ir                 # the view ops from the storage's value when it was taken
        while v is not view[2]:
            ops.append(v.node)
            v = v.node.inputs[0]
        if root._layout() is None and any(n.op == "reshape" and not _unit_dims_only(n) for n in ops):
            raise TraceError(f"a reshape taken (at {ops[-1].loc}) before an in-place update of its base is "
                             f"used after the update (at {location()}); whether it sees the update depends on "
                             f"the memory layout, which a compiled function does not know: take the reshape "
                             f"after the update, or clone() it before")
        v = root._ir
        for n in reversed(ops):
            v = self.graph.add(n.op, [v], n.attrs, n.out.shape, n.out.dtype, n.loc)
        t._ir = v
        self.views[id(t)] = (t, generation, root._ir)
        return t

    def apply(self, p, inputs, attrs, shape, dtype, dev):
        check_known_indices(self, p, inputs, attrs)         # indices the trace knows, as eagerly
        out = self.graph.add(p.name, [t._ir for t in inputs], attrs, shape, dtype, self.loc or location())
        view = p.kind == "view"
        if view:               # a reshape the layout cannot view is a copy, as eagerly
            if p.name == "reshape" and not _unit_dims_only(out.node):
                self.took_reshape(inputs[0])
            s = inputs[0]._layout()
            remapped = None if s is None else p.remap(hints(inputs[0]._shape), hints(shape), list(s), 0,
                                                      **hints(attrs))
            strides = None if s is None else tuple(remapped[0]) if remapped is not None else L.contiguous_strides(hints(shape))
            view = s is None or remapped is not None
        else:
            strides = L.of_result(p, [(hints(t._shape), t._layout(), t._dtype.np) for t in inputs], hints(shape),
                                  hints(attrs))
        out = Traced.of(shape, dtype, dev, out, strides)
        if view:   # traced views share their base's storage; in-place on them goes through it
            out._base = inputs[0]._base if inputs[0]._base is not None else inputs[0]
            out._view = view_of(inputs[0], p, attrs, out._base)
            out._ver = inputs[0]._ver
            root = self._root(out)
            if root is not None:   # the ops replay from the storage's value this chain started from
                before = self.views.get(id(inputs[0]))
                start = before[2] if before is not None else inputs[0]._ir
                self.views[id(out)] = (out, self.generation.get(id(root), 0), start)
        else:
            self.roots[id(out._ver)] = out
            self.owners[id(out._ir)] = out
        return out

    def constant(self, v, dtype, dev, shape=()):
        if not is_sym(v):           # a symbolic size (x.numel() in a mean) stays one, bound per call
            v = float(v) if dtype.is_floating_point else bool(v) if dtype.kind == 0 else int(v)
        out = self.graph.add("const", [], {"value": v}, shape, dtype, self.loc or location())
        return Traced.of(shape, dtype, dev, out)

    def iota(self, n, start, step, dtype, dev, requires_grad=False):
        """arange with a symbolic length (tensor/factories.py): an iota node of shape (n,)."""
        attrs = {"n": n, "start": start, "step": step, "dtype": dtype}
        out = Traced.of((n,), dtype, dev, self.graph.add("iota", [], attrs, (n,), dtype, self.loc or location()))
        out._requires_grad = requires_grad
        return out

    def constant_array(self, arr, dtype, dev, requires_grad=False):
        """A tensor made inside the trace: a `const` node when uniform, else a frozen graph input."""
        flat = arr.reshape(-1)
        if flat.size and (flat == flat[0]).all():
            return self.constant(flat[0].item(), dtype, dev, arr.shape)
        if type(arr) is np.ndarray and arr.ndim == 1 and dtype in (D.int32, D.int64) and not requires_grad and \
                flat.size > 1 and (np.diff(flat) == flat[1] - flat[0]).all():     # an arange: an iota node, no memory
            attrs = {"n": flat.size, "start": int(flat[0]), "step": int(flat[1] - flat[0]), "dtype": dtype}
            out = self.graph.add("iota", [], attrs, arr.shape, dtype, self.loc or location())
            return Traced.of(arr.shape, dtype, dev, out)
        real = Tensor._wrap(np.array(arr), dtype, dev)
        return self.lift(real, ("const",))

    def mutate(self, t, new):
        """In-place update of `t` with `new` (already of t's shape and dtype); returns the stand-in."""
        if t._base is not None:
            raise TraceError(f"in-place modification of a view inside a compiled function is not supported "
                             f"(at {location()}); write to the base tensor or compute the value out of place")
        st = self.lift(t)
        root = self._root(st)
        self.updated = True
        self.updated_roots.add(id(st if root is None else root))
        st._ir = self.lift(new)._ir
        if root is not None and root is not st:        # through an alias (detach, .data): the tensor
            root._ir = st._ir
        key = id(st if root is None else root)
        self.generation[key] = self.generation.get(key, 0) + 1
        self.owners[id(st._ir)] = st if root is None else root     # its storage holds the value now
        st._ver[0] += 1
        return st

    @property
    def layout_used(self):
        """Whether the trace depends on its inputs' layouts: it asked for one, or it took a reshape
        (a view or a copy) and updated a tensor (so which one matters)."""
        return self.layout_asked or self.reshaped and self.updated

    @property
    def layout_by_size(self):
        """Whether an answer the trace got about layouts may differ at another size of 2 or more
        (strides are worked out at the traced sizes): is_contiguous(), stride(), or a reshape's
        view-or-copy of a storage the trace also updates in place."""
        return self.layout_sizes or bool(self.reshaped_roots & self.updated_roots)

    def took_reshape(self, t):
        """A reshape or contiguous() of t: a view of its storage or a copy, as its layout decides."""
        self.reshaped = True
        root = self._root(t)
        self.reshaped_roots.add(id(t if root is None else root))

    def grad_access(self, t, write=False):
        """The tensor whose .grad field holds t's gradient while tracing, noting that .grad before the
        trace first reads or writes it. A tensor argument is one tensor however the function reaches
        it (the argument, a module, an optimizer): its stand-in holds the .grad, which starts as the
        argument's .grad, lifted as an input, on first access. A .grad the trace assigns before it
        reads it (zero_grad()'s None) does not depend on what it held: `written_first`."""
        e = self.lifted.get(id(t)) if type(t) is not Traced else None
        if e is not None and e.source[0] == "arg":
            t = e.standin
        if id(t) in self.grads:
            return t
        if write and type(t) is not Traced:     # a captured tensor's .grad: written back at every call
            self.written_first.add(id(t))
            self.grads[id(t)] = (t, t._grad)
            return t
        arg = self.arg_grads.get(id(t))
        if arg is not None and arg[1]._grad is not None:
            k, real, name = arg
            t._grad = self.lift(real._grad, ("grad", k), name=name + ".grad")
        elif arg is None and type(t) is not Traced and t._grad is not None and type(t._grad) is not Traced:
            self.grad_of[id(t._grad)] = t      # read per call as t.grad (lift), not as that object
        self.grads[id(t)] = (t, t._grad)
        return t

    def grad_owner(self, standin):
        """Where the engine accumulates a leaf's gradient: the real tensor the user code holds (a
        module parameter, a captured tensor), or the stand-in itself for tensor arguments."""
        for e in self.order:
            if e.standin is standin:
                return e.real if e.source[0] == "captured" else standin
        return standin

    def at(self, loc):
        self.loc = loc

    # ------------------------------------------------------------------ end of trace
    def grad_changes(self):
        """Restore every .grad the trace changed; returns [(tensor, grad before, grad after)]."""
        out = []
        for t, before in self.grads.values():
            after = t._grad
            t._grad = before
            if after is not before or id(t) in self.written_first:
                out.append((t, before, after))
        return out


def values_key(t):
    """A real tensor's dtype, shape and values, bit for bit (equal keys: the same values)."""
    a = np.ascontiguousarray(t._host("a guard"))
    return t._dtype.name, a.shape, a.tobytes()


def tracing():
    """Whether this thread is tracing a function (for a compiled function called inside another)."""
    return any(isinstance(i, Tracer) for i in interpreters())
