"""What a tensor holds: storage, shape, dtype, device, autograd state; its conversions to Python.

`TensorBase` has no operations; the `Tensor` class (tensor_class.py) adds them as thin calls into
the modules of this package. Modules below the class make eager tensors with `new`.
"""
import math

import numpy as np

from .. import dtypes as D
from .. import ops
from ..backends.cuda import memory
from ..device import CPU, get_default_device
from ..autograd import add_hook, retain
from ..modes import _thread, interpreter
from ..printing import format_tensor
from ..size import Size
from ..strides import contiguous_strides


class TraceError(RuntimeError):
    """Python control flow or data access that depends on traced tensor values."""


class _ArgError(ValueError, RuntimeError):
    """A bad argument value (a negative size, an unknown mode): RuntimeError as PyTorch raises, ValueError too."""


_EAGER = []   # [the Tensor class]: registered by tensor_class.py, which is defined above this module


def new(arr, dtype, dev=CPU):
    """An eager tensor over the array `arr` (a NumPy array, or a device array for a cuda `dev`: a NumPy
    array given for a cuda tensor is copied to the device)."""
    if dev.type == "cuda" and not memory.is_device_array(arr):
        arr = memory.copy(np.asarray(arr, dtype=dtype.np), "device")
    return _EAGER[0]._wrap(arr, dtype, dev)


def _row_major_copy(arr):
    """A row-major copy of a NumPy or device array."""
    return memory.contiguous(arr) if memory.is_device_array(arr) else np.ascontiguousarray(arr)


def shares_memory(a, b):
    """Whether two eager tensors' memory may overlap (NumPy or device arrays)."""
    if a._device.type == "cuda" and b._device.type == "cuda":
        return memory.may_share_memory(a._data, b._data)
    return a._device == b._device and np.may_share_memory(a._data, b._data)


def register(cls):
    """Make `cls` the class of the tensors `new` returns."""
    _EAGER[:] = [cls]
    return cls


_new_object = object.__new__


class TensorBase:
    """The state of a tensor and its attributes; see Tensor for the operations."""

    __slots__ = ("_data", "_shape", "_dtype", "_device", "_ver", "_base", "_view", "_requires_grad", "_grad",
                 "grad_fn", "_oi", "_ir", "_tangent", "_retains_grad", "__weakref__")
    __array_priority__ = 1000
    _loc = None        # where the value was made (file:line), for traced values

    def __init__(self, *args, **kwargs):
        raise TypeError("create tensors with tg.tensor(data), tg.zeros(...), tg.from_numpy(array), ...")

    @classmethod
    def _wrap(cls, arr, dtype, dev=CPU):
        """A tensor of class `cls` over array `arr` (None for a traced value: the tracer sets its shape)."""
        t = _new_object(cls)           # one store per slot (tuple assignments build and unpack a tuple)
        t._data = arr
        t._shape = tuple(arr.shape) if arr is not None else None
        t._dtype = dtype
        t._device = dev
        t._ver = [0]
        t._base = t._view = t._grad = t.grad_fn = t._ir = t._tangent = None
        t._requires_grad = t._retains_grad = False
        t._oi = 0
        return t

    @classmethod
    def _zeros(cls, shape, dtype, dev):
        """A new tensor of zeros on `dev` (made there: no copy)."""
        if dev.type == "cuda":
            from ..backends.cuda.eager.kernels import zeros
            return cls._wrap(zeros(shape, dtype.np), dtype, dev)
        return cls._wrap(np.zeros(shape, dtype.np), dtype, dev)

    # ------------------------------------------------------------ attributes
    shape = property(lambda self: self._shape)
    dtype = property(lambda self: self._dtype)
    device = property(lambda self: self._device)
    ndim = property(lambda self: len(self._shape))
    is_leaf = property(lambda self: self.grad_fn is None)
    is_cuda = property(lambda self: self._device.type == "cuda")
    T = property(lambda self: self.permute(*range(self.ndim - 1, -1, -1)))
    mT = property(lambda self: self.transpose(-2, -1))
    itemsize = property(lambda self: self._dtype.itemsize)
    nbytes = property(lambda self: self.numel() * self._dtype.itemsize)

    _version = property(lambda self: self._ver[0], doc="the in-place version counter, as PyTorch's")

    def dim(self):
        return len(self._shape)

    def numel(self):
        return math.prod(self._shape)

    def size(self, dim=None):
        """The shape as a tg.Size (torch.Size), or the size of axis `dim`."""
        return Size(self._shape) if dim is None else self._shape[ops._norm_axis(dim, self.ndim)]

    def __len__(self):
        if not self._shape:
            raise TypeError("len() of a 0-d tensor")
        return int(self._shape[0])      # a symbolic size: pinned (a guard), as len() must give an int

    def element_size(self):
        return self._dtype.itemsize

    def _concrete(self, what):
        """The array (NumPy, or a device array for a cuda tensor), for `what` (a traced value has none:
        it raises a TraceError instead)."""
        return self._data

    def _host(self, what):
        """The values as a NumPy array: a cuda tensor's are copied to the host."""
        arr = self._concrete(what)
        return memory.copy(arr, "host") if self._device.type == "cuda" else arr

    def _row_major(self):
        if self._device.type == "cuda":
            return memory.row_major(self._data)
        return self._data.flags.c_contiguous

    def _viewable(self, shape):
        """Whether `shape` is a view of this tensor's memory layout (no copy)."""
        if self._device.type == "cuda":
            return ops.layout.reshape_strides(self._shape, memory.strides_of(self._data), shape) is not None
        try:
            np.reshape(self._data, shape, copy=False)
        except ValueError:
            return False
        return True

    def _alias(self):
        """A new tensor object over the same value, with no autograd history and its own version."""
        t = object.__new__(type(self))
        t._data, t._shape, t._dtype, t._device, t._ir = self._data, self._shape, self._dtype, self._device, self._ir
        t._ver, t._base, t._view, t._requires_grad, t._grad, t.grad_fn, t._oi, t._tangent, t._retains_grad = \
            [0], None, None, False, None, None, 0, None, False
        return t

    def stride(self, dim=None):
        arr = self._concrete("stride()")
        if self._row_major():  # PyTorch's strides (NumPy's differ for size-0 and size-1 dims)
            s = contiguous_strides(self._shape)
        else:
            s = tuple(b // self.itemsize for b in arr.strides)
        return s if dim is None else s[ops._norm_axis(dim, self.ndim)]

    def is_contiguous(self):
        self._concrete("is_contiguous()")
        return bool(self._row_major())

    def data_ptr(self):
        arr = self._concrete("data_ptr()")
        return memory.data_ptr(arr) if self._device.type == "cuda" else arr.ctypes.data

    def storage_offset(self):
        arr = self._concrete("storage_offset()")
        if self._device.type == "cuda":
            return memory.storage_offset(arr)
        root = arr
        while isinstance(root.base, np.ndarray):
            root = root.base
        return (arr.ctypes.data - root.ctypes.data) // self.itemsize

    @property
    def data(self):
        return self._alias()

    @data.setter
    def data(self, value):
        if not isinstance(value, TensorBase):
            raise TypeError(f"data must be a tensor, not {type(value).__name__}")
        if type(value) is not type(self):
            raise TraceError("inside a compiled function, assigning .data between a traced tensor and a real one "
                             "is not supported; update the tensor in place instead (with tg.no_grad(): "
                             "t.copy_(value))")
        self._data, self._shape, self._dtype, self._device = value._data, value._shape, value._dtype, value._device
        self._ir = value._ir

    @property
    def requires_grad(self):
        return self._requires_grad

    @requires_grad.setter
    def requires_grad(self, value):
        if value and self._dtype is not None and not self._dtype.is_floating_point:
            raise RuntimeError(f"only Tensors of floating point dtype can require gradients, got {self._dtype}")
        if self.grad_fn is not None and not value:
            raise RuntimeError("you can only change requires_grad flags of leaf variables. If you want to use a "
                               "computed variable in a subgraph that doesn't require differentiation use "
                               "var_no_grad = var.detach().")
        self._requires_grad = value

    @property
    def grad(self):
        stack = _thread.interpreters       # none pushed (eager): the field itself
        return stack[-1].grad_access(self)._grad if stack else self._grad

    @grad.setter
    def grad(self, value):
        if value is not None:
            if not isinstance(value, TensorBase):
                raise TypeError(f"assigned grad expected to be a Tensor or None but got {type(value).__name__}")
            if value._shape != self._shape:
                raise RuntimeError(f"assigned grad has data of a different size: {value._shape} vs {self._shape}")
        stack = _thread.interpreters
        if stack:
            self = stack[-1].grad_access(self, write=True)   # the tensor holding the gradient (a tracer's stand-in)
        self._grad = value

    def requires_grad_(self, requires_grad=True):
        self.requires_grad = bool(requires_grad)
        return self

    def retain_grad(self):
        """Keep this non-leaf tensor's gradient in .grad when backward runs (a leaf keeps it anyway)."""
        if self.grad_fn is None:
            if not self._requires_grad:
                raise RuntimeError("can't retain_grad on Tensor that has requires_grad=False")
            return self
        if not self._retains_grad:
            self._retains_grad = True
            retain(self)
        return self

    def register_hook(self, hook):
        """hook(grad) runs when backward computes this tensor's gradient and may return a replacement
        (for a leaf: before it is accumulated into .grad). Returns a handle whose remove() unregisters it."""
        if not self._requires_grad:
            raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
        if _thread.interpreters:
            raise TraceError("Tensor.register_hook inside a compiled function is not supported: the backward of "
                             "a compiled function is derived from its graph, where a Python hook cannot run. "
                             "Register the hook outside (on a parameter or an output) and call backward() outside")
        return add_hook(self, hook)

    @property
    def retains_grad(self):
        return self._retains_grad

    def detach(self):
        """The same value without autograd history (sharing memory and the version counter)."""
        src = interpreter().lift(self)     # inside a compiled function: the graph's input
        t = src._alias()
        t._ver, t._base = src._ver, src._base
        return t

    def detach_(self):
        self.grad_fn, self.requires_grad = None, False
        return self

    # ------------------------------------------------------------ out to Python / NumPy
    def numpy(self):
        if self.requires_grad:
            raise RuntimeError("Can't call numpy() on Tensor that requires grad. Use tensor.detach().numpy() instead.")
        self._on_host("numpy()")
        arr = self._concrete("numpy()")
        if _thread.interpreters:
            self._values_read()
        return arr

    def _values_read(self):
        """Values of a real tensor read as Python values (numpy(), item(), tolist(), float()...) while
        a function is traced: the tracer records the read (the compiled call's guards compare them)."""
        for i in _thread.interpreters:
            read = getattr(i, "values_read", None)
            if read is not None:
                read(self)

    def _on_host(self, what):
        if self._device.type == "cuda":
            raise TypeError(f"can't convert {self._device} device type tensor to numpy. Use Tensor.cpu() to copy "
                            f"the tensor to host memory first.")

    @property
    def __cuda_array_interface__(self):
        """A cuda tensor's memory for CuPy, numba or PyTorch, without a copy (as PyTorch exports it)."""
        if self._device.type != "cuda":
            raise AttributeError(f"Can't get __cuda_array_interface__ on non-CUDA tensor type: {self._device}")
        if self.requires_grad:
            raise RuntimeError("Can't get __cuda_array_interface__ on Variable that requires grad. If gradients "
                               "aren't required, use var.detach() to get Variable that doesn't require grad.")
        return self._concrete("__cuda_array_interface__").__cuda_array_interface__

    def __array__(self, dtype=None, copy=None):
        self._on_host("conversion to a NumPy array")
        arr = self._concrete("conversion to a NumPy array")
        if _thread.interpreters:
            self._values_read()
        return arr if dtype is None else arr.astype(dtype)

    def item(self):
        return self._scalar_value("item()")

    def tolist(self):
        arr = self._host("tolist()")
        if _thread.interpreters:
            self._values_read()
        return arr.tolist()

    def __float__(self):
        return float(self._scalar_value("float()"))

    def __int__(self):
        return int(self._scalar_value("int()"))

    def __index__(self):
        if self._dtype.is_floating_point or self._dtype is D.bool_:
            raise TypeError("only integer tensors of a single element can be converted to an index")
        return int(self._scalar_value("an index"))

    def __bool__(self):
        return bool(self._scalar_value("bool()"))

    def _scalar_value(self, what):
        """The one element, as a Python number (a cuda tensor's one element is copied to the host)."""
        arr = self._concrete(what)
        if _thread.interpreters:
            self._values_read()
        if arr.size != 1:
            raise RuntimeError(f"a Tensor with {arr.size} elements cannot be converted to Scalar"
                               if what != "bool()" else
                               "Boolean value of Tensor with more than one value is ambiguous")
        return self._host(what).reshape(()).item()

    def __repr__(self):
        suffixes = []
        if self._device.type != get_default_device().type:     # as PyTorch: a device other than the default
            suffixes.append(f"device='{self._device}'")
        if self.numel() == 0:
            if self.ndim != 1:
                suffixes.append(f"size={self._shape}")
            if self._dtype is not D.float32:
                suffixes.append(f"dtype={self._dtype}")
        elif self._dtype not in (D.float32, D.int64, D.bool_):
            suffixes.append(f"dtype={self._dtype}")
        if self.grad_fn is not None:
            suffixes.append(f"grad_fn=<{self.grad_fn.name()}>")
        elif self.requires_grad:
            suffixes.append("requires_grad=True")
        return format_tensor(self._host("printing"), suffixes)

    __str__ = __repr__

    def __format__(self, spec):
        if self.numel() == 1 and spec:
            return format(self.item(), spec)
        return repr(self) if not spec else format(repr(self), spec)

    def __hash__(self):
        return id(self)

    def __iter__(self):
        if not self._shape:
            raise TypeError("iteration over a 0-d tensor")
        return (self[i] for i in range(self._shape[0]))

