"""The IR: a Graph of Nodes in SSA form over typed Values (`dtype[shape]`)."""
from ..dtypes import DType


class Value:
    """An SSA value: its type, the node producing it (None for graph inputs), an input name."""

    __slots__ = ("shape", "dtype", "node", "name", "graph", "__weakref__")

    def __init__(self, shape, dtype, node=None, name=None, graph=None):
        assert isinstance(dtype, DType)
        self.shape, self.dtype, self.node, self.name, self.graph = tuple(shape), dtype, node, name, graph

    @property
    def type(self):
        return f"{self.dtype.short}[{','.join(map(str, self.shape))}]"

    def __repr__(self):
        return f"<Value {self.name or '?'}: {self.type}>"


class Node:
    """One primitive application: `out = op(*inputs) {attrs}`; `loc` is the user's file:line."""

    __slots__ = ("op", "inputs", "attrs", "out", "loc")

    def __init__(self, op, inputs, attrs, out, loc=None):
        self.op, self.inputs, self.attrs, self.out, self.loc = op, list(inputs), dict(attrs), out, loc
        out.node = self

    def __repr__(self):
        return f"<Node {self.op}>"


class Graph:
    """Inputs (named Values), nodes in execution order, outputs (Values, possibly inputs)."""

    def __init__(self, name="f"):
        self.name, self.inputs, self.nodes, self.outputs = name, [], [], []
        self.n_saved = 0        # the last n_saved outputs are values saved for the backward graph
        self.grads_of = None    # a backward graph: the forward input each output is the gradient of

    def add_input(self, name, shape, dtype):
        v = Value(shape, dtype, name=name, graph=self)
        self.inputs.append(v)
        return v

    def add(self, op, inputs, attrs, shape, dtype, loc=None):
        """Append a node; returns its output Value."""
        out = Value(shape, dtype, graph=self)
        self.nodes.append(Node(op, inputs, attrs, out, loc))
        return out

    def __str__(self):
        from .printer import print_graph
        return print_graph(self)

    def copy(self):
        """A structurally identical graph with fresh Values (passes rewrite copies)."""
        g = Graph(self.name)
        env = {id(v): g.add_input(v.name, v.shape, v.dtype) for v in self.inputs}
        for n in self.nodes:
            env[id(n.out)] = g.add(n.op, [env[id(i)] for i in n.inputs], n.attrs, n.out.shape, n.out.dtype, n.loc)
        g.outputs = [env[id(v)] for v in self.outputs]
        g.n_saved, g.grads_of = self.n_saved, self.grads_of
        return g
