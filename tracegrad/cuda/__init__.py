"""`tg.cuda`, as `torch.cuda`: the public face of the cuda backend, whose code lives in
tracegrad/backends/cuda/ (availability and device queries in its __init__.py, device memory in
memory.py, eager kernels in eager/, the compiler in lower.py, emit/, program.py). numba.cuda is
imported on first use, so `import tracegrad` and every CPU feature work without it.
"""
from ..backends.cuda import (backend_info, current_device, device_count, empty_cache, get_device_name,  # noqa: F401
                             is_available, manual_seed, manual_seed_all, max_memory_allocated, memory_allocated,
                             memory_reserved, memory_stats, require, simulated, synchronize)
from ..backends.cuda import memory  # noqa: F401  (tg.cuda.memory.transfer_stats(), count_transfers())
