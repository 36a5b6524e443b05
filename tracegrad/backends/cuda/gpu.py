"""The cuda backend (numba.cuda on a GPU, or numba's simulator with NUMBA_ENABLE_CUDASIM=1); `tg.cuda`
(tracegrad/cuda) re-exports this module's public names: whether a device is usable, how many, and
waiting for it. numba.cuda is imported on first use.

The package: memory.py (device arrays, the counted host<->device copies) and allocator.py (the
caching allocator behind them); eager/ (eager primitives on the device: kernels.py copy, gather,
scatter-add, fill, random; matmul.py cuBLAS or a tiled kernel; pointwise.py elementwise and reduction
kernels; argreduce.py, rounding.py, scan.py, blockscan.py for primitives without a scalar lowering);
the compiler: lower.py (a fused kernel -> its launch shape and geometry), emit/ (the numba.cuda source
of each shape), compile.py (compiled once, cached), program.py (a compiled program's kernels and
buffers), run.py (what a compiled call does with device tensors); info.py (`backend_info()`) and
ptxcheck.py (the PTX check of recorded launches).
"""
import os

INSTALL_HINT = ("Install the GPU dependencies with `pip install -e '.[gpu]'` (numba-cuda and the cuBLAS "
                "runtime); without a GPU, set NUMBA_ENABLE_CUDASIM=1 (numba's CUDA simulator, slow: small "
                "tensors only) before importing tracegrad.")


def _numba_cuda():
    """The numba.cuda module, or None when numba has no CUDA support installed."""
    try:
        from numba import cuda
    except ImportError:
        return None
    return cuda


def simulated():
    """True when numba.cuda is its simulator (NUMBA_ENABLE_CUDASIM=1): no GPU, kernels run in Python."""
    from numba import config
    return bool(config.ENABLE_CUDASIM)


def is_available():
    """True when numba.cuda finds a GPU or runs its simulator (NUMBA_ENABLE_CUDASIM=1)."""
    cuda = _numba_cuda()
    if cuda is None:
        return False
    try:
        return bool(cuda.is_available())
    except Exception:  # numba raises several driver errors when no GPU is present
        return False


def require(dev):
    """Raise the SPEC's error when `dev` is a cuda device that cannot be used."""
    if dev.type != "cuda":
        return
    if not is_available():
        hint = "" if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1" else " " + INSTALL_HINT
        raise RuntimeError(f"CUDA is not available: numba.cuda found no usable GPU for device {dev}.{hint}")
    if dev.index >= device_count():
        raise RuntimeError(f"CUDA error: invalid device ordinal: {dev} (this machine has {device_count()} "
                           f"CUDA device(s); tracegrad uses cuda:0)")
    if dev.index != 0:
        raise RuntimeError(f"{dev}: tracegrad uses one CUDA device, cuda:0")


def device_count():
    """The number of CUDA devices numba.cuda sees (0 when none)."""
    if not is_available():
        return 0
    return len(_numba_cuda().gpus)


def current_device():
    """The index of the device tensors go to with device="cuda" (always 0)."""
    _check()
    return 0


def get_device_name(device=None):
    """The name of the GPU ("numba CUDA simulator" under NUMBA_ENABLE_CUDASIM=1)."""
    _check()
    if simulated():
        return "numba CUDA simulator"
    name = _numba_cuda().get_current_device().name
    return name.decode() if isinstance(name, bytes) else name


def synchronize(device=None):
    """Wait until every kernel and copy queued on the device has finished; raises a device-side error
    (an index out of range in an indexing kernel) that happened since the last synchronization."""
    _check()
    _numba_cuda().synchronize()
    from . import memory
    memory.check_device_errors()


def manual_seed(seed):
    """Seed random draws, as tg.manual_seed: cpu and cuda draws share one generator (core.RNG; a cuda
    draw takes its key from it), so this seeds both."""
    import numpy as np
    from ...core import RNG
    RNG[0] = np.random.default_rng(int(seed))


manual_seed_all = manual_seed


def backend_info():
    """What the cuda backend runs on: versions, device, NVVM/NVRTC paths, the cuBLAS loaded (cuda/info.py)."""
    from .info import backend_info as info
    return info()


def _check():
    from ...device import device
    require(device("cuda"))


def _memory():
    from . import memory
    return memory


def empty_cache():
    """Give the cached device memory back to the driver (as torch.cuda.empty_cache)."""
    _memory().empty_cache()


def memory_allocated(device=None):
    return _memory().memory_allocated()


def memory_reserved(device=None):
    return _memory().memory_reserved()


def max_memory_allocated(device=None):
    return _memory().max_memory_allocated()


def memory_stats(device=None):
    return _memory().memory_stats()


if os.environ.get("TRACEGRAD_RECORD_KERNELS") and os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
    from .ptxcheck import record_launches     # what tracegrad launches, for the PTX check (ptxcheck.py)
    record_launches(os.environ["TRACEGRAD_RECORD_KERNELS"])
