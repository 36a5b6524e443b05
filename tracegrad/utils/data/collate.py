"""How a DataLoader turns a list of samples into a batch (default_collate) or converts one sample
(default_convert, without batching), as PyTorch's."""
import numpy as np

from ...tensor import Tensor, as_tensor, stack, tensor
from ... import dtypes as D


def default_collate(batch):
    """Tensors are stacked along a new first dimension, NumPy arrays likewise (as tensors), Python
    floats become a float64 tensor, ints an int64 one, bools a bool one; dicts are collated key by key,
    tuples and lists position by position (into a list, as PyTorch; named tuples keep their type);
    strings are left as a list."""
    elem = batch[0]
    if isinstance(elem, Tensor):
        return stack(list(batch), 0)
    if isinstance(elem, np.ndarray):
        if elem.dtype.kind in "OSU":
            raise TypeError(f"default_collate: NumPy arrays of dtype {elem.dtype} cannot be batched")
        return stack([as_tensor(b) for b in batch], 0)
    if isinstance(elem, np.generic):
        return tensor(np.array(batch))
    if isinstance(elem, bool):
        return tensor(batch, dtype=D.bool_)
    if isinstance(elem, float):
        return tensor(batch, dtype=D.float64)
    if isinstance(elem, int):
        return tensor(batch, dtype=D.int64)
    if isinstance(elem, (str, bytes)):
        return list(batch)
    if isinstance(elem, dict):
        return type(elem)((k, default_collate([d[k] for d in batch])) for k in elem) if type(elem) is not dict \
            else {k: default_collate([d[k] for d in batch]) for k in elem}
    if isinstance(elem, tuple) and hasattr(elem, "_fields"):
        return type(elem)(*(default_collate(list(s)) for s in zip(*batch)))
    if isinstance(elem, (tuple, list)):
        if any(len(b) != len(elem) for b in batch):
            raise RuntimeError("each element in list of batch should be of equal size")
        return [default_collate(list(s)) for s in zip(*batch)]
    raise TypeError(f"default_collate: batch must contain tensors, numpy arrays, numbers, dicts or lists; found "
                    f"{type(elem)}")


def default_convert(data):
    """One sample without batching: NumPy arrays become tensors, containers are walked."""
    if isinstance(data, np.ndarray) and data.dtype.kind not in "OSU":
        return as_tensor(data)
    if isinstance(data, dict):
        return {k: default_convert(v) for k, v in data.items()}
    if isinstance(data, tuple) and hasattr(data, "_fields"):
        return type(data)(*(default_convert(v) for v in data))
    if isinstance(data, (tuple, list)):
        return type(data)(default_convert(v) for v in data)
    return data
