"""What mode this thread is in: whether autograd records, and which interpreter runs the ops.

Both are per thread, as PyTorch's grad mode is: a thread that traces a function or runs under
no_grad leaves every other thread's eager tensors alone.

Interpreters (in the manner of JAX's interpreter stack): every primitive an operation applies is
handed to the innermost interpreter of this thread -- the tracer of a function being compiled,
forward mode under `tg.jvp` -- or, when none is pushed, to the eager interpreter, which runs the
NumPy implementation. An interpreter answers:

    lift_inputs(inputs), lift(tensor) -> the values it works on (a tracer: graph inputs for real tensors)
    apply(prim, inputs, attrs, shape, dtype, device) -> tensor    one primitive application
    constant(value, dtype, device, shape=()) -> tensor           a filled tensor made by an op
    constant_array(array, dtype, device, requires_grad) -> tensor  a tensor made from data (a factory)
    mutate(tensor, new) -> tensor                                an in-place write
    grad_access(tensor) -> the tensor whose .grad holds its gradient; grad_owner(leaf),
    at(loc): the backward engine's hooks
    concrete: bool                                               whether values are NumPy arrays
"""
import functools
import threading


class _Thread(threading.local):
    grad = True            # grad mode (a class default: every new thread starts with it on)
    on_node = None         # tg.viz.record(): called as on_node(node, inputs, out) for each recorded node

    def __init__(self):
        self.interpreters = []     # pushed above eager, innermost last


_Mode = _thread = _Thread()   # (_Mode: the older name, still read as _Mode.grad)
eager = None   # the eager interpreter: installed by tracegrad.tensor.dispatch (it makes tensors)


def interpreter():
    """This thread's innermost interpreter."""
    stack = _thread.interpreters
    return stack[-1] if stack else eager


def interpreters():
    """This thread's interpreters above eager, outermost first."""
    return tuple(_thread.interpreters)


class interpreting:
    """`with interpreting(interp):` runs the block's operations through `interp` (this thread only)."""

    def __init__(self, interp):
        self.interp = interp

    def __enter__(self):
        _thread.interpreters.append(self.interp)
        return self.interp

    def __exit__(self, *exc):
        popped = _thread.interpreters.pop()
        assert popped is self.interp, "interpreters must be popped in the order they were pushed"


def is_grad_enabled():
    return _thread.grad


class _GradMode:
    """Context manager and decorator that sets whether autograd records (in this thread)."""

    enabled = True

    def __new__(cls, *args, **kwargs):
        # `@tg.no_grad` without parentheses decorates directly, as in PyTorch
        if cls in (no_grad, enable_grad) and len(args) == 1 and not kwargs and callable(args[0]):
            return cls()(args[0])
        return super().__new__(cls)

    def __enter__(self):
        self._prev, _thread.grad = _thread.grad, self.enabled

    def __exit__(self, *exc):
        _thread.grad = self._prev

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
    """Sets grad mode at once, as PyTorch's: `tg.set_grad_enabled(False)` as a plain call switches
    it off (in this thread); as a context manager or decorator, the previous mode comes back after."""

    def __init__(self, mode):
        self.enabled = bool(mode)
        self._prev, _thread.grad = _thread.grad, self.enabled

    def __enter__(self):
        _thread.grad = self.enabled

    def __call__(self, fn):
        _thread.grad = self._prev      # decorating does not switch the mode; calling fn does
        mode = self.enabled

        @functools.wraps(fn)
        def wrapper(*a, **kw):
            with set_grad_enabled(mode):
                return fn(*a, **kw)
        return wrapper
