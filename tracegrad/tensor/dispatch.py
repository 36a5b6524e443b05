"""How an operation reaches the primitive table: dispatch, dtype promotion, argument conventions.

Every operation goes through `dispatch`: it checks devices, applies the primitive's type rule
(broadcasting lives there), hands the primitive to this thread's innermost interpreter (modes.py:
eager, defined here, or a tracer, or forward mode) and records an autograd node.
"""
import math
import numbers

import numpy as np

from ..backends.cuda import gpu as cuda
from .. import dtypes as D
from ..backends.cuda import eager as cuda_eager
from ..backends.cuda import memory
from .. import core, modes
from ..autograd import Node
from ..symint import SymInt, as_size, is_size
from ..device import CPU, mismatch_error
from ..modes import _thread
from ..ops import PRIMS
from .base import _EAGER, TensorBase, TraceError, new

_P = PRIMS
_SCALARS = (numbers.Number, np.bool_, np.number, SymInt)     # a symbolic size is an int operand


def dispatch(p, inputs, attrs, device=None):
    """Apply primitive `p` to tensors `inputs`: the single path of every operation. The type rule
    runs here (broadcasting lives there); this thread's innermost interpreter computes the value;
    autograd records a node when grad mode is on and an input requires grad. `device`: where a
    primitive without inputs (rand) puts its result (default: the cpu)."""
    dev = inputs[0]._device if inputs else device or CPU
    node_class = Node
    for t in inputs:
        if t._device is not dev and t._device != dev:
            dev = _common_device(inputs)
            node_class = CrossDeviceNode
            break
    shape, dtype = p.rule([t._shape for t in inputs], [t._dtype for t in inputs], **attrs)
    for t in inputs:
        if t._view is not None and t._view[1] != t._base._ver[0]:
            refresh_view(t)
    stack = _thread.interpreters
    if stack:
        interp = stack[-1]
        inputs = interp.lift_inputs(inputs)
        out = interp.apply(p, inputs, attrs, shape, dtype, dev)
    else:
        out = EAGER.apply(p, inputs, attrs, shape, dtype, dev)
    if p.differentiable and _thread.grad:
        for t in inputs:
            if t._requires_grad:
                out._requires_grad = True
                out.grad_fn = node = node_class(p, inputs, attrs, out)
                node.loc = out._loc
                break
    return out


def view_of(src, p, attrs, base):
    """What a new view (by primitive `p` of `src`) records to re-read its root `base`: (the view
    primitives from the base, the base's version when last read, whether autograd tracks it)."""
    if src._base is None:
        ops = ()
    elif src._view is not None:
        ops = src._view[0]
    else:
        return None
    return ops + ((p, attrs),), base._ver[0], _thread.grad


def refresh_view(t):
    """`t` views a base changed in place since `t` last read it (an in-place op on the base or on
    another of its views): `t` reads it again, as PyTorch regenerates a view's history. A traced
    view's value is re-read by its tracer; a view made while autograd recorded takes the history of
    the base as it is now (an eager view's memory already holds the new values)."""
    ops, _, tracked = t._view
    base = t._base
    t._view = None                      # the replay below reads base, not t
    interp = modes.interpreter()
    traced = t._data is None
    if traced:
        interp.lift_inputs((t,))
    if tracked and base._requires_grad and (traced or interp.concrete):
        prev, _thread.grad = _thread.grad, True
        try:
            v = base
            for p, attrs in ops:
                v = dispatch(p, (v,), attrs)
        finally:
            _thread.grad = prev
        t._requires_grad, t.grad_fn, t._oi = True, v.grad_fn, v._oi
    t._view = (ops, base._ver[0], tracked)


class Eager:
    """The interpreter at the bottom of every thread's stack: NumPy implementations on arrays."""

    concrete = True

    def apply(self, p, inputs, attrs, shape, dtype, dev):
        if dev.type == "cuda":
            return _apply_cuda(p, inputs, attrs, shape, dtype, dev)
        arr = p.impl(*[t._concrete(p.name) for t in inputs], **attrs)   # a traced value raises
        if type(arr) is not np.ndarray or arr.dtype is not dtype.np:
            arr = np.asarray(arr).astype(dtype.np, copy=False)
        out = _EAGER[0]._wrap(arr, dtype, dev)       # new(), without its call (the hot path)
        if p.kind == "view" and (arr.size == 0 or arr.base is not None          # an empty view holds
                                 and np.may_share_memory(arr, inputs[0]._data)):  # no memory to share
            out._ver, out._base = inputs[0]._ver, inputs[0]._base if inputs[0]._base is not None else inputs[0]
            out._view = view_of(inputs[0], p, attrs, out._base)
        return out

    def constant(self, v, dtype, dev, shape=()):
        return new(np.array(v, dtype=dtype.np) if not shape else np.full(shape, v, dtype=dtype.np), dtype, dev)

    def constant_array(self, arr, dtype, dev, requires_grad=False):
        t = new(arr, dtype, dev)
        if requires_grad:
            t.requires_grad = True
        return t

    def lift(self, t):
        return t

    def lift_inputs(self, inputs):
        return inputs

    def mutate(self, t, new):
        if t._device.type == "cuda":
            return _mutate_cuda(t, new)
        if not t._data.flags.writeable:
            if not any(s == 0 and n > 1 for s, n in zip(t._data.strides, t._shape)):
                raise RuntimeError(f"in-place update of a tensor over read-only memory (shape {list(t._shape)}, "
                                   f"{t._dtype}; a NumPy array with writeable=False, np.frombuffer over bytes "
                                   f"or a read-only mmap); clone() the tensor, or make it from a writable copy")
            raise RuntimeError("unsupported operation: more than one element of the written-to tensor refers to a "
                               "single memory location (an expanded tensor). Please clone() the tensor before "
                               "performing the operation.")
        np.copyto(t._data, new._host("an in-place update"))
        t._ver[0] += 1
        return t

    def grad_access(self, t, write=False):
        return t

    def grad_owner(self, leaf):
        return leaf

    def at(self, loc):
        pass


EAGER = modes.eager = Eager()


def _apply_cuda(p, inputs, attrs, shape, dtype, dev):
    """Eager.apply on the device: backends/cuda/eager/ computes; views share their input's version counter."""
    arr = cuda_eager.run(p, [t._concrete(p.name) for t in inputs], attrs, shape, dtype)
    out = _EAGER[0]._wrap(arr, dtype, dev)
    if p.kind == "view" and (math.prod(shape) == 0 or memory.may_share_memory(arr, inputs[0]._data)):
        out._ver, out._base = inputs[0]._ver, inputs[0]._base if inputs[0]._base is not None else inputs[0]
        out._view = view_of(inputs[0], p, attrs, out._base)
    return out


def _mutate_cuda(t, new):
    """Eager.mutate of a cuda tensor: `new` (already of t's shape and dtype) written into t's device
    memory, through t's strides (a view writes into its base)."""
    dst = t._data
    if any(s == 0 and n > 1 for s, n in zip(dst.strides, t._shape)):
        raise RuntimeError("unsupported operation: more than one element of the written-to tensor refers to a "
                           "single memory location (an expanded tensor). Please clone() the tensor before "
                           "performing the operation.")
    src = new._concrete("an in-place update")
    if not memory.is_device_array(src):          # a 0-d cpu tensor (expanded) written into a cuda tensor
        host = np.asarray(src)
        if host.size and not any(host.strides):
            host = np.array(host.flat[0], host.dtype)
        src = memory.copy(host, "device")
        if src.shape != dst.shape:
            src = memory.view(src, dst.shape, (0,) * dst.ndim)
    elif memory.may_share_memory(src, dst):       # overlapping source and destination: read first
        src = memory.contiguous(src)
    from ..backends.cuda.eager.kernels import copy_strided
    copy_strided(src, dst)
    t._ver[0] += 1
    return t


def _bind(p, inputs, attrs):
    """`core.bind`: VJP/JVP rules may pass Python scalars (`where(c, g, 0.0)`); lift them to tensors
    of the other operands' dtype (for `where`, of the branches, not of the bool condition)."""
    if any(not isinstance(t, TensorBase) for t in inputs):
        if p.name == "where":
            inputs = (inputs[0], *_operands(*inputs[1:]))
        else:
            inputs = tuple(_operands(*inputs))
    return dispatch(p, inputs, attrs)


core._dispatch = _bind


def _common_device(inputs):
    """The device of a mixed-device op: 0-d cpu tensors (lifted scalars) go anywhere."""
    real = [t for t in inputs if not (t._device == CPU and t._shape == ())] or list(inputs)
    dev = real[0]._device
    for t in real[1:]:
        if t._device != dev:
            raise mismatch_error(dev, t._device)
    return dev


def _scalar_tensor(v, dtype, dev):
    """A Python scalar operand as a 0-d tensor; with cuda tensors a 0-d cpu one: kernels take it as an
    argument (no copy), as PyTorch passes scalars. A Python int wraps to an integer dtype's width, as
    PyTorch's does (uint8 - 300 is uint8 - 44; int8 == 1000 compares with -24), eager and compiled."""
    return modes.interpreter().constant(wrapped_int(v, dtype), dtype, CPU if dev.type == "cuda" else dev)


def wrapped_int(v, dtype):
    """A Python int operand of an integer dtype, wrapped to its width (other values as they are)."""
    if dtype.kind == 1 and type(v) is int and not _fits(v, dtype):
        bits = 8 * dtype.itemsize
        v &= (1 << bits) - 1
        v -= (1 << bits) if dtype.np.kind == "i" and v >> (bits - 1) else 0
    return v


def _fits(v, dtype):
    info = np.iinfo(dtype.np)
    return info.min <= v <= info.max


def check_fits(v, dtype):
    """PyTorch refuses (does not wrap) an out-of-range int where it fills a tensor with it (where,
    fill_)."""
    if dtype.kind == 1 and type(v) is int and not _fits(v, dtype):
        raise RuntimeError(f"value cannot be converted to type {dtype.name}_t without overflow")


def _operands(*xs, device=None):
    """Promote a mix of tensors and Python scalars to tensors of one dtype (PyTorch's rules).
    Scalars go to the tensors' device, or to `device` (default cpu) when all operands are scalars."""
    dims, zero, scalars, dev = [], [], [], None
    for x in xs:
        if isinstance(x, TensorBase):
            (dims if x._shape else zero).append(x._dtype)
            if dev is None or dev == CPU and x._shape:
                dev = x._device
        elif isinstance(x, _SCALARS):
            scalars.append(D.scalar_dtype(x))
        else:
            raise TypeError(f"unsupported operand type {type(x).__name__!r}; expected a tensor or a Python number")
    dtype = D.result_type(dims, zero, scalars)
    out = []
    for x in xs:
        if isinstance(x, TensorBase):
            out.append(x if x._dtype is dtype else x.to(dtype))
        else:
            out.append(_scalar_tensor(x, dtype, dev if dev is not None else device or CPU))
    return out


_KIND = {bool: 0, int: 1, float: 2}   # a Python scalar's dtype kind (DType.kind)


def _promote(a, b, device=None):
    """`_operands(a, b)`, with shortcuts for the common cases: two tensors of one dtype, and a tensor
    with a Python scalar of a kind no higher than the tensor's (the scalar takes the tensor's dtype)."""
    ta, tb = isinstance(a, TensorBase), isinstance(b, TensorBase)
    if ta and tb and a._dtype is b._dtype:
        return a, b
    if ta and _KIND.get(type(b), 3) <= a._dtype.kind:
        return a, _scalar_tensor(b, a._dtype, a._device)
    if tb and _KIND.get(type(a), 3) <= b._dtype.kind:
        return _scalar_tensor(a, b._dtype, b._device), b
    return _operands(a, b, device=device)


def _binary(name, a, b):
    a, b = _promote(a, b)
    return dispatch(_P[name], (a, b), {})


def _named(out, name, *inputs):
    """Label the node that produced `out` with PyTorch's name for the whole (composite) operation,
    e.g. mean = sum / n shows `grad_fn=<MeanBackward>`. Nothing to label when `out` is an input."""
    g = out.grad_fn
    if type(g) is Node and all(out is not x for x in inputs):
        g.label = name
    return out


def in_float32(f, x, *args, **kwargs):
    """f(x, ...) by PyTorch's rule for float16 reductions: a float16 x is reduced in float32 and the
    result stored in float16 (a float16 sum of 70,000 ones is inf, a mean of values near 1000 over
    100,000 elements too); other dtypes as they are. Differentiable: the casts carry the gradient."""
    if x._dtype is not D.float16:
        return f(x, *args, **kwargs)
    wide = f(x.to(D.float32), *args, **kwargs)
    label = getattr(wide.grad_fn, "label", None)
    out = wide.to(D.float16)
    return _named(out, label) if label else out


def _float_operand(x):
    """Ops such as exp promote integer tensors to the default float dtype, as PyTorch does."""
    return x if x._dtype.is_floating_point else x.to(D.default_float)


def _axis_kw(axis, dim, name="axis", default=None):
    """dim, or its alias axis= (docs/api.md: every dim= also takes axis=); `default` when neither."""
    if dim is not None:
        if axis is not None:
            raise TypeError("give either axis= or dim=, not both")
        return dim
    return default if axis is None else axis


def _keep_kw(keepdims, keepdim):
    return bool(keepdim) if keepdim is not None else bool(keepdims)


def _shape_arg(args, what="shape"):
    """Accept f(2, 3), f((2, 3)) and f([2, 3]); validate the sizes."""
    if len(args) == 1 and isinstance(args[0], (tuple, list)):
        args = tuple(args[0])
    out = []
    for s in args:
        if isinstance(s, TensorBase) and s.numel() == 1 and not s.dtype.is_floating_point:
            s = int(s.item())
        if not is_size(s):
            raise TypeError(f"{what} must be a sequence of ints, got {args!r}")
        out.append(as_size(s))
    return tuple(out)


def _infer_shape(shape, numel):
    if shape.count(-1) > 1:
        raise RuntimeError("only one dimension can be inferred")
    if any(s < -1 for s in shape):
        raise RuntimeError(f"invalid shape dimension {min(shape)}")
    if -1 in shape:
        rest = math.prod(s for s in shape if s != -1)
        if rest == 0 or numel % rest:
            raise RuntimeError(f"shape '{list(shape)}' is invalid for input of size {numel}")
        shape = tuple(numel // rest if s == -1 else s for s in shape)
    if math.prod(shape) != numel:
        raise RuntimeError(f"shape '{list(shape)}' is invalid for input of size {numel}")
    return shape


def _to_device(t, dev):
    """t copied to device `dev` (t.to(dev)): differentiable, the gradient comes back to t's device
    (PyTorch's ToCopyBackward)."""
    cuda.require(dev)
    if _thread.interpreters:
        raise TraceError(f"moving a tensor to {dev} inside tg.compile or tg.jvp is not supported; move the "
                         f"tensors before the call")
    return _moved(t, dev)


def _moved(t, dev):
    """_to_device without its checks (concrete `t`, `dev` available)."""
    arr = t._concrete("to(device)")
    arr = memory.copy(arr, "device") if dev.type == "cuda" else memory.copy(arr, "host")
    out = new(arr, t._dtype, dev)
    if t._requires_grad and _thread.grad:
        out._requires_grad = True
        out.grad_fn = Node(_TO_DEVICE, (t,), {"device": t._device}, out)
    return out


_TO_DEVICE = core.Prim("to_device", "copy", None, None, save=(), save_out=False, lower=None, dtypes=(), cost=None,
                       vjp=(lambda n, g: _to_device(g, n.attrs["device"]),), jvp=None)
_TO_DEVICE.backward_name = "ToCopyBackward"   # not registered in the table: eager only, never traced


class CrossDeviceNode(Node):
    """The node of an operation joining a 0-d cpu tensor with tensors on another device: each input's
    gradient goes back to that input's device, as PyTorch's engine moves it (a cpu scalar's .grad
    stays on the cpu). Traced gradients keep their label: a compiled call's boundary moves them."""
    __slots__ = ("devices",)

    def __init__(self, prim, inputs, attrs, out):
        super().__init__(prim, inputs, attrs, out)
        self.devices = [t._device for t in inputs]

    def apply(self, grads):
        return [g if g is None or g._device == d or g._data is None else _moved(g, d)
                for g, d in zip(super().apply(grads), self.devices)]
