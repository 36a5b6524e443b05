"""The autograd graph behind an eager tensor, as data: every node (op, shape, dtype), the leaves and
constants feeding it, the forward value of each box where it can be known, and the backward pass
replayed node by node with the same VJP rules `backward()` uses (nothing is accumulated into .grad)."""
import weakref

import numpy as np

from ..autograd import _toposort
from ..broadcast import quiet
from ..modes import _thread, no_grad

_KEPT = weakref.WeakKeyDictionary()      # autograd node -> (input arrays, output array), under record()


class record:
    """`with tg.viz.record(): loss = model(x)` keeps a copy of every input and output of the autograd
    nodes made inside, for as long as the graph lives, so `draw` and `backward_steps` can show every
    forward value. Without it they show the values the graph keeps anyway (leaves, the result, tensors
    saved for backward, and what can be recomputed from those) and mark the others "not kept"."""

    def __enter__(self):
        self._prev, _thread.on_node = _thread.on_node, _keep
        return self

    def __exit__(self, *exc):
        _thread.on_node = self._prev


def _keep(node, inputs, out):
    if out._data is not None and all(t._data is not None for t in inputs):
        _KEPT[node] = ([np.array(t._data) for t in inputs], np.array(out._data))


class Box:
    """One box of the picture: an op's output, a leaf tensor, or a constant (an input needing no grad).
    `inputs` are (key of the producing box, input index) pairs; `value`/`grad` NumPy arrays or None."""
    __slots__ = ("key", "kind", "op", "shape", "dtype", "value", "grad", "inputs", "node", "out_index", "name")

    def __init__(self, key, kind, op, shape, dtype, value=None, grad=None, node=None, out_index=0, name=None):
        self.key, self.kind, self.op, self.shape, self.dtype = key, kind, op, tuple(shape), dtype
        self.value, self.grad, self.node, self.out_index, self.name = value, grad, node, out_index, name
        self.inputs = []


class AutogradGraph:
    """The boxes reachable from `root` in forward order (inputs before the ops that read them)."""

    def __init__(self, root, names=None):
        if not hasattr(root, "grad_fn"):
            raise TypeError(f"expected a tracegrad Tensor, got {type(root).__name__}")
        self.root, self.boxes, self._by_key = root, [], {}
        names = {id(t): n for n, t in (names or {}).items()}
        self._names = names
        if root.grad_fn is None:
            self.root_key = self._tensor_box(root, "leaf" if root.requires_grad else "const").key
            return
        nodes = _toposort([root.grad_fn])[::-1]
        for node in nodes:                                  # the ops' own boxes first, so inputs can point at them
            for oi, (shape, dtype, _) in enumerate(node.out_meta):
                op = _op_title(node, oi)
                key = f"n{id(node)}_{oi}"
                self._add(Box(key, "op", op, shape, dtype, node=node, out_index=oi))
        for node in nodes:
            for i, edge in enumerate(node.edges):
                if isinstance(edge, tuple):
                    src = self._by_key[f"n{id(edge[0])}_{edge[1]}"]
                elif edge is not None:
                    src = self._tensor_box(edge, "leaf")
                else:
                    src = self._const_box(node, i)
                if src is None:
                    continue
                for oi in range(node.n_out):
                    self._by_key[f"n{id(node)}_{oi}"].inputs.append((src.key, i))
        self.root_key = f"n{id(root.grad_fn)}_{root._oi}"
        self.boxes.sort(key=lambda b: {"leaf": 0, "const": 0, "op": 1}[b.kind])   # stable: ops keep their order
        self._fill_values()

    def box(self, key):
        return self._by_key[key]

    def _add(self, box):
        self.boxes.append(box)
        self._by_key[box.key] = box
        return box

    def _tensor_box(self, t, kind):
        key = f"t{id(t)}"
        if key not in self._by_key:
            value = t._data if t._data is not None else None
            self._add(Box(key, kind, "leaf" if kind == "leaf" else "const", t.shape, t.dtype, value=value,
                          grad=t.grad._data if t.grad is not None else None, name=self._names.get(id(t))))
        return self._by_key[key]

    def _const_box(self, node, i):
        """An input that needs no gradient: drawn when the node kept it (saved for backward) or knows its type."""
        saved = getattr(node, "saved", None)
        t = saved[i] if isinstance(saved, list) and i < len(saved) else None
        if t is not None and hasattr(t, "_data"):
            return self._tensor_box(t, "const")
        shapes, dtypes = getattr(node, "shapes", None), getattr(node, "dtypes", None)
        if shapes is None:
            return None
        return self._add(Box(f"c{id(node)}_{i}", "const", "const", shapes[i], dtypes[i]))

    def _fill_values(self):
        """Forward values: the root's, each node's kept output, inputs saved for backward, then every
        op whose inputs are all known is recomputed with its own NumPy implementation."""
        self._by_key[self.root_key].value = self.root._data
        for b in self.boxes:
            node = b.node
            if node is None:
                continue
            kept = _KEPT.get(node) if b.out_index == 0 else None
            if kept is not None:
                b.value = kept[1]
            out = getattr(node, "out", None)
            if b.value is None and out is not None and getattr(out, "_data", None) is not None:
                b.value = out._data
            saved = node.saved if getattr(node, "prim", None) is not None else None   # a primitive's saved inputs
            for src, i in b.inputs:
                arr = kept[0][i] if kept is not None else None
                if arr is None and saved is not None and getattr(saved[i], "_data", None) is not None:
                    arr = saved[i]._data
                if arr is not None and self._by_key[src].value is None:
                    self._by_key[src].value = arr
        for b in self.boxes:
            if b.value is None and b.kind == "op" and getattr(b.node, "prim", None) is not None:
                args = [self._by_key[src].value for src, _ in b.inputs]
                if len(args) == len(b.node.edges) and all(a is not None for a in args):
                    b.value = np.asarray(b.node.prim.impl(*args, **b.node.attrs)).astype(b.dtype.np, copy=False)

    def steps(self, gradient=None):
        """The backward pass, replayed: a list of events in order, each a dict with "kind" ("seed": the
        root's gradient; "grad": an op's output gradient, complete; "send": a first contribution to an
        input; "accumulate": one added to earlier ones), "key" (the box), "via" (the backward node),
        "input" (its input index) and "array" (the gradient, or the sum so far). Reads saved tensors;
        never writes .grad."""
        root = self.root
        if root.grad_fn is None:
            raise ValueError("this tensor is a leaf: there is no backward pass to step through")
        if gradient is None:
            if root.numel() != 1:
                raise RuntimeError("grad can be implicitly created only for scalar outputs; pass gradient= "
                                   f"(a tensor of shape {tuple(root.shape)})")
            from ..tensor import ones_like
            gradient = ones_like(root)
        events = [dict(kind="seed", key=self.root_key, via=None, input=None, array=gradient._data)]
        pending = {id(root.grad_fn): [None] * root.grad_fn.n_out}
        pending[id(root.grad_fn)][root._oi] = gradient
        leaf_sums = {}
        with no_grad(), quiet():
            for node in _toposort([root.grad_fn]):
                grads = pending.pop(id(node), None)
                if grads is None or all(g is None for g in grads):
                    continue
                for oi, g in enumerate(grads):
                    if g is not None:
                        key = f"n{id(node)}_{oi}"
                        self._by_key[key].grad = g._data
                        events.append(dict(kind="grad", key=key, via=node.name(), input=None, array=g._data))
                grads = [g if g is not None else _zeros(meta) for g, meta in zip(grads, node.out_meta)]
                node.check_saved()
                for i, (edge, g) in enumerate(zip(node.edges, node.apply(grads))):
                    if edge is None or g is None:
                        continue
                    if isinstance(edge, tuple):
                        slot = pending.setdefault(id(edge[0]), [None] * edge[0].n_out)
                        prev, key = slot[edge[1]], f"n{id(edge[0])}_{edge[1]}"
                        total = slot[edge[1]] = g if prev is None else prev + g
                    else:
                        key = f"t{id(edge)}"
                        prev = leaf_sums.get(key)
                        total = leaf_sums[key] = g if prev is None else prev + g
                        self._by_key[key].grad = total._data
                    events.append(dict(kind="send" if prev is None else "accumulate", key=key, via=node.name(),
                                       input=i, array=total._data))
        return events

    def _title(self, key):
        b = self._by_key[key]
        return b.name or (b.op if b.kind == "op" else b.kind)


def _op_title(node, oi):
    """The primitive's name; for the node of a compiled call, "compiled NAME" and which output."""
    prim = getattr(node, "prim", None)
    if prim is not None:
        return prim.name
    entry = getattr(node, "entry", None)
    title = f"compiled {entry.name}" if entry is not None else node.name()
    return f"{title} [{oi}]" if node.n_out > 1 else title


def _zeros(meta):
    from ..tensor import zeros
    shape, dtype, dev = meta
    return zeros(shape, dtype=dtype, device=dev)


def summary(arr, width=4):
    """A short text for an array: its values when there are at most 4, else min/mean/max."""
    if arr is None:
        return "?"
    a = np.asarray(arr)
    if a.size == 0:
        return "empty"
    if a.dtype == np.bool_:
        return "[" + ", ".join(str(v) for v in a.ravel()[:4]) + (", ...]" if a.size > 4 else "]") \
            if a.ndim else str(bool(a))
    if a.ndim == 0:
        return _num(a.item(), width)
    if a.size <= 4:
        return "[" + ", ".join(_num(v, width) for v in a.ravel().tolist()) + "]"
    f = a.astype(np.float64)
    return f"min {_num(f.min(), width)} mean {_num(f.mean(), width)} max {_num(f.max(), width)}"


def _num(v, width):
    if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
        return str(int(v))
    return f"{float(v):.{width}g}"
