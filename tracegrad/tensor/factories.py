"""Factories: tensors from data (tensor, from_numpy), filled (zeros, ones, full, arange, eye, ...)
and random (rand, randn, randint, randperm, manual_seed)."""
import builtins
import math

import numpy as np

from ..symint import is_size, is_sym, specialize

from .. import dtypes as D
from .. import ops
from ..device import CPU, get_default_device, to_device
from .. import modes
from .base import TensorBase, _ArgError, new
from ..backends.cuda import memory
from ..backends.cuda.gpu import require
from .dispatch import _P, _SCALARS, _shape_arg, dispatch
from .functions import stack

_rng = ops.RNG


def manual_seed(seed):
    _rng[0] = np.random.default_rng(int(seed))


def _factory_args(dtype, dev, default):
    dt = D.to_dtype(dtype) if dtype is not None else default
    dev = to_device(dev) if dev is not None else get_default_device()
    require(dev)
    return dt, dev


def _make(arr, dtype, dev, requires_grad):
    """A tensor over `arr`; inside a traced function, a constant of the graph (made by the tracer)."""
    return modes.interpreter().constant_array(arr, dtype, dev, requires_grad)


def _filled(shape, fill, dtype, dev, requires_grad):
    """A tensor of `shape` holding `fill` (None: uninitialised); with symbolic sizes in the shape or as
    the fill (only while a function is traced), a constant of the graph, never an array."""
    if not any(map(is_sym, (*shape, fill))):
        return _make(_alloc(shape, fill, dtype, dev), dtype, dev, requires_grad)
    t = modes.interpreter().constant(0 if fill is None else fill, dtype, dev, shape)
    if requires_grad:
        t.requires_grad = True
    return t


def _of_sizes(arr, dtype, device, requires_grad):
    """tg.tensor of a nested list holding symbolic sizes: each element a graph constant (no pin)."""
    dt = dtype or (D.int64 if all(map(is_size, arr.flat)) else D.default_float)
    flat = stack([tensor(v, dtype=dt, device=device) for v in arr.flat]).reshape(arr.shape)
    return flat.requires_grad_(requires_grad) if requires_grad else flat


def _alloc(shape, fill, dtype, dev):
    """An array of `shape` on `dev` holding `fill` everywhere (None: uninitialised)."""
    try:
        if dev.type == "cuda":
            from ..backends.cuda import memory
            from ..backends.cuda.eager import kernels
            arr = memory.empty(shape, dtype.np)
            return arr if fill is None else kernels.fill(arr, fill)
        return np.empty(shape, dtype.np) if fill is None else np.full(shape, fill, dtype.np)
    except (MemoryError, ValueError) as e:
        raise ValueError(f"cannot allocate a tensor of shape {shape} and dtype {dtype}: {e}") from None


def _sizes(size):
    shape = _shape_arg(size, "size")
    if any(s < 0 for s in shape):
        raise _ArgError(f"Trying to create tensor with negative dimension {min(shape)}: {list(shape)}")
    return shape


def tensor(data, dtype=None, device=None, requires_grad=False):
    """A new tensor holding a copy of `data` (nested lists, scalars, NumPy arrays, tensors, device
    arrays); a tensor's copy stays on its device unless `device` says otherwise."""
    if isinstance(data, TensorBase) and device is None:
        device = data._device
    if _on_device(data):
        src = as_tensor(data).detach()
        dt, dev = _factory_args(dtype, device or src._device, src._dtype)
        if dev.type == "cuda" and dt is src._dtype:
            t = new(memory.contiguous(src._data), dt, dev)      # a copy made on the device
        else:
            t = src.to(dtype=dt, device=dev)                    # cast or copied to the host: new memory
        return t.requires_grad_(requires_grad)
    if is_sym(data):                # a symbolic size (tg.tensor(x.shape[0]) while traced): a graph constant
        dt, dev = _factory_args(dtype, device, D.int64)
        return _filled((), data, dt, dev, requires_grad)
    if isinstance(data, TensorBase):
        arr = np.array(data._host("tg.tensor(traced)"))
    elif isinstance(data, (str, bytes)) or data is None:
        raise TypeError(f"tg.tensor() expects numbers, nested lists of numbers or an array, not {type(data).__name__}")
    else:
        try:
            arr = np.array(data)
        except ValueError as e:
            raise ValueError(f"tg.tensor(): data is ragged or malformed (every row must have the same length): "
                             f"{e}") from None
        if arr.dtype == object and any(map(is_sym, arr.flat)):   # tg.tensor([x.shape[0], 2]) while traced
            return _of_sizes(arr, dtype, device, requires_grad)
        if arr.dtype == object or arr.dtype.kind not in "biuf":
            raise TypeError(f"tg.tensor() expects numbers, nested lists of numbers or an array, got data of type "
                            f"{type(data).__name__} (NumPy kind {arr.dtype})")
        if dtype is None and not isinstance(data, (np.ndarray, np.generic)) and arr.dtype.kind == "f":
            arr = arr.astype(D.default_float.np)
    dt, dev = _factory_args(dtype, device, D.from_numpy(arr.dtype))
    return _make(np.array(arr, dtype=dt.np, order="C"), dt, dev, requires_grad)  # 0-d stays 0-d


def as_tensor(data, dtype=None, device=None):
    """`data` as a tensor, sharing memory where it can: a tensor is returned as it is (converted only
    when `dtype`/`device` ask), a device array or any object with `__cuda_array_interface__` (CuPy,
    a PyTorch cuda tensor) becomes a cuda tensor over the same memory; other data is copied."""
    if isinstance(data, TensorBase):
        return data.to(dtype=dtype, device=device)
    if _on_device(data):
        require(to_device("cuda"))
        arr = memory.as_device_array(data)
        return new(arr, D.from_numpy(arr.dtype), to_device("cuda")).to(dtype=dtype, device=device)
    return tensor(data, dtype=dtype, device=device)


def _on_device(data):
    """Whether `data` lives in device memory (a cuda tensor, a device array)."""
    if isinstance(data, TensorBase):
        return data._device.type == "cuda" and data._data is not None
    return memory.is_device_array(data) or hasattr(data, "__cuda_array_interface__")


def from_numpy(arr):
    """A tensor sharing memory with the NumPy array `arr`."""
    if not isinstance(arr, np.ndarray):
        raise TypeError(f"expected np.ndarray (got {type(arr).__name__})")
    if any(s < 0 for s in arr.strides):
        raise ValueError("from_numpy: arrays with negative strides are not supported; copy the array first")
    return new(arr, D.from_numpy(arr.dtype), CPU)


def zeros(*size, dtype=None, device=None, requires_grad=False):
    shape = _sizes(size)
    dt, dev = _factory_args(dtype, device, D.default_float)
    return _filled(shape, 0, dt, dev, requires_grad)


def ones(*size, dtype=None, device=None, requires_grad=False):
    shape = _sizes(size)
    dt, dev = _factory_args(dtype, device, D.default_float)
    return _filled(shape, 1, dt, dev, requires_grad)


def empty(*size, dtype=None, device=None, requires_grad=False):
    shape = _sizes(size)
    dt, dev = _factory_args(dtype, device, D.default_float)
    return _filled(shape, None, dt, dev, requires_grad)


def full(size, fill_value, dtype=None, device=None, requires_grad=False):
    shape = _sizes((size,) if is_size(size) else tuple(size))
    if not isinstance(fill_value, _SCALARS):
        raise TypeError(f"full: fill_value must be a number, got {type(fill_value).__name__}")
    dt, dev = _factory_args(dtype, device, D.scalar_dtype(fill_value))
    return _filled(shape, fill_value, dt, dev, requires_grad)


def zeros_like(t, dtype=None, device=None, requires_grad=False):
    return zeros(t.shape, dtype=dtype or t.dtype, device=device or t.device, requires_grad=requires_grad)


def ones_like(t, dtype=None, device=None, requires_grad=False):
    return ones(t.shape, dtype=dtype or t.dtype, device=device or t.device, requires_grad=requires_grad)


def full_like(t, fill_value, dtype=None, device=None, requires_grad=False):
    return full(t.shape, fill_value, dtype=dtype or t.dtype, device=device or t.device, requires_grad=requires_grad)


def empty_like(t, dtype=None, device=None, requires_grad=False):
    return empty(t.shape, dtype=dtype or t.dtype, device=device or t.device, requires_grad=requires_grad)


def rand_like(t, dtype=None, device=None, requires_grad=False):
    return rand(t.shape, dtype=dtype or t.dtype, device=device or t.device, requires_grad=requires_grad)


def randn_like(t, dtype=None, device=None, requires_grad=False):
    return randn(t.shape, dtype=dtype or t.dtype, device=device or t.device, requires_grad=requires_grad)


def legacy_tensor(args, device=None, dtype=None):
    """torch.Tensor(...): Tensor(data) copies data as the default float dtype (or `dtype`: the typed
    constructors, tg.LongTensor), Tensor(2, 3) makes a tensor of that size (zero-filled here; PyTorch
    leaves it uninitialised), Tensor() an empty one."""
    dtype = dtype or D.default_float
    if not args:
        return empty(0, dtype=dtype, device=device)
    if len(args) == 1 and not is_size(args[0]):
        return tensor(args[0], dtype=dtype, device=device)
    return zeros(*args, dtype=dtype, device=device)


def arange(start, end=None, step=1, dtype=None, device=None, requires_grad=False):
    if end is None:
        start, end = 0, start
    for v in (start, end, step):
        if not isinstance(v, _SCALARS) or isinstance(v, bool):
            raise TypeError(f"arange expects numbers, got {v!r}")
    if step == 0:
        raise ValueError("arange: step must be nonzero")
    all_int = all(is_size(v) for v in (start, end, step))
    dt, dev = _factory_args(dtype, device, D.int64 if all_int else D.default_float)
    if any(map(is_sym, (start, end, step))) and not is_sym(step) and all(map(_integral, (start, end, step))):
        # arange(B), arange(0.0, B) while traced: an iota of symbolic length (whole-number floats count
        # as their ints: the same values eager computes), no pin
        start, end, step = (v if is_size(v) else int(v) for v in (start, end, step))
        n = (end - start + step - (1 if step > 0 else -1)) // step
        return modes.interpreter().iota(n if n >= 0 else 0, start, step, dt, dev, requires_grad)
    if any(map(is_sym, (start, end, step))):
        n = _fractional_length(start, end, step)
        if n is not None:       # arange(0, B, 0.5), arange(0.25, B): float64 values from an iota, as eager's
            t = (modes.interpreter().iota(n, 0, 1, D.float64, dev) * float(step) + _number(start)).to(dt)
            return t.requires_grad_(requires_grad) if requires_grad else t
        why = f"arange({start}, {end}, {step}): its length in floats is no exact expression of the sizes, compiled in"
        start, end, step = (specialize(v, why) if is_sym(v) else v for v in (start, end, step))
    n = builtins.max(0, math.ceil((end - start) / step))
    if dev.type == "cuda":
        from ..backends.cuda.eager import kernels
        return _make(kernels.arange(n, start, step, dt.np, all_int), dt, dev, requires_grad)
    arr = (np.arange(n, dtype=np.float64 if not all_int else np.int64) * step + start).astype(dt.np)
    return _make(arr, dt, dev, requires_grad)


def _fractional_length(start, end, step):
    """arange's length max(0, ceil((end - start) / step)) as a size expression where the symbolic ones
    are sizes and the others floats m / 2^k with small m (0.5, 0.25, 1.5): exact rationals, whose float
    quotient (eager's) rounds to the same ceiling for every size below 2^31. None otherwise."""
    if is_sym(step) or not all(is_size(v) or _small_binary(v) for v in (start, end, step)):
        return None
    scale = builtins.max(1 if is_size(v) else float(v).as_integer_ratio()[1] for v in (start, end, step))
    num = [v * scale if is_sym(v) else int(float(v) * scale) for v in (start, end, step)]
    span, st = num[1] - num[0], num[2]
    if st < 0:
        span, st = -span, -st
    n = (span + st - 1) // st
    return n if n >= 0 else 0


def _small_binary(v):
    """Whether float v is m / 2^k with |m| < 2^21, k <= 10 (every finite float is an m / 2^k)."""
    if not math.isfinite(v):
        return False
    m, k = float(v).as_integer_ratio()
    return abs(m) < 2 ** 21 and k <= 2 ** 10


def _number(v):
    """A start of arange as a number eager's float64 arithmetic adds (a size's expression otherwise)."""
    return v if is_sym(v) else float(v)


def _integral(v):
    return is_size(v) or isinstance(v, (float, np.floating)) and float(v).is_integer() and abs(v) < 2 ** 53


def linspace(start, end, steps, dtype=None, device=None, requires_grad=False):
    dt, dev = _factory_args(dtype, device, D.default_float)
    return _make(np.linspace(start, end, int(steps)).astype(dt.np), dt, dev, requires_grad)


def eye(n, m=None, dtype=None, device=None, requires_grad=False):
    dt, dev = _factory_args(dtype, device, D.default_float)
    _sizes((n,) if m is None else (n, m))
    if is_sym(n) or is_sym(m):          # symbolic sizes (traced): ones where two iotas meet, no NumPy pin
        t = (arange(n, device=dev).unsqueeze(1) == arange(n if m is None else m, device=dev).unsqueeze(0)).to(dt)
        return t.requires_grad_(requires_grad)
    return _make(np.eye(n, m, dtype=dt.np), dt, dev, requires_grad)


def _random(name, shape, dtype, dev, requires_grad):
    """Random tensors come from a primitive, so a compiled function draws fresh values per call."""
    t = dispatch(_P[name], (), {"shape": shape, "dtype": dtype}, dev)
    if requires_grad:
        t.requires_grad = True
    return t


def _float_random(name, size, dtype, device, requires_grad):
    shape = _sizes(size)
    dt, dev = _factory_args(dtype, device, D.default_float)
    if not dt.is_floating_point:
        raise TypeError(f"{name} needs a floating-point dtype, got {dt}")
    return _random(name, shape, dt, dev, requires_grad)


def randn(*size, dtype=None, device=None, requires_grad=False):
    return _float_random("randn", size, dtype, device, requires_grad)


def rand(*size, dtype=None, device=None, requires_grad=False):
    return _float_random("rand", size, dtype, device, requires_grad)


def randint(low, high=None, size=(), dtype=None, device=None):
    if high is None:
        low, high = 0, low
    dt, dev = _factory_args(dtype, device, D.int64)
    low, high = int(low), int(high)
    if low >= high:
        raise ValueError(f"randint: low ({low}) must be below high ({high})")
    shape = _sizes((size,) if is_size(size) else tuple(size))
    return dispatch(_P["randint"], (), {"low": low, "high": high, "shape": shape, "dtype": dt}, dev)


def randperm(n, dtype=None, device=None):
    dt, dev = _factory_args(dtype, device, D.int64)
    return dispatch(_P["randperm"], (), {"n": int(n), "dtype": dt}, dev)


def _rebuild(arr, requires_grad, device="cpu"):
    """Unpickle a tensor (on the device it was pickled from)."""
    return tensor(arr, device=device, requires_grad=requires_grad)


_ONES = {}


def _implicit_gradient(shape, dtype, dev=CPU, private=False):
    """A shared read-only ones array of `shape` on `dev`: backward()'s gradient (VJP rules only read
    their cotangents, the engine copies one before storing it as a .grad, and a compiled backward
    binds the same array each call). A device array cannot be marked read-only; nothing writes it.
    `private`: a new array instead."""
    if private:
        return _alloc(shape, 1, dtype, dev)
    key = (shape, dtype, dev.type)
    arr = _ONES.get(key)
    if arr is None:
        arr = _ONES[key] = _alloc(shape, 1, dtype, dev)
        if dev.type != "cuda":
            arr.flags.writeable = False
    return arr

