"""In-place ops of eager CPU tensors written straight into the tensor's own array.

When nothing records or traces an in-place update (no tracer or forward mode on this thread, no
autograd history to build), its value needs no tensor of its own: a NumPy ufunc writes it with
`out=` the destination (NumPy reads an operand that overlaps the destination, other than element for
element, into a copy first), and an update of several steps (add_ with alpha, clamp_, pow_, exp_)
runs block by block over scratch arrays of at most BLOCK elements. The values are those of the
general path in inplace.py (compute out of place, then copy), bit for bit: the same NumPy functions
on the same dtypes. `write` declines (and the general path runs, with its promotion, broadcasting
and errors) whenever an operand would need more than the destination's dtype and shape: another
dtype, another device, a number of a higher kind, a destination that is read-only or expanded.
"""
import numpy as np

from ..broadcast import BroadcastError, broadcast_shapes
from ..modes import _thread
from .base import TensorBase
from .dispatch import _P, refresh_view, wrapped_int

BLOCK = 1 << 16          # elements per block of an update that needs scratch arrays
_KIND = {bool: 0, int: 1, float: 2}   # a Python number's dtype kind (DType.kind)


class Writer:
    """How one in-place op writes into a destination array: `run(dst, *operands)` (operands
    0-d arrays for numbers, None for an absent clamp bound), for destination dtype kinds `kinds`
    (0 bool, 1 integer, 2 floating); `blocked`: run over pieces of at most BLOCK elements; `reads`:
    the general path applies an op to self and the operands (so stale views re-read their base)."""
    __slots__ = ("run", "kinds", "blocked", "reads")

    def __init__(self, run, kinds, blocked=False, reads=True):
        self.run, self.kinds, self.blocked, self.reads = np.errstate(all="ignore")(run), kinds, blocked, reads


def _clamp(d, lo, hi):
    """clamp's where((d < lo) | isnan(lo), lo, d) then the same for hi: a nan in d stays, a nan bound
    wins, as there; an upper bound over d's own memory is read before the lower bound's step writes d."""
    if lo is not None and hi is not None and np.may_share_memory(hi, d):
        hi = hi.copy()
    if lo is not None:
        np.copyto(d, lo, where=np.less(d, lo) | np.not_equal(lo, lo))
    if hi is not None:
        np.copyto(d, hi, where=np.greater(d, hi) | np.not_equal(hi, hi))


def _by_impl(name):
    """d's elements replaced by primitive `name`'s NumPy implementation applied to them (and the
    operands)."""
    impl = _P[name].impl
    return lambda d, *a: np.copyto(d, impl(d, *a))


ADD = Writer(lambda d, o: np.add(d, o, out=d), (0, 1, 2))
SUB = Writer(lambda d, o: np.subtract(d, o, out=d), (1, 2))
MUL = Writer(lambda d, o: np.multiply(d, o, out=d), (0, 1, 2))
DIV = Writer(lambda d, o: np.true_divide(d, o, out=d), (2,))
ADD_SCALED = Writer(lambda d, o, a: np.add(d, np.multiply(o, a), out=d), (1, 2), blocked=True)
SUB_SCALED = Writer(lambda d, o, a: np.subtract(d, np.multiply(o, a), out=d), (1, 2), blocked=True)
NEG = Writer(lambda d: np.negative(d, out=d), (1, 2))
RELU = Writer(lambda d: np.maximum(d, 0, out=d), (1, 2))
CLAMP = Writer(_clamp, (1, 2), blocked=True)
EXP = Writer(_by_impl("exp"), (2,), blocked=True)
POW = Writer(_by_impl("pow"), (2,), blocked=True)       # integer powers check all exponents first
COPY = Writer(lambda d, v: np.copyto(d, v), (0, 1, 2), reads=False)


def scaled(plain, times, o, alpha):
    """add_/sub_'s writer and operands: `o * alpha` as add(o, alpha) computes it (a number times
    alpha is a number), fused into the update when o is a tensor."""
    if alpha != 1:
        if isinstance(o, TensorBase):
            return times, (o, alpha)
        o = o * alpha
    return plain, (o,)


def write(self, writer, operands):
    """Write `writer`'s update of self with `operands` (tensors, Python numbers, None) into self's
    array, bump its version, and return True; False (having done nothing) when the general path
    must: autograd records the update (grad mode on and a tensor involved requires grad), a tracer
    or forward mode runs, or the operands need what the general path does."""
    dt, dst, grad = self._dtype, self._data, _thread.grad
    if _thread.interpreters or grad and self._requires_grad or self._device.type != "cpu" or dst is None \
            or dt.kind not in writer.kinds or not dst.flags.writeable or not dst.flags.c_contiguous and _expanded(dst):
        return False
    shape, arrays, tensors = self._shape, [], []
    for o in operands:
        if o is None:
            arrays.append(None)
        elif isinstance(o, TensorBase):
            if grad and o._requires_grad or o._dtype is not dt or o._device.type != "cpu" or o._data is None or \
                    o._shape != shape and not _fits(o._shape, shape):
                return False
            arrays.append(o._data)
            tensors.append(o)
        elif _KIND.get(type(o), 3) <= dt.kind:
            arrays.append(np.array(wrapped_int(o, dt), dt.np))      # as dispatch makes a number an operand
        else:
            return False
    for t in (self, *tensors) if writer.reads else (t for t in tensors if t._shape != shape):
        if t._view is not None and t._view[1] != t._base._ver[0]:
            refresh_view(t)
    if writer.blocked and dst.size > BLOCK:
        _by_blocks(writer.run, dst, arrays)
    else:
        writer.run(dst, *arrays)
    self._ver[0] += 1
    if self._view is not None:          # written through its own memory: it reads its base as it is
        self._view = (self._view[0], self._base._ver[0], self._view[2])
    return True


def _fits(shape, target):
    try:
        return broadcast_shapes(shape, target) == target
    except BroadcastError:
        return False


def _expanded(arr):
    """Whether elements of `arr` share memory (a zero stride over more than one element)."""
    return any(s == 0 and n > 1 for s, n in zip(arr.strides, arr.shape))


def _by_blocks(run, dst, arrays):
    """`run` over pieces of dst and the operands (broadcast to dst's shape) of at most BLOCK elements,
    or over the whole when an operand overlaps dst otherwise than element for element (a later piece
    would read what an earlier one wrote)."""
    if any(a is not None and _overlaps(a, dst) for a in arrays):
        run(dst, *arrays)
        return
    wide = [a if a is None or not a.ndim else np.broadcast_to(a, dst.shape) for a in arrays]
    for ix in _pieces(dst.shape):
        run(dst[ix], *[a if a is None or not a.ndim else a[ix] for a in wide])


def _overlaps(a, dst):
    if not np.may_share_memory(a, dst):
        return False
    return not (a.shape == dst.shape and a.strides == dst.strides and
                a.__array_interface__["data"][0] == dst.__array_interface__["data"][0])


def _pieces(shape):
    """Index tuples cutting an array of `shape` (more than BLOCK elements) into pieces of at most
    BLOCK elements: runs of rows along the first axis, or pieces of each row when a row is larger."""
    inner = 1
    for n in shape[1:]:
        inner *= n
    if inner <= BLOCK:
        step = BLOCK // inner
        for i in range(0, shape[0], step):
            yield (slice(i, i + step),)
    else:
        for i in range(shape[0]):
            for tail in _pieces(shape[1:]):
                yield (i,) + tail
