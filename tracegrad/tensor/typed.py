"""PyTorch's typed tensor constructors: tg.LongTensor([1, 2]), tg.FloatTensor(2, 3), ... make tensors
of their dtype as tg.Tensor(...) does of the default one, and isinstance(x, tg.LongTensor) is true
for a cpu int64 tensor; x.type() names x's and x.type(tg.LongTensor) converts x."""
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


_TYPED = (FloatTensor, DoubleTensor, HalfTensor, LongTensor, IntTensor, ShortTensor, CharTensor, ByteTensor,
          BoolTensor)


def type_of(x, dtype=None):
    """x.type(): "tracegrad.FloatTensor" ...; x.type(tg.LongTensor), x.type("torch.LongTensor") or
    x.type(tg.int64): x converted."""
    if dtype is None:
        return next(f"tracegrad.{c.__name__}" for c in _TYPED if c.dtype is x._dtype)
    if isinstance(dtype, str):
        name = dtype.rsplit(".", 1)[-1]
        match = [c for c in _TYPED if c.__name__ == name]
        if not match:
            raise ValueError(f"invalid type: {dtype!r}")
        dtype = match[0]
    return x.to(dtype.dtype if isinstance(dtype, _TypedTensorType) else dtype)
