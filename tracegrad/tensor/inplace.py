"""In-place writes: an in-place op computes its value out of place, then the interpreter writes it
into the tensor (eager: into its memory, bumping its version counter; a tracer functionalizes it)."""
import contextlib

from ..autograd import retain
from ..broadcast import BroadcastError, broadcast_shapes
from ..modes import interpreter, is_grad_enabled, no_grad
from .base import TensorBase
from .factories import full


def inplace(self, compute, *others):
    """Run `compute(src, *others)` out of place and write the result into self."""
    recording = is_grad_enabled() and (self.requires_grad or
                                       any(isinstance(o, TensorBase) and o.requires_grad for o in others))
    if recording and self.requires_grad and self.grad_fn is None:
        raise RuntimeError("a leaf Variable that requires grad is being used in an in-place operation.")
    if recording and self._base is not None and self._base.requires_grad:
        raise RuntimeError("in-place modification of a view of a tensor that requires grad is not supported "
                           "by tracegrad's autograd; compute the new value out of place (tg.where, tg.cat) "
                           "or modify the base tensor instead.")
    src = self.clone() if recording and self.requires_grad else self.detach() if recording else self
    with (contextlib.nullcontext() if recording else no_grad()):
        new = compute(src, *others)
    write(self, new, recording)
    return self


def fill_with(self, value):
    """self.fill_(value): a number, or a tensor broadcast to self's shape."""
    if isinstance(value, TensorBase):
        return inplace(self, lambda s, v: v.to(s.dtype).expand(*s.shape), value)
    return inplace(self, lambda s: full(s.shape, value, dtype=s.dtype, device=s.device))


def copy_from(self, src):
    """self.copy_(src)."""
    if not isinstance(src, TensorBase):
        raise TypeError(f"copy_() expects a tensor, got {type(src).__name__}")
    return inplace(self, lambda s, v: v.to(s.dtype, device=s.device).expand(*s.shape), src)


def write(self, new, recording):
    """Store `new` (broadcast to self's shape) into self's memory and bump its version."""
    if new._shape != self._shape:
        try:
            ok = broadcast_shapes(new._shape, self._shape) == self._shape
        except BroadcastError:
            ok = False
        if not ok:
            raise RuntimeError(f"output with shape {list(self._shape)} doesn't match the broadcast shape "
                               f"{list(new._shape)}")
        new = new.expand(*self._shape)
    if new._dtype is not self._dtype:
        if new._dtype.kind > self._dtype.kind:
            raise RuntimeError(f"result type {new._dtype} can't be cast to the desired output type {self._dtype}")
        new = new.to(self._dtype)
    self = interpreter().mutate(self, new)   # a tracer functionalizes it: the stand-in takes the new value
    if recording:
        self._requires_grad = True
        self.grad_fn, self._oi = new.grad_fn, new._oi
        if self._retains_grad and self.grad_fn is not None:
            retain(self)        # the retained gradient is that of the new value, as in PyTorch
