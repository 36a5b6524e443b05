"""After a compiled call: write the new values of updated tensors and .grad fields back into the
caller's tensors, as the eager function would have left them — and keep the values the backward
reads safe from those writes."""
import numpy as np

from ..ops import PRIMS
from ..tensor import Tensor
from ..backends.cuda.run import copy_into, device_copy, shares_memory


# graph-input sources resolved per call to a tensor the caller holds: an argument, its .grad, the
# .grad of a captured tensor (a module's parameter)
CALLERS = ("arg", "grad", "grad_of")


def resolve(source, real, leaves):
    """The caller's tensor behind a graph input: an argument, an argument's .grad, a captured tensor's
    .grad, a dynamic number attribute, or the captured tensor itself."""
    kind = source[0]
    if kind == "arg":
        return leaves[source[1]]
    if kind == "grad":
        return leaves[source[1]]._grad
    if kind == "grad_of":
        return source[1]._grad
    if kind == "dynamic":           # a number read per call: (object or dict, attribute or key, dtype, device)
        _, holder, key, dtype, dev = source
        return Tensor._wrap(np.array(holder[key] if type(holder) is dict else getattr(holder, key), dtype.np),
                            dtype, dev)
    return real


def write_back(entry, outs, leaves, fresh):
    """Apply entry's mutations (in-place updates), then its .grad assignments from the program's
    outputs. A .grad the function replaced is a new tensor, as eagerly (a reference to the old one
    keeps its values); one the function updated in place is a mutation."""
    copyto = copy_into if entry.on_device else np.copyto
    n = entry.n_user
    # captured tensors (a module's parameters, an optimizer's buffers) are fixed: no lookup per call
    for t, j, bump in entry.mutated_fixed:
        arr = outs[n + j]
        if arr is not t._data:              # unless the kernel already wrote in place
            copyto(t._data, arr)
        t._ver[0] += bump                   # the in-place updates the function made, as eagerly
    for (source, real), j, bump in entry.mutated_per_call:
        t, arr = resolve(source, real, leaves), outs[n + j]
        if arr is not t._data:
            copyto(t._data, arr)
        t._ver[0] += bump
    made, arrays = {}, Seen()
    for target, how in entry.grad_writes:
        t = leaves[target[1]] if target[0] == "arg" else target[1]
        if how is None or len(how) == 2:    # None, or (source, real) of a tensor the caller holds
            t._grad = how and resolve(*how, leaves)
            continue
        g = made.get(how[0])
        if g is None:               # (output, dtype, device, the in-place updates the function made on it)
            j, dtype, dev, ver = how
            arr = separate(outs[j] if j in entry.fwd_fresh else fresh(outs[j]), arrays)
            g = made[j] = Tensor._wrap(arr, dtype, dev)
            g._ver[0] = ver
        t._grad = g


class Seen:
    """The arrays given to .grad fields in one call (`separate`), by the NumPy array owning their memory
    (None: a device array, or memory NumPy does not own): arrays of two owners never share memory, so
    each is compared with those of its own owner and the unknown ones only (W12's 28 gradients: 378
    overlap tests per call before, 0.17 ms of a 14 ms step)."""
    __slots__ = ("owned", "unknown")

    def __init__(self):
        self.owned, self.unknown = {}, []

    def near(self, own):
        """The arrays seen that may share memory with one whose memory `own` owns."""
        if own is None:
            return [a for arrays in self.owned.values() for a in arrays] + self.unknown
        return self.owned.get(id(own), []) + self.unknown

    def add(self, arr, own):
        (self.unknown if own is None else self.owned.setdefault(id(own), [])).append(arr)


def _owner(a):
    """The NumPy array owning a's memory, or None (a device array; memory from elsewhere)."""
    if not isinstance(a, np.ndarray):
        return None
    b = a.base
    if b is None:
        return a if a.flags.owndata else None
    return b if type(b) is np.ndarray and b.base is None and b.flags.owndata else None


def separate(arr, seen):
    """arr, or a copy of it where it shares memory with an array in `seen` (a Seen: the program's outputs
    for one value, the gradient of two tensors: an RNN's b_ih and b_hh, added), added to `seen`: each
    .grad its own memory, as eagerly, so a later call accumulating into one leaves the other alone."""
    own = _owner(arr)
    if any(shares_memory(arr, a) for a in seen.near(own)):
        arr = np.array(arr) if isinstance(arr, np.ndarray) else device_copy(arr)
        own = _owner(arr)
    seen.add(arr, own)
    return arr


class Fresh:
    """Copy arrays that alias an input, so results never share memory with arguments."""

    def __init__(self, inputs):
        self.inputs = inputs

    def __call__(self, arr):
        for a in self.inputs:
            if arr is a or np.may_share_memory(arr, a):
                return np.array(arr)
        return arr if arr.flags.writeable else np.array(arr)


def protect_reads(fwd, n_results, saved_at, written):
    """Results (fwd.outputs[:n_results]) and saved values (fwd.outputs[saved_at:]) that are, or
    view, a graph input the call overwrites (an in-place update, a .grad written into) become
    copies taken in the forward: the caller and the backward must see the values the forward
    computed, not what was written into that memory afterwards."""
    if not written:
        return fwd
    clobbered = {id(fwd.inputs[i]) for i in written}
    copies = {}
    for j in [*range(n_results), *range(saved_at, len(fwd.outputs))]:
        v = fwd.outputs[j]
        if not views_of(v, clobbered):
            continue
        if id(v) not in copies:
            c = fwd.add("copy", [v], {}, v.shape, v.dtype)
            node = fwd.nodes.pop()          # right after v is made: before anything writes there
            at = next((k + 1 for k, n in enumerate(fwd.nodes) if n.out is v), 0)
            fwd.nodes.insert(at, node)
            copies[id(v)] = c
        fwd.outputs[j] = copies[id(v)]
    return fwd


def views_of(v, values):
    """Whether v is one of `values` or a view of one (through movement ops)."""
    while True:
        if id(v) in values:
            return True
        n = v.node
        if n is None or len(n.inputs) != 1 or PRIMS.get(n.op) is None or PRIMS[n.op].kind not in ("movement", "view"):
            return False
        v = n.inputs[0]


def raise_read_only(fn_name, name, t):
    expanded = any(st == 0 and n > 1 for st, n in zip(t._data.strides, t._data.shape))
    what = ("an expanded tensor (several elements share one memory location)" if expanded else
            "read-only memory (a NumPy array with writeable=False, np.frombuffer over bytes, a read-only mmap)")
    raise RuntimeError(f"compiled function {fn_name} updates {name} in place, but {name} "
                       f"{[*t._shape]} {t._dtype.name} is over {what}; nothing was run. Pass a writable copy "
                       f"({name}.clone(), or tg.tensor(array) for NumPy data)")
