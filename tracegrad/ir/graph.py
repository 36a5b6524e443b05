"""The IR: a Graph of Nodes in SSA form over typed Values (`dtype[shape]`); a size in a shape or an
attribute is an int or a symbolic size (symint.SymInt, printed `f32[B,784]`)."""
from ..dtypes import DType
from ..symint import SymInt, bind, free_symbols


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

    def symbols(self):
        """The symbol names in the shapes of the graph's inputs and nodes."""
        out = set()
        for v in self.inputs:
            out |= free_symbols(v.shape)
        for n in self.nodes:
            out |= free_symbols(n.out.shape) | _attr_symbols(n.attrs)
        return frozenset(out)

    def substitute(self, sizes):
        """A copy with the symbols `sizes` {name: int} binds replaced by their values (all bound:
        shapes and attributes of plain ints)."""
        g = Graph(self.name)
        env = {id(v): g.add_input(v.name, bind_sizes(v.shape, sizes), v.dtype) for v in self.inputs}
        for n in self.nodes:
            attrs = {k: bind_sizes(a, sizes) for k, a in n.attrs.items()}
            if n.op == "const" and isinstance(n.attrs["value"], SymInt) and not isinstance(attrs["value"], SymInt):
                attrs["value"] = float(attrs["value"]) if n.out.dtype.is_floating_point else attrs["value"]
            env[id(n.out)] = g.add(n.op, [env[id(i)] for i in n.inputs], attrs, bind_sizes(n.out.shape, sizes),
                                   n.out.dtype, n.loc)
        g.outputs = [env[id(v)] for v in self.outputs]
        g.n_saved, g.grads_of = self.n_saved, self.grads_of
        return g


def bind_sizes(x, sizes):
    """An attribute or shape with the symbols `sizes` binds replaced (tuples and lists item by item)."""
    if isinstance(x, SymInt):
        return bind(x, sizes)
    if type(x) in (tuple, list):
        return type(x)(bind_sizes(a, sizes) for a in x)
    return x


def _attr_symbols(attrs):
    return frozenset().union(*(free_symbols(a) if isinstance(a, (SymInt, tuple, list)) else frozenset()
                               for a in attrs.values())) if attrs else frozenset()
