"""Reverse mode: graph nodes, the iterative backward engine, version checks, retained gradients, hooks run
when a leaf's .grad is accumulated, and callbacks queued for the end of a backward pass."""
import threading
import weakref

from . import modes
from .broadcast import _quiet
from .hooks import Hooks
from .modes import _Mode, enable_grad, interpreter, is_grad_enabled, no_grad, set_grad_enabled  # noqa: F401


FREED_MESSAGE = (
    "Trying to backward through the graph a second time (or directly access saved tensors after "
    "they have already been freed). Saved intermediate values of the graph are freed when you call "
    ".backward() or tg.grad(). Specify retain_graph=True if you need to backward through the graph "
    "a second time or if you need to access saved tensors after calling backward.")


class GraphNode:
    """What every backward node shows (primitive nodes, custom Functions): PyTorch's repr and
    next_functions. Subclasses have `name()` and `edges`."""
    __slots__ = ()

    def __repr__(self):
        return f"<{self.name()}>"

    @property
    def next_functions(self):
        """One pair per input, as PyTorch's: (producer's node, output index), (AccumulateGrad, 0) for a
        leaf that requires grad, (None, 0) for an input that needs no gradient."""
        return tuple(e if isinstance(e, tuple) else (None, 0) if e is None else (AccumulateGrad.of(e), 0)
                     for e in self.edges)


class AccumulateGrad:
    """The node that stores a leaf's gradient into its .grad, as PyTorch's: `variable` is the leaf,
    and it has no next functions. One per leaf while it is referenced (`is` holds between walks)."""
    __slots__ = ("variable", "__weakref__")
    _of = weakref.WeakValueDictionary()

    def __init__(self, variable):
        self.variable = variable

    @classmethod
    def of(cls, leaf):
        node = cls._of.get(id(leaf))
        if node is None or node.variable is not leaf:
            node = cls._of[id(leaf)] = cls(leaf)
        return node

    next_functions = ()

    def name(self):
        return "AccumulateGrad"

    def __repr__(self):
        return "<AccumulateGrad>"


class Node(GraphNode):
    """One recorded primitive application: what its VJP needs, and where gradients go.

    `edges[i]` is the producer of input i: (node, output index), a leaf tensor (accumulate into
    .grad), or None when input i needs no gradient."""

    __slots__ = ("prim", "attrs", "shapes", "dtypes", "saved", "versions", "out", "out_version",
                 "edges", "freed", "n_out", "out_meta", "loc", "label", "retained", "__weakref__")

    def __init__(self, prim, inputs, attrs, out):
        self.prim, self.attrs, self.n_out, self.freed, self.loc, self.label = prim, attrs, 1, False, None, None
        self.retained = None
        self.shapes = [t._shape for t in inputs]
        self.dtypes = [t._dtype for t in inputs]
        save = prim.save
        save = range(len(inputs)) if save is None else save(len(inputs)) if callable(save) else save
        if isinstance(save, dict):  # {input i: inputs its VJP reads}: save only what a needed VJP reads
            save = sorted({j for i, js in save.items() if inputs[i]._requires_grad for j in js})
        self.saved = saved = [None] * len(inputs)
        self.versions = versions = {}
        for i in save:
            saved[i] = t = inputs[i]
            versions[i] = t._ver[0]
        self.out = out if prim.save_out else None
        self.out_version = out._ver[0]
        self.out_meta = [(out._shape, out._dtype, out._device)]
        self.edges = [_edge(t) for t in inputs]
        if _Mode.on_node is not None:
            _Mode.on_node(self, inputs, out)

    def x(self, i):
        return self.saved[i]

    def name(self):
        """PyTorch's node name without its overload digit ("MulBackward"); composite operations
        label their last node with the name PyTorch gives the whole operation ("MeanBackward")."""
        return self.label or self.prim.backward_name

    def check_saved(self):
        if self.freed:
            raise RuntimeError(FREED_MESSAGE)
        for i, v in self.versions.items():
            t = self.saved[i]
            if t._ver[0] != v:
                raise RuntimeError(_version_message(t, v, f"input {i} of {self.name()}"))
        if self.out is not None and self.out._ver[0] != self.out_version:
            raise RuntimeError(_version_message(self.out, self.out_version, f"output 0 of {self.name()}"))

    def apply(self, grads):
        """Input gradients for the output cotangents `grads` (one per output)."""
        g = grads[0]
        vjp = self.prim.vjp
        if callable(vjp):
            return vjp(self, g)
        return [rule(self, g) if e is not None and rule is not None else None for rule, e in zip(vjp, self.edges)]

    def release(self):
        self.saved, self.out, self.freed = None, None, True


def _version_message(t, expected, what):
    return (f"one of the variables needed for gradient computation has been modified by an inplace operation: "
            f"[{t.dtype} {list(t.shape)}], which is {what}, is at version {t._ver[0]}; expected version "
            f"{expected} instead. Clone the tensor before modifying it in place, or use an out-of-place op.")


def _edge(t):
    if not t._requires_grad:
        return None
    return (t.grad_fn, t._oi) if t.grad_fn is not None else t


def _toposort(roots):
    """Nodes reachable from `roots` in reverse topological order (outputs first), iteratively."""
    if len(roots) == 1:
        for e in roots[0].edges:
            if isinstance(e, tuple):
                break
        else:
            return roots            # one node whose inputs are all leaves
    order, seen, stack = [], set(), [(r, False) for r in roots]
    while stack:
        node, done = stack.pop()
        if done:
            order.append(node)
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.append((node, True))
        for e in node.edges:
            if isinstance(e, tuple) and id(e[0]) not in seen:
                stack.append((e[0], False))
    order.reverse()
    return order


def _leaf_edges(node):
    """Whether every input of `node` is a leaf or needs no gradient: the graph is this node alone."""
    for e in node.edges:
        if isinstance(e, tuple):
            return False
    return True


_POST_ACCUMULATE = {}      # id(leaf) -> (weak reference to the leaf, Hooks of hook(leaf))
TENSOR_HOOKS = {}          # id(tensor) -> (weak reference to it, Hooks of hook(grad)): Tensor.register_hook's


def _add_hook(registry, t, hook):
    """Register hook for tensor t in registry; the handle's remove() drops t's entry once it holds none,
    so the engine's fast paths come back."""
    key = id(t)
    entry = registry.get(key)
    if entry is None or entry[0]() is not t:
        entry = registry[key] = (weakref.ref(t, lambda _: registry.pop(key, None)), Hooks())
    hooks = entry[1]
    handle = hooks.add(hook)
    remove = handle.remove

    def remove_and_forget():
        remove()
        if not hooks and registry.get(key) is entry:
            del registry[key]
    handle.remove = remove_and_forget
    return handle


def add_hook(t, hook):
    """t.register_hook(hook): hook(grad) runs on t's gradient when backward computes it and may
    return a replacement; for a leaf, before it is accumulated into .grad."""
    return _add_hook(TENSOR_HOOKS, t, hook)


def register_post_accumulate_grad_hook(t, hook):
    """t.register_post_accumulate_grad_hook(hook): hook(t) runs each time a backward pass has accumulated
    t's gradient into t.grad (as soon as no later node of that pass can add to it), as PyTorch's."""
    if t.grad_fn is not None or not t._requires_grad:
        raise RuntimeError("post accumulate grad hooks cannot be registered on non-leaf tensors or tensors that "
                           "do not require grad")
    return _add_hook(_POST_ACCUMULATE, t, hook)


class _Callbacks(threading.local):
    def __init__(self):
        self.stack = []         # one list per backward pass running in this thread, innermost last


_callbacks = _Callbacks()


def queue_callback(fn):
    """Run fn() when the backward pass running now (in this thread) has accumulated every gradient, in
    the order queued (PyTorch's Variable._execution_engine.queue_callback)."""
    if not _callbacks.stack:
        raise RuntimeError("Final callbacks can only be installed during backward pass.")
    _callbacks.stack[-1].append(fn)


def _hooks_of(leaf, interp):
    """The post-accumulate hooks of the tensor that owns leaf's .grad (under a tracer, the real tensor a
    traced leaf stands for), and that tensor; ((), None) when it has none."""
    owner = leaf if interp is modes.eager else interp.grad_owner(leaf)
    entry = _POST_ACCUMULATE.get(id(owner))
    return (entry[1].values(), owner) if entry is not None and entry[0]() is owner else ((), None)


def _accumulate_leaf(leaf, g, create_graph, owned, interp):
    """Accumulate g into leaf.grad (after leaf's Tensor.register_hook hooks), then run the
    post-accumulate hooks of the tensor holding it."""
    if TENSOR_HOOKS and id(leaf) in TENSOR_HOOKS:
        hooked = _run_hooks(leaf, g)
        g, owned = hooked, owned and hooked is g          # a hook's result may be held elsewhere: copy it
    _into_grad(leaf, g, create_graph, owned, interp)
    hooks, owner = _hooks_of(leaf, interp) if _POST_ACCUMULATE else ((), None)
    for hook in list(hooks):
        hook(owner)


def _hooked_leaf_uses(order, interp):
    """{id(leaf): the number of nodes in `order` with an edge to it}, for leaves with post-accumulate
    hooks: their gradient is final, and accumulated at once, when the last of those nodes has run."""
    uses = {}
    for node in order:
        for e in node.edges:
            if e is not None and not isinstance(e, tuple) and (id(e) in uses or _hooks_of(e, interp)[0]):
                uses[id(e)] = uses.get(id(e), 0) + 1
    return uses


def _backward_one(node, g, retain_graph, create_graph):
    """run_backward, eagerly, for a graph of one node with one output whose inputs are leaves (a
    compiled call's, the usual case): the same steps without the bookkeeping of a graph."""
    prev_mode, _Mode.grad = _Mode.grad, bool(create_graph)
    _quiet.depth += 1
    try:
        node.check_saved()
        in_grads = node.apply([g])
        if not retain_graph:
            node.release()
    finally:
        _Mode.grad = prev_mode
        _quiet.depth -= 1
    owned, leaf_grads = getattr(node, "owned_grads", False), {}
    for e, g in zip(node.edges, in_grads):
        if e is not None and g is not None:
            prev = leaf_grads.get(id(e))      # a leaf twice among the inputs: its gradients sum
            leaf_grads[id(e)] = (e, g, owned) if prev is None else (e, prev[1] + g, True)
    for leaf, g, owned in leaf_grads.values():
        _accumulate_leaf(leaf, g, create_graph, owned, modes.eager)


def ones_backward(t, retain_graph):
    """`t.backward()` of one-element t with the implicit gradient by its node's shortcut, where it has
    one (`node.ones_backward(node, retain_graph)`: a compiled call's generated backward) and no
    interpreter follows the backward: True when it ran, False when run_backward must."""
    node = t.grad_fn
    fast = getattr(node, "ones_backward", None)
    return fast is not None and t._requires_grad and not _Mode.interpreters and not _POST_ACCUMULATE and \
        not TENSOR_HOOKS and \
        fast(node, bool(retain_graph))


def _accumulate(a, b):
    return b if a is None else a + b


def run_backward(outputs, grad_outputs, retain_graph, create_graph, inputs=None, allow_unused=False):
    """The backward engine. Accumulates into leaf .grad, or, with `inputs`, returns their gradients."""
    if inputs is not None:
        return _run(outputs, grad_outputs, retain_graph, create_graph, inputs, allow_unused)
    _callbacks.stack.append([])
    try:
        _run(outputs, grad_outputs, retain_graph, create_graph, inputs, allow_unused)
        for fn in _callbacks.stack[-1]:
            fn()
    finally:
        _callbacks.stack.pop()


def _run(outputs, grad_outputs, retain_graph, create_graph, inputs, allow_unused):
    interp = interpreter()
    hooked = interp is not modes.eager     # an interpreter that follows the backward (a tracer)
    sites = _hook_sites() if TENSOR_HOOKS else None
    if hooked:
        if sites is not None and inputs is None:
            raise RuntimeError("backward inside a compiled function while tensor hooks are registered "
                               "(Tensor.register_hook) is not supported: call backward() outside the compiled "
                               "function (hooks then run eagerly on the gradients it returns), or remove the hooks "
                               "(handle.remove())")
    elif inputs is None and len(outputs) == 1 and sites is None:
        node = outputs[0].grad_fn
        if node is not None and outputs[0]._requires_grad and node.n_out == 1 and grad_outputs[0] is not None \
                and not getattr(node, "retained", None) and _leaf_edges(node):
            return _backward_one(node, grad_outputs[0], retain_graph, create_graph)
    roots, pending, leaf_grads = [], {}, {}
    for out, g in zip(outputs, grad_outputs):
        if not out._requires_grad:
            raise RuntimeError("element 0 of tensors does not require grad and does not have a grad_fn")
        fn = out.grad_fn
        if fn is None:
            prev = leaf_grads.get(id(out))
            leaf_grads[id(out)] = (out, g, False) if prev is None else (out, prev[1] + g, True)
            continue
        slot = pending.get(id(fn))
        if slot is None:
            slot = pending[id(fn)] = [None] * fn.n_out
            roots.append(fn)
        prev = slot[out._oi]
        slot[out._oi] = g if prev is None else prev + g
    wanted = targets = None
    if inputs is not None:
        wanted, targets = {id(t) for t in inputs}, {}
        for t in inputs:
            if t.grad_fn is not None:
                targets[(id(t.grad_fn), t._oi)] = t
    results = {}
    prev_mode, _Mode.grad = _Mode.grad, bool(create_graph)
    _quiet.depth += 1              # VJP rules broadcast on purpose: no suspicious-broadcast warnings
    order = _toposort(roots)
    uses = _hooked_leaf_uses(order, interp) if _POST_ACCUMULATE and inputs is None else None
    done = None
    try:
        for node in order:
            if uses and done is not None:       # the node before this one has run: its leaves may be complete
                _leaves_done(done, uses, leaf_grads, create_graph, interp)
            done = node
            grads = pending.pop(id(node), None)
            if grads is None:
                continue
            if sites:
                grads = [g if g is None or (id(node), i) not in sites else _run_hooks(sites[(id(node), i)], g)
                         for i, g in enumerate(grads)]
            if targets:
                for i, g in enumerate(grads):
                    t = targets.get((id(node), i))
                    if t is not None and g is not None:
                        results[id(t)] = _accumulate(results.get(id(t)), g)
                        # a non-leaf input: its gradient is captured here; still propagate for others
            if len(grads) != 1 or grads[0] is None:     # the common case is one output with a gradient
                if all(g is None for g in grads):
                    continue
                if not getattr(node, "takes_absent", False):     # zeros for the outputs with none
                    like = next(g for g in grads if g is not None)
                    grads = [g if g is not None else _zeros(meta, like) for g, meta in zip(grads, node.out_meta)]
            if inputs is None and getattr(node, "retained", None):
                _retained_grads(node, grads, create_graph)
            node.check_saved()
            if hooked:
                interp.at(getattr(node, "loc", None))      # backward ops point at the forward op they differentiate
            in_grads = node.apply(grads)
            owned = getattr(node, "owned_grads", False)
            for e, g in zip(node.edges, in_grads):
                if e is None or g is None:
                    continue
                if isinstance(e, tuple):
                    slot = pending.get(id(e[0]))
                    if slot is None:
                        slot = pending[id(e[0])] = [None] * e[0].n_out
                    prev = slot[e[1]]
                    slot[e[1]] = g if prev is None else prev + g
                else:
                    prev = leaf_grads.get(id(e))
                    if prev is None:
                        leaf_grads[id(e)] = (e, g, owned)
                    else:                    # a sum is a new tensor: owned by the engine
                        leaf_grads[id(e)] = (e, prev[1] + g, True)
            if not retain_graph:
                node.release()
    finally:
        _Mode.grad = prev_mode
        _quiet.depth -= 1
    if inputs is None:
        for leaf, g, owned in leaf_grads.values():
            if g is not None:
                _accumulate_leaf(leaf, g, create_graph, owned, interp)
        return None
    for leaf, g, _ in leaf_grads.values():
        if id(leaf) in wanted:
            results[id(leaf)] = _run_hooks(leaf, g) if sites is not None and g is not None else g
    out = []
    for t in inputs:
        g = results.get(id(t))
        if g is None and not allow_unused:
            raise RuntimeError("One of the differentiated Tensors appears to not have been used in the graph. "
                               "Set allow_unused=True if this is the desired behavior.")
        out.append(g)
    return tuple(out)


def _leaves_done(done, uses, leaf_grads, create_graph, interp):
    """Node `done` has run: each hooked leaf it reaches whose every use has now run gets its gradient
    accumulated at once, so that its hooks run while the rest of the pass computes."""
    for e in done.edges:
        if e is not None and not isinstance(e, tuple) and id(e) in uses:
            uses[id(e)] -= 1
            if not uses[id(e)]:
                found = leaf_grads.pop(id(e), None)
                if found is not None:
                    _accumulate_leaf(found[0], found[1], create_graph, found[2], interp)


def _hook_sites():
    """{(id(node), output index): tensor} for the hooked tensors that are outputs of a node."""
    sites = {}
    for ref, _ in list(TENSOR_HOOKS.values()):
        t = ref()
        if t is not None and t.grad_fn is not None:
            sites[(id(t.grad_fn), t._oi)] = t
    return sites


def _run_hooks(t, g):
    entry = TENSOR_HOOKS.get(id(t))
    for hook in list(entry[1].values()) if entry is not None else ():
        out = hook(g)
        if out is not None:
            g = out
    return g


def retain(t):
    """t.retain_grad(): backward() stores the gradient of non-leaf `t` in t.grad (of t's current
    version: an in-place update registers the tensor again with its new node)."""
    node = t.grad_fn
    if getattr(node, "retained", None) is None:
        node.retained = []
    node.retained.append(weakref.ref(t))


def _retained_grads(node, grads, create_graph):
    for ref in node.retained:
        t = ref()
        if t is not None and t.grad_fn is node and t._retains_grad and grads[t._oi] is not None:
            _into_grad(t, grads[t._oi], create_graph)


def _zeros(meta, like):
    """The zero cotangent of an output nothing used, of the type of the cotangent `like`."""
    shape, dtype, dev = meta
    return type(like)._zeros(shape, dtype, dev)


def _into_grad(leaf, g, create_graph, owned=False, interp=None):
    """Accumulate into leaf.grad; without create_graph the stored gradient is a private copy (unless
    `owned`: freshly made for this leaf alone), so in-place updates of .grad never alias another
    tensor."""
    interp = interp or interpreter()
    if interp is not modes.eager:
        leaf = interp.grad_owner(leaf)  # a tracer decides which tensor owns a traced leaf's .grad
    if g._shape != leaf._shape:
        g = g.expand(*leaf._shape)
    if create_graph:
        leaf.grad = g if leaf.grad is None else leaf.grad + g
    elif (leaf._grad if interp is modes.eager else leaf.grad) is None:    # eager: .grad is the field
        if not owned or g._base is not None:
            g = g.detach().clone()
        elif g.grad_fn is not None or g._requires_grad or g._tangent is not None:
            g = g.detach()              # an owned plain tensor is stored as it is
        if interp is modes.eager:       # what the .grad setter does eagerly, its checks known to hold
            leaf._grad = g
        else:
            leaf.grad = g
    else:
        with no_grad():
            leaf.grad.add_(g)


_PUBLIC_ABOVE = {"Function": "custom_function", "FunctionCtx": "custom_function", "Variable": "custom_function",
                 "grad": "functional", "backward": "functional", "gradcheck": "functional"}


def __getattr__(name):
    """tg.autograd's public names defined by modules above the engine, imported on first use so the
    engine imports nothing from above."""
    mod = _PUBLIC_ABOVE.get(name)
    if mod is None:
        raise AttributeError(f"module 'tracegrad.autograd' has no attribute {name!r}")
    import importlib
    return getattr(importlib.import_module(f"{__package__}.{mod}"), name)
