"""Which GPU: whether numba.cuda finds one (or runs its simulator, NUMBA_ENABLE_CUDASIM=1), how many,
its name, and the error for a cuda device that cannot be used. numba.cuda is imported on first use.
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


def manual_seed(seed):
    """Seed random draws, as tg.manual_seed: cpu and cuda draws share one generator (core.RNG; a cuda
    draw takes its key from it), so this seeds both."""
    import numpy as np
    from ...core import RNG
    RNG[0] = np.random.default_rng(int(seed))


manual_seed_all = manual_seed


def _check():
    from ...device import device
    require(device("cuda"))
