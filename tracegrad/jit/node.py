"""The autograd node of a compiled call: its backward runs the compiled backward graph."""
from operator import attrgetter

from ..autograd import GraphNode, _Mode
from ..ops import PRIMS
from ..tensor import Tensor
from .check import checked_run
from ..backends.cuda.run import DeviceFresh, to_host
from .writeback import Fresh

_data_of = attrgetter("_data")
_wrap = Tensor._wrap            # bound once (a classmethod binds at every attribute read)


REGENERATE = object()   # a node's saved values, not kept: recomputed from its `regen` when read


class CompiledNode(GraphNode):
    """What the engine needs of a compiled call, and nothing more: its edges, the saved values, the
    forward inputs' versions (the backward may read any of them), and apply()."""
    __slots__ = ("entry", "_saved", "freed", "out_meta", "n_out", "reals", "watched", "versions", "edges",
                 "const_arrays", "retained", "ones_backward", "ahead", "regen", "__weakref__")
    owned_grads = True     # each gradient it returns is a fresh array, safe to store as .grad
    takes_absent = True    # the engine passes None for an output without a cotangent (apply_some)
    loc = None             # no forward op to point at

    def __init__(self, entry, saved, reals, watched, versions, edges):
        """saved: the forward's arrays the backward reads; reals: the tensors it returns gradients
        for; watched: the inputs and results it reads (entry.watch; an in-place change of one before
        backward() raises eager's error), `versions` their versions now; edges: autograd's edge to
        each of reals."""
        self.entry, self._saved, self.freed, self.retained, self.regen = entry, saved, False, None, None
        self.out_meta, self.n_out = entry.diff_meta, entry.n_diff
        self.reals, self.watched, self.versions, self.edges = reals, watched, versions, edges
        self.const_arrays = [e.real._data for e in entry.bwd_inputs] if entry.bwd_inputs else ()
        # the engine's shortcut for backward() of a one-element result: the entry's generated backward
        # (callgen.straight_backward; it returns False when the engine must run), or None
        self.ones_backward = entry.backward
        self.ahead = None      # the gradients of a unit cotangent, computed with the forward (jit/joined.py)

    @property
    def saved(self):
        """The forward's arrays the backward reads; a joined call that computed the gradients with its
        forward kept none (jit/joined.py), and a use other than backward() of the result (retain_graph,
        an explicit gradient, autograd.grad, a non-leaf input) recomputes them here."""
        if self._saved is REGENERATE:
            self._saved = self.regenerate()
        return self._saved

    @saved.setter
    def saved(self, value):
        self._saved = value

    def regenerate(self):
        """The saved values, from the forward program run again on the call's input arrays (the same
        program on the same arrays: the same bits). An input changed in place since the call, which
        eager's backward might not have read, cannot be recomputed from: eager's error, saying so."""
        arrays, counters, versions = self.regen
        for a, c, v in zip(arrays, counters, versions):
            if c[0] != v:
                raise RuntimeError(
                    f"one of the variables needed for gradient computation has been modified by an inplace "
                    f"operation: [{a.dtype} {list(a.shape)}], an input of compiled {self.entry.name}, is at version "
                    f"{c[0]}; expected version {v} instead. (This call computed its gradients with its forward and "
                    f"kept no intermediate values; a backward other than backward() of its result recomputes them "
                    f"from the inputs. Run that backward before updating the input in place.)")
        return self.entry.run_fwd(list(arrays))[self.entry.saved_at:]

    @classmethod
    def of_call(cls, entry, leaves, saved, inputs, results):
        """The node of a call with these leaves, input tensors and results (Entry.call's general path;
        callgen.py writes the same steps out per signature)."""
        idx = entry.bwd_arg_targets
        reals = [leaves[k] for k in idx] if idx is not None else \
            [leaves[s[1]] if s[0] == "arg" else s[1] for s in entry.bwd_targets]
        watched = [inputs[i] for i in entry.watch[0]] + [results[k] for k in entry.watch[1]]
        edges = [None if not t._requires_grad else t if t.grad_fn is None else (t.grad_fn, t._oi) for t in reals]
        return cls(entry, saved, reals, watched, [t._ver[0] for t in watched], edges)

    def name(self):
        return f"Compiled{''.join(w.capitalize() for w in self.entry.name.split('_'))}Backward"

    def __repr__(self):
        return f"<{self.name()}>"

    def check_saved(self):
        if self.freed:
            raise RuntimeError("Trying to backward through the graph of a compiled call a second time; specify "
                               "retain_graph=True on the first backward if you need to.")
        n_inputs = len(self.entry.watch[0])
        for i, (t, v) in enumerate(zip(self.watched, self.versions)):
            if t._ver[0] != v:
                what = "an input" if i < n_inputs else "a result"
                raise RuntimeError(f"one of the variables needed for gradient computation has been modified by an "
                                   f"inplace operation: [{t.dtype} {list(t.shape)}], {what} of compiled "
                                   f"{self.entry.name}, is at version {t._ver[0]}; expected version {v} instead.")

    def apply(self, grads):
        if self.n_out > 1 and any(g is None for g in grads):
            return self.apply_some(grads)
        return self.entry.apply(self, grads)

    def apply_general(self, grads):
        """apply(), for any entry (callgen.py writes it out per signature for the common one)."""
        entry = self.entry
        return self._run(grads, entry.run_bwd, entry.programs, entry.bwd, entry.bwd_fresh)

    def apply_some(self, grads):
        """apply() when some outputs have no cotangent (None: backward() started from the others
        only): the backward of the present ones alone (ir/passes/cotangents.py), so nothing only the
        absent ones lead to is computed, and the inputs only they reach get None, as eagerly."""
        programs, graph, run, absent = self.entry.partial_backward(tuple(g is not None for g in grads))
        like = next(g for g in grads if g is not None)
        grads = [g if g is not None else type(like)._zeros(shape, dtype, dev)       # unread by `graph`
                 for g, (shape, dtype, dev) in zip(grads, self.out_meta)]
        outs = self._run(grads, run, programs, graph, frozenset())
        return [None if j in absent else g for j, g in enumerate(outs)]

    def _run(self, grads, run, programs, graph, known):
        """The gradients of self.reals: backward graph `graph` run (`run`; in check mode its
        `programs` against the interpreter) on the cotangents, the saved values and the constants;
        an output not among `known` fresh ones may be an input passed through, and is copied."""
        if _Mode.grad or _Mode.interpreters:
            raise_double_backward(self.entry.name)
        entry = self.entry
        arrays = list(map(_data_of, grads))
        arrays += self.saved
        arrays += self.const_arrays
        if entry.on_device:
            arrays = entry.device_bwd_inputs(arrays)
        if entry.check and (programs is not None or not entry.on_device):
            outs = checked_run(programs, 1, graph, arrays, entry.sizes)
        else:
            outs = run(arrays)
        if entry.host_grads:
            outs = to_host(outs, entry.host_grads)
        fresh = (DeviceFresh if entry.on_device else Fresh)(arrays) if len(known) < len(outs) else None
        if fresh is None:
            wrapped = []
            for o, t in zip(outs, self.reals):
                wrapped.append(_wrap(o, t._dtype, t._device))
            return wrapped
        return [Tensor._wrap(o if j in known else fresh(o), t._dtype, t._device)
                for j, (o, t) in enumerate(zip(outs, self.reals))]

    def release(self):
        self.saved, self.freed, self.regen = None, True, None


def raise_double_backward(name):
    """The backward of a compiled call runs compiled code on arrays: nothing it computes is recorded
    for a second backward (create_graph=True) or carries a tangent (under tg.jvp)."""
    if _Mode.grad:
        raise RuntimeError(f"create_graph=True (double backward) through compiled function {name} "
                           f"is not supported; call the function without tg.compile for higher-order grads")
    raise RuntimeError(f"forward mode (tg.jvp) over the backward of compiled function {name} (a Hessian-vector "
                       f"product) is not supported: its gradients would carry no tangents. Call the function "
                       f"without tg.compile there, or take the gradient inside the compiled function")


class RefusedBackward:
    """The autograd node of a compiled call whose outputs require grad but pass none to its inputs:
    backward() does nothing, or (message) raises eager's error where the backward would read a
    value the call updated in place, as the eager function would at that point."""

    def __init__(self, message, outputs):
        self.message, self.edges = message, []
        self.out_meta = [(t._shape, t._dtype, t._device) for t in outputs]
        self.n_out = len(outputs)

    def name(self):
        return "RefusedCompiledBackward"

    def check_saved(self):
        if self.message:
            raise RuntimeError(self.message)

    def apply(self, grads):
        self.check_saved()
        return []

    def release(self):
        pass


def watch_plan(traced, fwd, saved_at, n_user, updates):
    """(input positions, graph output positions) whose tensors must not change before backward():
    those sharing memory with a value eager's backward would save (eager's version counter is one
    per storage: the traced backward reads a value over the same storage: the input, what an update
    inside the call left in it, the result or what it views), and those sharing it with a value the
    compiled backward reads (a saved array over an input, its updated memory or a result)."""
    eager = {id(_storage(v)) for v in traced.outputs[saved_at:]}
    compiled = {id(_storage(v)) for v in fwd.outputs[saved_at:]}

    def read(j):           # graph output j's storage is read by either backward
        return id(_storage(traced.outputs[j])) in eager or id(_storage(fwd.outputs[j])) in compiled
    new_value = {ii: oi for oi, ii in updates}
    inputs = [i for i in range(len(traced.inputs)) if id(traced.inputs[i]) in eager or id(fwd.inputs[i]) in compiled
              or i in new_value and read(new_value[i])]
    return inputs, [j for j in range(n_user) if read(j)]


def _storage(v):
    """The value whose memory v views (through view primitives): v itself when not a view."""
    while True:
        n = v.node
        if n is None or len(n.inputs) != 1 or PRIMS.get(n.op) is None or PRIMS[n.op].kind != "view":
            return v
        v = n.inputs[0]
