"""tg.autograd.Function: an operation with a user-written forward and backward, as PyTorch's.

`forward` runs without recording; its outputs get one autograd node whose backward calls the
user's `backward` with tracegrad tensors. The same backward therefore runs on eager tensors, builds
a differentiable graph under `create_graph=True`, and inside `@tg.compile` runs on traced values, so
it becomes ops of the backward IR like any primitive's VJP rule.
"""
from . import dtypes as D
from .autograd import FREED_MESSAGE, GraphNode, _edge, _version_message
from .broadcast import BroadcastError, broadcast_shapes, unbroadcast, user_frame
from .device import CPU
from .modes import _Mode, interpreter, no_grad
from .tensor import Tensor


class FunctionCtx:
    """The `ctx` handed to forward and backward: saved tensors and any attributes the user sets."""

    def __init__(self, needs_input_grad):
        self.needs_input_grad = needs_input_grad
        self.materialize_grads = True
        self._saved, self._versions, self._node = (), (), None
        self._non_differentiable, self._dirty = set(), set()

    def save_for_backward(self, *tensors):
        for t in tensors:
            if t is not None and not isinstance(t, Tensor):
                raise TypeError(f"save_for_backward can only save tensors (or None), but got "
                                f"{type(t).__name__}; keep other values as attributes of ctx instead")
        self._saved = tensors

    @property
    def saved_tensors(self):
        if self._node is not None:
            self._node.check_saved()
        return tuple(self._saved)

    def mark_non_differentiable(self, *tensors):
        self._non_differentiable.update(id(t) for t in tensors)

    def mark_dirty(self, *tensors):
        self._dirty.update(id(t) for t in tensors)

    def set_materialize_grads(self, value):
        self.materialize_grads = bool(value)


class Function:
    """Subclass with static `forward(ctx, *args)` and `backward(ctx, *grad_outputs)` (or PyTorch 2's
    `forward(*args)` plus `setup_context(ctx, inputs, output)`), then call `MyFn.apply(*args)`.

    `backward` returns one gradient per forward argument (None where there is none); a gradient of a
    broadcastable shape is summed down to its input's shape, and cast to its dtype, as PyTorch does."""

    @staticmethod
    def forward(ctx, *args, **kwargs):
        raise NotImplementedError("You must implement the forward function for custom autograd.Function.")

    @staticmethod
    def setup_context(ctx, inputs, output):
        raise NotImplementedError("setup_context is not implemented.")

    @staticmethod
    def backward(ctx, *grad_outputs):
        raise NotImplementedError("You must implement either the backward or vjp method for your custom "
                                  "autograd.Function to use it with backward mode AD.")

    vjp = backward

    @staticmethod
    def jvp(ctx, *grad_inputs):
        raise NotImplementedError("You must implement the jvp function for custom autograd.Function to use it "
                                  "with forward mode AD.")

    def __init__(self, *args, **kwargs):
        raise RuntimeError(f"{type(self).__name__}: custom autograd.Function is not instantiated; call "
                           f"{type(self).__name__}.apply(...) instead")

    @classmethod
    def apply(cls, *args, **kwargs):
        interp = interpreter()        # a tracer lifts real tensors read by a traced function as graph inputs
        args = tuple(interp.lift(a) if isinstance(a, Tensor) else a for a in args)
        needs = tuple(isinstance(a, Tensor) and a.requires_grad for a in args)
        ctx = FunctionCtx(needs)
        record = _Mode.grad and any(needs)
        edges = [_edge(a) if isinstance(a, Tensor) else None for a in args] if record else None
        tangents = [a._tangent if isinstance(a, Tensor) else None for a in args]     # under tg.jvp
        if all(t is None for t in tangents):
            tangents = None
        with no_grad():
            plain = [_untangled(a) for a in args] if tangents is not None else args
            if cls.setup_context is not Function.setup_context:
                out = cls.forward(*plain, **kwargs)
                cls.setup_context(ctx, tuple(plain), out)
            else:
                out = cls.forward(ctx, *plain, **kwargs)
        single = not isinstance(out, tuple)
        outs = [_fresh_output(o, args, ctx) for o in ((out,) if single else out)]
        if record:
            node = FunctionNode(cls, ctx, edges, args, outs)
            for oi, o in enumerate(outs):
                if isinstance(o, Tensor) and o._dtype.is_floating_point and id(o) not in ctx._non_differentiable:
                    o._requires_grad, o.grad_fn, o._oi = True, node, oi
        if tangents is not None:
            _forward_mode(cls, ctx, tangents, outs)
        return outs[0] if single else tuple(outs)


def _untangled(a):
    if not isinstance(a, Tensor) or a._tangent is None:
        return a
    u = a.detach()
    u._tangent = None
    return u


def _fresh_output(o, args, ctx):
    """An input returned unchanged becomes a new tensor sharing its data (PyTorch returns a view),
    unless forward modified it in place and said so with ctx.mark_dirty."""
    if isinstance(o, Tensor) and id(o) not in ctx._dirty and any(o is a for a in args):
        return o.detach()
    return o


def _forward_mode(cls, ctx, tangents, outs):
    res = cls.jvp(ctx, *tangents)
    res = res if isinstance(res, tuple) else (res,)
    if len(res) != len(outs):
        raise RuntimeError(f"{cls.__name__}.jvp returned {len(res)} tangent(s) for {len(outs)} output(s)")
    for o, t in zip(outs, res):
        if isinstance(o, Tensor) and t is not None:
            o._tangent = t.detach() if t._shape == o._shape else t.detach().expand(*o._shape)


class FunctionNode(GraphNode):
    """The autograd node of one `Function.apply`; the engine drives it like a primitive's node."""

    owned_grads = False

    def __init__(self, cls, ctx, edges, args, outs):
        self.cls, self.ctx, self.edges, self.freed, self.label = cls, ctx, edges, False, None
        self.n_out = len(outs)
        self.tensor_out = [isinstance(o, Tensor) for o in outs]
        # the engine makes zero cotangents for unused outputs; a non-tensor output's is dropped in apply
        self.out_meta = [(o._shape, o._dtype, o._device) if isinstance(o, Tensor) else ((), D.float32, CPU)
                         for o in outs]
        self.in_meta = [(a._shape, a._dtype) if isinstance(a, Tensor) else None for a in args]
        f = user_frame() if not interpreter().concrete else None    # traced backward ops point at apply's line
        self.loc = f"{f.f_code.co_filename}:{f.f_lineno}" if f else None
        ctx._node = self
        ctx._versions = tuple(t._ver[0] if t is not None else None for t in ctx._saved)

    @property
    def takes_absent(self):
        """After ctx.set_materialize_grads(False) backward gets None, not zeros, for an unused output."""
        return not self.ctx.materialize_grads

    def name(self):
        return f"{self.cls.__name__}Backward"

    def check_saved(self):
        if self.freed:
            raise RuntimeError(FREED_MESSAGE)
        for k, (t, v) in enumerate(zip(self.ctx._saved, self.ctx._versions)):
            if t is not None and t._ver[0] != v:
                raise RuntimeError(_version_message(t, v, f"saved tensor {k} of {self.name()}"))

    def apply(self, grads):
        grads = [g if is_t else None for g, is_t in zip(grads, self.tensor_out)]
        res = self.cls.backward(self.ctx, *grads)
        res = res if isinstance(res, tuple) else (res,)
        n = len(self.edges)
        if len(res) < n or any(r is not None for r in res[n:]):
            raise RuntimeError(f"function {self.name()} returned an incorrect number of gradients "
                               f"(expected {n}, got {len(res)})")
        return [self._check(i, g) for i, g in enumerate(res[:n])]

    def _check(self, i, g):
        meta = self.in_meta[i]
        if g is None:
            return None
        if meta is None:
            raise RuntimeError(f"function {self.name()} returned a gradient different than None at position "
                               f"{i + 1}, but the corresponding forward input was not a Tensor")
        if not isinstance(g, Tensor):
            raise TypeError(f"function {self.name()} returned a {type(g).__name__} as gradient {i + 1}; "
                            f"expected a tensor or None")
        if self.edges[i] is None:
            return None
        shape, dtype = meta
        if g._shape != shape:
            try:
                ok = broadcast_shapes(shape, g._shape) == g._shape
            except BroadcastError:
                ok = False
            if not ok:
                raise RuntimeError(f"Function {self.name()} returned an invalid gradient at index {i} - got "
                                   f"{list(g._shape)} but expected shape compatible with {list(shape)}")
            g = unbroadcast(g, shape)
        return g if g._dtype is dtype else g.to(dtype)

    def release(self):
        self.ctx._saved, self.ctx._versions, self.freed = (), (), True


class _VariableMeta(type):
    def __instancecheck__(cls, obj):
        return isinstance(obj, Tensor)


class Variable(metaclass=_VariableMeta):
    """The pre-0.4 PyTorch wrapper: `Variable(t)` returns the tensor itself (`requires_grad=` sets it)."""

    def __new__(cls, data, requires_grad=False, volatile=False):
        if not isinstance(data, Tensor):
            raise TypeError(f"Variable data has to be a tensor, but got {type(data).__name__}")
        if requires_grad:
            data.requires_grad_(True)
        return data
