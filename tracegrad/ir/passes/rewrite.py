"""A small helper for passes: rebuild a graph node by node, letting a rule replace values."""
from ..graph import Graph


class Builder:
    """Copies `src` into a new graph; `env` maps old value ids to new values."""

    def __init__(self, src):
        self.src, self.g, self.env = src, Graph(src.name), {}
        for v in src.inputs:
            self.env[id(v)] = self.g.add_input(v.name, v.shape, v.dtype)

    def get(self, v):
        return self.env[id(v)]

    def emit(self, op, inputs, attrs, shape, dtype, loc=None):
        return self.g.add(op, inputs, attrs, shape, dtype, loc)

    def copy(self, node, inputs=None):
        return self.emit(node.op, inputs if inputs is not None else [self.get(i) for i in node.inputs],
                         node.attrs, node.out.shape, node.out.dtype, node.loc)

    def finish(self):
        self.g.outputs = [self.get(v) for v in self.src.outputs]
        return self.g
