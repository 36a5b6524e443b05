"""Where a compiled signature runs: the device of its inputs decides the backend (cuda tensors:
"cuda", else "llvm"); mixing devices is the SPEC's device error. For the cuda backend: the device
operations the program runner (program.py) is handed, and what a call does with device
arrays (number inputs kept on the device, copies that keep results apart from inputs)."""
import numpy as np

from ...device import CPU, mismatch_error

CPU_BACKENDS = ("llvm", "interpret")


def choose_backend(requested, name, order):
    """(backend, device) for a signature whose graph inputs are tracer entries `order`. Python
    numbers and 0-d cpu tensors go with any device; other tensors on two devices raise the SPEC's
    error (devices in input order)."""
    first = None
    for e in order:
        dev = e.real._device
        if dev == CPU and (e.source[0] == "dynamic" or not e.real._shape):
            continue
        if first is None:
            first = dev
        elif dev != first:
            raise mismatch_error(first, dev)
    dev = first if first is not None else CPU
    if requested is None:
        return ("cuda" if dev.type == "cuda" else "llvm"), dev
    if requested == "cuda" and dev.type != "cuda":
        raise RuntimeError(f"compiled function {name}: backend='cuda' runs on cuda tensors, but its inputs are on "
                           f"{dev}; move them with .cuda() / .to('cuda') (Module.to('cuda') for a model), or leave "
                           f"backend unset")
    if requested == "llvm" and dev.type == "cuda":
        raise RuntimeError(f"compiled function {name}: backend='llvm' runs on the cpu, but its inputs are on {dev}; "
                           f"use backend='cuda' (the default for cuda tensors) or move them with .cpu()")
    return requested, dev


def cuda_ops():
    """The device operations of tracegrad.cuda, as program.py takes them."""
    from numba import cuda

    from .program import DeviceOps, wall_timer
    from . import memory
    from .gpu import simulated
    from .memory import synchronize

    def timer():
        if simulated():
            return wall_timer(synchronize)
        start, stop = cuda.event(timing=True), cuda.event(timing=True)
        return start.record, stop.record, lambda: cuda.event_elapsed_time(start, stop)
    return DeviceOps(empty=memory.empty, maker=memory.maker, view=memory.view, row_major=memory.row_major,
                     contiguous=memory.contiguous,
                     to_host=lambda a: memory.copy(a, "host"), library=library, synchronize=synchronize,
                     timer=timer)


def library(kernel):
    """fn(args) -> device array: an extern or host kernel's primitive run by tracegrad.cuda's eager
    implementation on the device (cuBLAS or the tiled kernel for matmul; gather, scatter-add, ...).
    Whether it has one is found out now, at compile time, by running it once on zeros (random draws
    excepted: they would move the generator): else the error naming the op and the device. fn(args,
    env) takes the symbols' values `env` of a program with symbolic sizes (its shape and attributes
    at the call's; the check runs at the hints)."""
    from .program import unsupported
    from . import eager
    from .eager.kernels import zeros
    from .sizes import at
    from ...ops import PRIMS
    from ...symint import free_symbols, hints, is_sym
    n = kernel.node
    p, shape, dtype, attrs = PRIMS[n.op], tuple(n.out.shape), n.out.dtype, n.attrs
    sized = free_symbols(shape) or any(free_symbols(a) or is_sym(a) for a in attrs.values())

    def fn(args, env=None):
        if sized:
            return eager.run(p, args, at(env, attrs), at(env, shape), dtype)
        return eager.run(p, args, attrs, shape, dtype)
    if not p.effect:
        try:
            eager.run(p, [zeros(hints(tuple(i.shape)), i.dtype.np) for i in n.inputs], hints(attrs), hints(shape),
                      dtype)
        except (NotImplementedError, RuntimeError) as e:      # tracegrad.cuda: no kernel for this primitive
            raise unsupported(kernel, str(e).split(";")[0].split(". ")[0]) from None
    return fn


def interpret_on_host(graph, arrays):
    """backend='interpret' on cuda tensors: the oracle on host copies, results back on the device."""
    from . import memory
    from ...ir.interpret import run
    host = [a if isinstance(a, np.ndarray) else memory.copy(a, "host") for a in arrays]
    return tuple(to_device(r) for r in run(graph, *host))


def to_device(a):
    """A device copy of host array `a`, of a's shape (0-d included)."""
    from . import memory
    d = memory.copy(a, "device")
    return d if d.shape == a.shape else d.reshape(a.shape)


def is_device_array(a):
    return not isinstance(a, np.ndarray) and bool(getattr(a, "__cuda_ndarray__", False))


class DeviceInputs:
    """A cuda entry's input arrays: tensors' device arrays as they are; host arrays (constants made
    while tracing, an optimizer's lr read per call, a 0-d cpu tensor) copied to the device once, and
    again only when a 0-d one holds other bits, so a steady training step copies nothing."""

    def __init__(self):
        self.kept = {}               # per input position: (host array, its value if 0-d, device array)

    def __call__(self, arrays):
        out = list(arrays)
        for i, a in enumerate(arrays):
            if isinstance(a, np.ndarray):    # a 0-d array by its bytes: updated in place, or -0.0 after 0.0
                kept, v = self.kept.get(i), (a.dtype, a.tobytes()) if a.ndim == 0 else None
                if kept is None or not (kept[1] == v if v is not None else kept[0] is a):
                    kept = self.kept[i] = (a, v, to_device(a))
                out[i] = kept[2]
        return out


def device_run(program):
    """run(arrays, sizes=None) of a device program, host arrays among `arrays` copied to the device
    (DeviceInputs); `sizes`: the symbols' values of a symbolic program."""
    inputs, run = DeviceInputs(), program.run
    return lambda arrays, sizes=None: run(inputs(arrays), sizes=sizes)


def shares_memory(a, b):
    """np.may_share_memory for NumPy and device arrays (memory of two devices never overlaps)."""
    host_a, host_b = isinstance(a, np.ndarray), isinstance(b, np.ndarray)
    if host_a and host_b:
        return np.may_share_memory(a, b)
    if host_a or host_b:
        return False
    from . import memory
    return memory.may_share_memory(a, b)


def overlapping(arrays):
    """{k: [the positions j != k, ascending, of the arrays that shares_memory(arrays[k], arrays[j])]} for
    the k that have any, without comparing every pair: host arrays by their memory extents (sorted by
    start, each compared with the extents still open), device arrays pairwise."""
    host, device, pairs = [], [], []
    for k, a in enumerate(arrays):
        if not isinstance(a, np.ndarray):
            device.append(k)
        elif a.size:                    # an empty array shares no memory
            host.append(_extent(a) + (k,))
    host.sort()
    open_ = []
    for lo, hi, k in host:
        open_ = [t for t in open_ if t[1] > lo]
        pairs += [(j, k) for _, _, j in open_]
        open_.append((lo, hi, k))
    pairs += [(j, k) for m, k in enumerate(device) for j in device[:m]]
    near = {}
    for j, k in pairs:
        if shares_memory(arrays[j], arrays[k]):
            near.setdefault(j, []).append(k)
            near.setdefault(k, []).append(j)
    return {k: sorted(js) for k, js in near.items()}


def _extent(a):
    """(first byte, one past the last byte) of the memory non-empty array `a` spans (np.may_share_memory's bounds)."""
    lo = hi = a.__array_interface__["data"][0]
    for n, st in zip(a.shape, a.strides):
        if st > 0:
            hi += st * (n - 1)
        else:
            lo += st * (n - 1)
    return lo, hi + a.itemsize


def expanded(a):
    """Whether several elements of array `a` share one memory location (a stride 0 over a longer axis)."""
    return any(st == 0 and n > 1 for st, n in zip(a.strides, a.shape))


def copy_into(dst, src):
    """dst[...] = src on the device (dst may be strided); a host dst (a 0-d cpu tensor a cuda call
    updated) gets a host copy."""
    if isinstance(dst, np.ndarray):
        np.copyto(dst, to_host([src], [0])[0])
        return
    from .eager.kernels import copy_strided
    copy_strided(src, dst)


def to_host(arrays, positions):
    """`arrays` with those at `positions` copied to the host: what a cuda call returns for cpu tensors
    (0-d cpu inputs, their gradients and .grad), which PyTorch keeps on the cpu."""
    from . import memory
    out = list(arrays)
    for j in positions:
        a = out[j]
        if not isinstance(a, np.ndarray):
            h = memory.copy(a, "host")
            out[j] = h if h.shape == a.shape else h.reshape(a.shape)
    return out


def device_copy(a):
    from . import memory
    return memory.contiguous(a)


class DeviceFresh:
    """Fresh (writeback.py) for device arrays: copy an output that may share memory with an input."""

    def __init__(self, inputs):
        self.inputs = [a for a in inputs if is_device_array(a)]

    def __call__(self, arr):
        from . import memory
        if isinstance(arr, np.ndarray):     # a host copy (to_host) is fresh
            return arr
        for a in self.inputs:
            if arr is a or memory.may_share_memory(arr, a):
                return device_copy(arr)
        return arr
