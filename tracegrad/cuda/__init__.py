"""`tg.cuda`, as `torch.cuda`: the public face of the cuda backend, whose code lives in
tracegrad/backends/cuda/ (gpu.py: whether a device is usable; memory.py: device memory and
synchronization; info.py: backend_info; eager/: eager kernels; plan.py, lower.py, emit/, program.py: the
compiler). numba.cuda is imported on first use, so `import tracegrad` and every CPU feature work
without it.
"""
import os

from ..backends.cuda import eager
from ..backends.cuda import memory  # noqa: F401  (tg.cuda.memory.transfer_stats(), count_transfers())
from ..backends.cuda.gpu import (current_device, device_count, get_device_name, is_available,  # noqa: F401
                                 manual_seed, manual_seed_all, require, simulated)
from ..backends.cuda.info import backend_info  # noqa: F401
from ..backends.cuda.memory import (empty_cache, max_memory_allocated, memory_allocated,  # noqa: F401
                                    memory_reserved, memory_stats, synchronize)



def _generated(p, arrays, attrs, shape, dtype):
    """The eager cuda kernels the compiler generates, imported on first use (numba.cuda with them)."""
    from ..backends.cuda.eager import generated
    return generated.run(p, arrays, attrs, shape, dtype)


eager.install_generated(_generated)     # the eager dispatcher is below the compiler: it is handed them

if os.environ.get("TRACEGRAD_RECORD_KERNELS") and os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
    from ..backends.cuda.ptxcheck import record_launches     # what tracegrad launches, for the PTX check
    record_launches(os.environ["TRACEGRAD_RECORD_KERNELS"])
