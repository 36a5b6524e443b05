"""What mode the program is in: whether autograd records, and which interpreter runs the ops.

Grad mode is switched by `no_grad`, `enable_grad` and `set_grad_enabled` (context managers and
decorators, as PyTorch's). `Hooks` holds what the tracer and forward mode plug in.
"""
import functools


class Hooks:
    """What the tracer and forward mode plug in; None when not active (tensor dispatch reads it)."""
    tracer = None      # an object with .emit(prim, inputs, attrs, shape, dtype, device) -> Tensor
    jvp_depth = 0      # > 0 while tg.jvp runs (tensors may carry ._tangent)
    on_node = None     # tg.viz.record(): called as on_node(node, inputs, out) for each recorded node


class _Mode:
    grad = True


def is_grad_enabled():
    return _Mode.grad


class _GradMode:
    """Context manager and decorator that sets whether autograd records."""

    enabled = True

    def __new__(cls, *args, **kwargs):
        # `@tg.no_grad` without parentheses decorates directly, as in PyTorch
        if cls in (no_grad, enable_grad) and len(args) == 1 and not kwargs and callable(args[0]):
            return cls()(args[0])
        return super().__new__(cls)

    def __enter__(self):
        self._prev, _Mode.grad = _Mode.grad, self.enabled

    def __exit__(self, *exc):
        _Mode.grad = self._prev

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*a, **kw):
            with type(self)():
                return fn(*a, **kw)
        return wrapper


class no_grad(_GradMode):
    enabled = False


class enable_grad(_GradMode):
    enabled = True


class set_grad_enabled(_GradMode):
    def __init__(self, mode):
        self.enabled = bool(mode)

    def __call__(self, fn):
        mode = self.enabled

        @functools.wraps(fn)
        def wrapper(*a, **kw):
            with set_grad_enabled(mode):
                return fn(*a, **kw)
        return wrapper
