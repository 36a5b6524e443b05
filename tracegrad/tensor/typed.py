"""PyTorch's typed tensor constructors: tg.LongTensor([1, 2]), tg.FloatTensor(2, 3), ... make tensors
of their dtype as tg.Tensor(...) does of the default one, and isinstance(x, tg.LongTensor) is true
for a cpu int64 tensor."""
from .. import dtypes as D
from .base import TensorBase
from .factories import legacy_tensor


class _TypedTensorType(type):
    def __instancecheck__(cls, obj):
        return isinstance(obj, TensorBase) and obj._dtype is cls.dtype and obj._device.type == "cpu"


def _typed(name, dtype):
    def __new__(cls, *args, device=None):
        return legacy_tensor(args, device, dtype)
    return _TypedTensorType(name, (), {"__new__": __new__, "dtype": dtype, "__module__": "tracegrad",
                                       "__doc__": f"tg.{name}(data) / tg.{name}(*sizes): a tensor of {dtype}."})


FloatTensor = _typed("FloatTensor", D.float32)
DoubleTensor = _typed("DoubleTensor", D.float64)
HalfTensor = _typed("HalfTensor", D.float16)
LongTensor = _typed("LongTensor", D.int64)
IntTensor = _typed("IntTensor", D.int32)
ShortTensor = _typed("ShortTensor", D.int16)
CharTensor = _typed("CharTensor", D.int8)
ByteTensor = _typed("ByteTensor", D.uint8)
BoolTensor = _typed("BoolTensor", D.bool_)
