"""After a compiled call: write the new values of updated tensors and .grad fields back into the
caller's tensors, as the eager function would have left them."""
import numpy as np

from ..tensor import Tensor


def resolve(source, real, leaves):
    """The caller's tensor behind a graph input: an argument, an argument's .grad, or the captured
    tensor itself."""
    kind = source[0]
    if kind == "arg":
        return leaves[source[1]]
    if kind == "grad":
        return leaves[source[1]]._grad
    return real


def write_back(entry, outs, leaves, fresh):
    """Apply entry's mutations (in-place updates) and grad writes from the program's outputs."""
    if entry.mutations:
        for (source, real), arr in zip(entry.mutations, outs[entry.n_user:]):
            t = resolve(source, real, leaves)
            if arr is not t._data:          # unless the kernel already wrote in place
                np.copyto(t._data, arr)
            t._ver[0] += 1
    for (target, j) in entry.grad_writes:
        t = leaves[target[1]] if target[0] == "arg" else target[1]
        if j is None:
            t._grad = None
        elif t._grad is not None and t._grad._data is not None and t._grad._data.flags.writeable:
            np.copyto(t._grad._data, outs[j])
            t._grad._ver[0] += 1
        else:
            t._grad = Tensor._wrap(fresh(outs[j]), t._dtype, t._device)


class Fresh:
    """Copy arrays that alias an input, so results never share memory with arguments."""

    def __init__(self, inputs):
        self.inputs = inputs

    def __call__(self, arr):
        for a in self.inputs:
            if arr is a or np.may_share_memory(arr, a):
                return np.array(arr)
        return arr if arr.flags.writeable else np.array(arr)
