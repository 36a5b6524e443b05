"""Which dtypes exist, how they map to NumPy, and how they promote (PyTorch's rules)."""
import numpy as np

from .symint import is_size


class DType:
    """A tensor element type: `tg.float32`, ... Compares equal to itself only."""

    __slots__ = ("name", "short", "np", "kind", "itemsize")

    def __init__(self, name, short, npdtype, kind):
        self.name, self.short, self.np, self.kind = name, short, np.dtype(npdtype), kind
        self.itemsize = self.np.itemsize

    is_floating_point = property(lambda self: self.kind == 2)

    def __repr__(self):
        return f"tracegrad.{self.name}"

    def __reduce__(self):
        return (from_name, (self.name,))


# kind: 0 bool, 1 integer, 2 floating — promotion goes to the higher kind.
bool_ = DType("bool", "bool", np.bool_, 0)
uint8 = DType("uint8", "u8", np.uint8, 1)
int8 = DType("int8", "i8", np.int8, 1)
int16 = DType("int16", "i16", np.int16, 1)
int32 = DType("int32", "i32", np.int32, 1)
int64 = DType("int64", "i64", np.int64, 1)
float16 = DType("float16", "f16", np.float16, 2)
float32 = DType("float32", "f32", np.float32, 2)
float64 = DType("float64", "f64", np.float64, 2)
ALL = (bool_, uint8, int8, int16, int32, int64, float16, float32, float64)
SMALL_INTS = (bool_, uint8, int8, int16, int32)   # sum/prod/cumsum accumulate these in int64, as PyTorch does
default_float = float32      # read as D.default_float at each use: tg.set_default_dtype changes it
_BY_NP = {d.np: d for d in ALL}
_BY_NAME = {d.name: d for d in ALL} | {d.short: d for d in ALL}


def from_name(name):
    """The dtype called `name` ("float32" or the IR's short "f32")."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise ValueError(f"unknown dtype {name!r}; expected one of {', '.join(d.name for d in ALL)}") from None


def from_numpy(npdtype):
    """The tracegrad dtype of a NumPy dtype; TypeError for ones tracegrad has no counterpart for."""
    try:
        npdtype = np.dtype(npdtype)
    except Exception:
        raise TypeError(f"dtype must be a tracegrad dtype such as tg.float32, not {npdtype!r}") from None
    if npdtype in _BY_NP:
        return _BY_NP[npdtype]
    raise TypeError(f"NumPy dtype {npdtype} is not supported; convert the array to one of "
                    f"{', '.join(d.name for d in ALL)} first (e.g. arr.astype(np.int64))")


def to_dtype(d):
    """Accept a tracegrad dtype, a NumPy dtype / type, or a name; return the DType."""
    if isinstance(d, DType):
        return d
    if isinstance(d, str):
        return from_name(d)
    if d is float:
        return float32
    if d is int:
        return int64
    if d is bool:
        return bool_
    try:
        return from_numpy(d)
    except TypeError:
        raise
    except Exception:
        raise TypeError(f"dtype must be a tracegrad dtype such as tg.float32, not {d!r}") from None


def _wider(a, b):
    """torch.promote_types for two dtypes: the higher kind wins; within integers NumPy's table is
    PyTorch's (uint8 with int8 gives int16); within floats the wider one."""
    if a.kind != b.kind:
        return a if a.kind > b.kind else b
    if a.kind == 1:
        return _BY_NP[np.promote_types(a.np, b.np)]
    return a if a.itemsize >= b.itemsize else b


promote_types = _wider


def scalar_dtype(v):
    """The dtype a Python scalar stands for when it is the only operand of its kind."""
    if isinstance(v, (bool, np.bool_)):
        return bool_
    if isinstance(v, (int, np.integer)) or is_size(v):      # a SymInt too
        return int64
    return default_float


def result_type(dims, zero_dims, scalars):
    """PyTorch's promotion: tensors with dimensions win over 0-d tensors, which win over
    Python scalars, unless a lower-priority group is of a higher kind (int vs float)."""
    result = None
    for group in (dims, zero_dims, scalars):
        if not group:
            continue
        g = group[0]
        for d in group[1:]:
            g = _wider(g, d)
        if result is None:
            result = g
        elif g.kind > result.kind:
            result = default_float if group is scalars and g.kind == 2 else g
    return result


def set_default_dtype(d):
    """tg.set_default_dtype: the dtype of float data, float factories and Python floats."""
    global default_float
    d = to_dtype(d)
    if not d.is_floating_point:
        raise TypeError(f"only floating-point types are supported as the default type, got {d}")
    default_float = d


def get_default_dtype():
    return default_float
