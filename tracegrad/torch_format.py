"""Read a checkpoint written by torch.save (a zip: <archive>/data.pkl, <archive>/data/<key> storages,
<archive>/byteorder) without importing torch. The pickle is read by an unpickler that resolves only
the names a tensor checkpoint needs — torch's tensor and parameter rebuild functions, its storage
types and dtypes, OrderedDict — as torch.load(weights_only=True) does; any other name is refused,
so loading cannot run code."""
import pickle
import warnings
from collections import OrderedDict

import numpy as np

from . import dtypes as D
from .device import device as Device
from .tensor import tensor as make_tensor

# torch's storage classes and dtypes -> (NumPy dtype of the bytes, tracegrad dtype name)
_STORAGES = {"DoubleStorage": "float64", "FloatStorage": "float32", "HalfStorage": "float16",
             "LongStorage": "int64", "IntStorage": "int32", "ShortStorage": "int16", "CharStorage": "int8",
             "ByteStorage": "uint8", "BoolStorage": "bool", "BFloat16Storage": "bfloat16"}
_DTYPES = {"float64": "float64", "double": "float64", "float32": "float32", "float": "float32",
           "float16": "float16", "half": "float16", "int64": "int64", "long": "int64", "int32": "int32",
           "int": "int32", "int16": "int16", "short": "int16", "int8": "int8", "uint8": "uint8", "bool": "bool",
           "bfloat16": "bfloat16"}


class _TorchDtype:
    """A torch dtype named in the pickle (the storage type of an untyped storage, or a plain value)."""

    def __init__(self, name):
        self.name = name


class _Storage:
    def __init__(self, array, location):
        self.array, self.location = array, location


def _bytes_dtype(name):
    if name == "bfloat16":
        return np.dtype("<u2")
    return np.dtype(np.bool_ if name == "bool" else name).newbyteorder("<")


class _Rebuilder:
    """What the unpickler's names resolve to, for one archive."""

    def __init__(self, z, prefix, target):
        self.z, self.prefix, self.target, self.big_endian = z, prefix, target, False
        if f"{prefix}byteorder" in z.namelist():
            self.big_endian = z.read(f"{prefix}byteorder").strip() == b"big"
        self.storages = {}

    def storage(self, pid):
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"):
            raise pickle.UnpicklingError(f"unsupported persistent id in a PyTorch checkpoint: {pid!r}")
        _, kind, key, location, _numel = pid
        if key not in self.storages:
            name = kind.name
            dt = _bytes_dtype(name)
            dt = dt.newbyteorder(">") if self.big_endian else dt
            raw = np.frombuffer(self.z.read(f"{self.prefix}data/{key}"), dtype=dt)
            self.storages[key] = _Storage((raw, name), location)
        return self.storages[key]

    def rebuild_tensor(self, storage, offset, size, stride, requires_grad=False, backward_hooks=None, metadata=None):
        (raw, name), size, stride = storage.array, tuple(size), tuple(stride)
        if all(n > 0 for n in size):
            last = offset + sum((n - 1) * s for n, s in zip(size, stride))
            if offset < 0 or min(stride, default=0) < 0 or last >= raw.size:
                raise pickle.UnpicklingError(f"a tensor of size {size} and stride {stride} at offset {offset} does "
                                             f"not fit its storage of {raw.size} elements")
            view = np.lib.stride_tricks.as_strided(raw[offset:], shape=size,
                                                   strides=tuple(s * raw.itemsize for s in stride))
        else:
            view = np.empty(size, raw.dtype)
        arr = np.array(view, dtype=raw.dtype.newbyteorder("="))
        if name == "bfloat16":
            warnings.warn("a bfloat16 tensor in a PyTorch checkpoint was loaded as float32 (exactly: every bfloat16 "
                          "value is a float32); tracegrad has no bfloat16 dtype", UserWarning, stacklevel=6)
            arr, name = (arr.astype(np.uint32) << 16).view(np.float32), "float32"
        return make_tensor(arr, dtype=D.to_dtype(name), device=self.target(storage.location),
                           requires_grad=bool(requires_grad))

    @staticmethod
    def rebuild_parameter(data, requires_grad, backward_hooks, state=None):
        return data.detach().requires_grad_(bool(requires_grad))

    def names(self):
        out = {("torch._utils", "_rebuild_tensor_v2"): self.rebuild_tensor,
               ("torch._utils", "_rebuild_tensor"): self.rebuild_tensor,
               ("torch._utils", "_rebuild_parameter"): self.rebuild_parameter,
               ("torch._utils", "_rebuild_parameter_with_state"): self.rebuild_parameter,
               ("collections", "OrderedDict"): OrderedDict,
               ("torch", "Size"): tuple,
               ("torch", "device"): Device,
               ("builtins", "set"): set, ("builtins", "frozenset"): frozenset, ("builtins", "slice"): slice,
               ("builtins", "complex"): complex}
        out.update({("torch", k): _TorchDtype(v) for k, v in _STORAGES.items()})
        out.update({("torch", k): _TorchDtype(v) for k, v in _DTYPES.items()})
        return out


class _RestrictedUnpickler(pickle.Unpickler):
    def __init__(self, data, rebuilder):
        import io
        super().__init__(io.BytesIO(data))
        self.rebuilder, self.allowed = rebuilder, rebuilder.names()

    def find_class(self, module, name):
        found = self.allowed.get((module, name))
        if found is None:
            raise pickle.UnpicklingError(
                f"the PyTorch checkpoint refers to {module}.{name}, which tg.load does not load: only tensors, "
                f"parameters and plain containers (dict, list, tuple, numbers, strings) are read, so that loading "
                f"never runs code. Save a state_dict (model.state_dict(), optimizer.state_dict()) in torch instead "
                f"of a whole object")
        return found

    def persistent_load(self, pid):
        return self.rebuilder.storage(pid)


def load_torch(z, prefix, target):
    """The object in a torch.save archive whose entries start with `prefix`; target(location) gives
    the tracegrad device for a storage saved at `location` ("cpu", "cuda:0")."""
    rebuilder = _Rebuilder(z, prefix, target)
    obj = _RestrictedUnpickler(z.read(f"{prefix}data.pkl"), rebuilder).load()
    return _plain(obj)


def _plain(o):
    """torch dtypes among the values become tracegrad dtypes; containers are walked."""
    if isinstance(o, _TorchDtype):
        return D.to_dtype(o.name) if o.name != "bfloat16" else o.name
    if isinstance(o, OrderedDict):
        out = OrderedDict((k, _plain(v)) for k, v in o.items())
        if hasattr(o, "_metadata"):
            out._metadata = o._metadata
        return out
    if isinstance(o, dict):
        return {k: _plain(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return type(o)(_plain(v) for v in o)
    return o
