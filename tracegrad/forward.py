"""Forward mode: the interpreter of `tg.jvp`. Tensors carry a tangent (`_tangent`); each primitive
applied to a tensor with a tangent gets its output's tangent from the primitive's JVP rule.

It sits on this thread's interpreter stack above whatever computes the values (eager, or a tracer
when tg.jvp runs inside a compiled function) and hands every value computation to it."""
from .modes import interpreter, interpreting


class Forward:
    """Pushed by `tg.jvp` for the call of the function; everything but tangents goes to `below`."""

    def __init__(self):
        self.below = interpreter()
        self.concrete = self.below.concrete

    def lift_inputs(self, inputs):
        return self.below.lift_inputs(inputs)

    def apply(self, p, inputs, attrs, shape, dtype, dev):
        out = self.below.apply(p, inputs, attrs, shape, dtype, dev)
        if any(t._tangent is not None for t in inputs):
            out._tangent = _jvp(p, inputs, attrs, out)
        return out

    def constant(self, v, dtype, dev, shape=()):
        return self.below.constant(v, dtype, dev, shape)

    def constant_array(self, arr, dtype, dev, requires_grad=False):
        return self.below.constant_array(arr, dtype, dev, requires_grad)

    def iota(self, n, start, step, dtype, dev, requires_grad=False):
        return self.below.iota(n, start, step, dtype, dev, requires_grad)     # arange(B): no tangent

    def lift(self, t):
        return self.below.lift(t)

    def mutate(self, t, new):
        return self.below.mutate(t, new)

    def grad_access(self, t, write=False):
        return self.below.grad_access(t, write)

    def grad_owner(self, leaf):
        return self.below.grad_owner(leaf)

    def at(self, loc):
        self.below.at(loc)


def forward_mode():
    """`with forward_mode():` propagates tangents through the block's operations."""
    return interpreting(Forward())


class _JvpCtx:
    """What a JVP rule sees: the same interface as an autograd node."""
    __slots__ = ("prim_name", "attrs", "shapes", "dtypes", "xs", "out", "out_shape")

    def __init__(self, p, inputs, attrs, out):
        self.prim_name, self.attrs, self.xs, self.out, self.out_shape = p.name, attrs, inputs, out, out._shape
        self.shapes, self.dtypes = [t._shape for t in inputs], [t._dtype for t in inputs]

    def x(self, i):
        return self.xs[i]


def _jvp(p, inputs, attrs, out):
    if not p.differentiable or not out.dtype.is_floating_point:
        return None
    ts = [t._tangent for t in inputs]
    plain = [_untangled(t) for t in inputs]
    t = p.jvp(_JvpCtx(p, plain, attrs, _untangled(out)), ts)
    if t is not None and t.shape != out.shape:
        t = t.expand(*out.shape)
    return t


def _untangled(t):
    """`t` without its tangent, so a JVP rule's own ops do not recurse into forward mode."""
    return t if t._tangent is None else t._alias()
