"""The eager elementwise and reduction primitives whose kernels the cuda compiler generates: scans
(scan.py: prod, cumsum, prod_others) and every primitive with a scalar lowering (pointwise.py). This
module sits above the compiler; tracegrad/cuda installs `run` into the eager dispatcher (__init__.py).
"""
from .. import memory
from . import _on_device, pointwise, scan


def run(p, arrays, attrs, shape, dtype):
    """Primitive `p` on device arrays (0-d host arrays: scalar operands), as the dispatcher's kinds."""
    special = getattr(scan, "run_" + p.name, None)
    if special is not None:
        return special([_on_device(a) for a in arrays], attrs, tuple(shape), dtype.np)
    return pointwise.run(p, [a if memory.is_device_array(a) else memory.constant(a) for a in arrays], attrs,
                         shape, dtype)
