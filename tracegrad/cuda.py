"""`tg.cuda`: whether a CUDA device (a GPU through numba.cuda, or numba's simulator) is usable."""
import os


def is_available():
    """True when numba.cuda finds a GPU or runs its simulator (NUMBA_ENABLE_CUDASIM=1)."""
    try:
        from numba import cuda
    except ImportError:
        return False
    try:
        return bool(cuda.is_available())
    except Exception:  # numba raises several driver errors when no GPU is present
        return False


def require(dev):
    """Raise the SPEC's error when `dev` is a cuda device that cannot be used."""
    if dev.type == "cuda" and not is_available():
        hint = "" if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1" else (
            " To run the CUDA path without a GPU, set NUMBA_ENABLE_CUDASIM=1 (numba's CUDA simulator) "
            "before importing tracegrad.")
        raise RuntimeError(f"CUDA is not available: numba.cuda found no usable GPU for device {dev}.{hint}")
