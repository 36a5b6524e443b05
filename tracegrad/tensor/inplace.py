"""In-place writes: an in-place op computes its value out of place, then the interpreter writes it
into the tensor (eager: into its memory, bumping its version counter; a tracer functionalizes it).
An eager CPU update that autograd does not record is written straight into the tensor's memory
instead, without a value of its own (direct.py).

An in-place op on a view whose value autograd records, or while tracing, is an op on its base, as
PyTorch's CopySlices: the base takes its old value with the view's elements replaced, and that
update's history; the view then re-reads the base. Other views of the base re-read it when next used
(dispatch.refresh_view)."""
import contextlib
import math

import numpy as np

from .. import dtypes as D
from ..autograd import retain
from ..broadcast import BroadcastError, broadcast_shapes
from ..modes import interpreter, is_grad_enabled, no_grad
from ..symint import slice_length
from .base import TensorBase, _ArgError
from .direct import COPY
from .direct import write as write_direct
from .dispatch import _P, _named, check_fits, dispatch, refresh_view
from .factories import full, tensor


def inplace(self, compute, *others, direct=None):
    """Run `compute(src, *others)` out of place and write the result into self; or let `direct` (a
    direct.Writer and its operands, among them every tensor of `others`) write the same value in
    place, which it does only when autograd records nothing."""
    if direct is not None and write_direct(self, *direct):
        return self
    recording = is_grad_enabled() and (self.requires_grad or
                                       any(isinstance(o, TensorBase) and o.requires_grad for o in others))
    if recording and self.requires_grad and self.grad_fn is None:
        raise RuntimeError("a leaf Variable that requires grad is being used in an in-place operation.")
    if self._view is not None and (recording or not interpreter().concrete):
        return _inplace_on_view(self, compute, others, recording)
    if recording and self._base is not None and self._base.requires_grad:
        raise RuntimeError("in-place modification of a view of a tensor that requires grad is not supported "
                           "by tracegrad's autograd; compute the new value out of place (tg.where, tg.cat) "
                           "or modify the base tensor instead.")
    src = self.clone() if recording and self.requires_grad else self.detach() if recording else self
    with (contextlib.nullcontext() if recording else no_grad()):
        new = compute(src, *others)
    write(self, new, recording)
    if self._view is not None:          # written through its own memory: it reads its base as it is
        self._view = (self._view[0], self._base._ver[0], self._view[2])
    return self


def _inplace_on_view(self, compute, others, recording):
    base = self._base
    if recording and base.requires_grad and base.grad_fn is None:
        raise RuntimeError("a view of a leaf Variable that requires grad is being used in an in-place operation.")
    src = self.clone() if recording and self.requires_grad else self.detach() if recording else self
    with (contextlib.nullcontext() if recording else no_grad()):
        new = _fitted(self, compute(src, *others))
        new_base = _with_view_replaced(base, self._view[0], new)
    write(base, new_base, recording)
    if recording:
        _named(base, "CopySlices")
    refresh_view(self)
    return self


def _with_view_replaced(base, ops, new):
    """`base` with the elements the view `ops` selects replaced by `new` (differentiable in both)."""
    pos = np.arange(int(base.numel())).reshape(tuple(map(int, base._shape)))   # numbers: symbolic sizes pinned
    for p, attrs in ops:                 # which element of the base each element of the view is
        pos = p.impl(pos, **attrs)
    return replaced(base, pos.reshape(-1), new)


def replaced(base, flat, new):
    """`base` with its elements at the flat positions `flat` (a NumPy array) replaced by `new`'s
    elements in order (differentiable in both). Positions that are a box of base in its order (a
    basic index: slices, integers, new axes) become where(box, unslice(new), base), which compiled
    code fuses (ir/passes/copies.py); others scatter."""
    n = base.numel()
    box = _box(base._shape, flat)
    if box is not None:
        return replaced_box(base, box, new)
    hit = np.zeros(n, dtype=bool)
    hit[flat] = True
    if hit.sum() != flat.size:
        raise _ArgError("unsupported operation: more than one element of the written-to tensor refers to a single "
                        "memory location (an expanded tensor). Please clone() the tensor before performing the "
                        "operation.")
    where_ = tensor(flat, device=base.device)
    scattered = dispatch(_P["index_add"], (new.reshape(-1), where_), {"shape": (n,), "axes": (0,)})
    mask = tensor(hit, device=base.device)
    return dispatch(_P["where"], (mask, scattered, base.reshape(-1)), {}).reshape(base._shape)


def replaced_box(base, box, new):
    """`base` with x[start:stop:step, ...] (`box`: a (start, stop, step) per axis, sizes symbolic or not)
    replaced by `new`'s elements in order: where(box, unslice(new), base), which compiled code fuses."""
    index = {"shape": base._shape, "index": box}
    piece = new.reshape(tuple(slice_length(*b) for b in box))
    mask = dispatch(_P["unslice"], (full(piece._shape, True, dtype=D.bool_, device=base.device),), index)
    return dispatch(_P["where"], (mask, dispatch(_P["unslice"], (piece,), index), base), {})


def _box(shape, flat):
    """((start, stop, step) per axis) when the flat positions `flat` in a row-major tensor of
    `shape` are exactly the elements of x[start:stop:step, ...] in its order, else None. The
    candidate box (each coordinate's range and the gcd of its rises) costs O(len(flat)); the check
    compares positions, never an array of the whole tensor."""
    if not flat.size or not shape:
        return None
    shape = tuple(map(int, shape))      # positions are numbers: symbolic sizes pinned
    box = []
    for c in np.unravel_index(flat, shape):
        rises = np.diff(c)
        rises = rises[rises > 0]
        box.append((int(c.min()), int(c.max()) + 1, int(np.gcd.reduce(rises)) if rises.size else 1))
    if math.prod(len(range(*b)) for b in box) != flat.size:
        return None
    return tuple(box) if np.array_equal(positions(shape, [slice(*b) for b in box]), flat) else None


def positions(shape, index):
    """The flat row-major positions in a tensor of `shape` of the elements a basic NumPy `index`
    (slices, integers, None) selects, in order, without an array of the whole tensor."""
    out = 0
    for k, n in enumerate(shape):
        stride = math.prod(shape[k + 1:])
        out = out + np.broadcast_to((np.arange(n, dtype=np.int64) * stride)[
            (slice(None),) + (None,) * (len(shape) - k - 1)], shape)[tuple(index)]
    return np.asarray(out).reshape(-1)


def _fitted(self, new):
    """`new` broadcast to self's shape and cast to its dtype, as an in-place write stores it."""
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
    return new


def fill_with(self, value):
    """self.fill_(value): a number, or a tensor broadcast to self's shape."""
    if isinstance(value, TensorBase):
        return inplace(self, lambda s, v: v.to(s.dtype).expand(*s.shape), value, direct=(COPY, (value,)))
    check_fits(value, self._dtype)
    return inplace(self, lambda s: full(s.shape, value, dtype=s.dtype, device=s.device), direct=(COPY, (value,)))


def copy_from(self, src):
    """self.copy_(src)."""
    if not isinstance(src, TensorBase):
        raise TypeError(f"copy_() expects a tensor, got {type(src).__name__}")
    return inplace(self, lambda s, v: v.to(s.dtype, device=s.device).expand(*s.shape), src, direct=(COPY, (src,)))


def write(self, new, recording):
    """Store `new` (broadcast to self's shape) into self's memory and bump its version."""
    new = _fitted(self, new)
    if recording and new._requires_grad and new.grad_fn is None:
        # the new value is a leaf itself (copy_ or fill_ of a same-shape, same-dtype leaf): self gets a
        # node of its own whose backward reaches the leaf (PyTorch's CopyBackwards); taking the leaf's
        # (empty) history would leave the leaf's gradient nowhere to go
        new = dispatch(_P["copy"], (new,), {})
    if recording and self._requires_grad and not new._requires_grad:
        # a value without history (zero_, fill_, copy_ of a constant) overwrites one with history: the
        # tensor keeps requiring grad and its old value gets a zero gradient, as PyTorch's ZeroBackward
        new = dispatch(_P["where"], (full(self._shape, True, device=self._device), new, self), {})
    self = interpreter().mutate(self, new)   # a tracer functionalizes it: the stand-in takes the new value
    if recording and new._requires_grad:
        self._requires_grad = True
        self.grad_fn, self._oi = new.grad_fn, new._oi
        if self._retains_grad and self.grad_fn is not None:
            retain(self)        # the retained gradient is that of the new value, as in PyTorch
