"""`tg.cuda.backend_info()`: what the cuda backend runs on, for a first run on a new machine and for bug
reports — the numba and numba-cuda versions, the device, where NVVM, libdevice and NVRTC were found, and
which cuBLAS tracegrad loaded (or why none). Every entry is filled even when its piece is missing: the
value then says what is missing, so one call never fails on a half-installed machine."""
import importlib.metadata


def _version(dist):
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _guarded(fn):
    """fn(), or 'unavailable (Error: message)' when it raises."""
    try:
        return fn()
    except Exception as e:   # noqa: BLE001 -- a report: every failure is the value shown
        return f"unavailable ({type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''})"


def _toolkit_paths():
    """{'nvvm': path, 'libdevice': path, ...} as numba-cuda's search found them (with how it found each)."""
    from numba.cuda.cuda_paths import get_cuda_paths
    out = {}
    for key, found in get_cuda_paths().items():
        by, path = (found.by, found.info) if hasattr(found, "info") else (None, found)
        out[key] = path if by is None else f"{path} (found by: {by})"
    return out


def _nvrtc():
    from numba.cuda.cudadrv import libs
    return libs.get_cudalib("nvrtc")


def _device():
    from numba import cuda
    d = cuda.get_current_device()
    name = d.name.decode() if isinstance(d.name, bytes) else d.name
    return f"{name}, compute capability {d.compute_capability}, {d.MULTIPROCESSOR_COUNT} SMs"


def _driver():
    from numba.cuda.cudadrv import driver
    return driver.driver.get_version()


def cublas_library():
    """The path of the libcublas tracegrad's matrix products use, or None; and why not, when None."""
    from .gpu import simulated
    from .eager import matmul
    if simulated():
        return None, "numba's CUDA simulator has no cuBLAS: matrix products run the tiled numba.cuda kernel"
    lib = matmul._cublas()
    if lib is None:
        return None, ("no libcublas could be loaded (tried: " + ", ".join(matmul.candidates()) +
                      "): matrix products run the tiled numba.cuda kernel, about 10x slower; "
                      "pip install -e '.[gpu]' installs cuBLAS")
    return lib[0]._name, None


def backend_info():
    """A dict describing the cuda backend (see the module docstring); safe to call with or without a GPU."""
    from .gpu import is_available, simulated
    info = {"numba": _version("numba"), "numba-cuda": _version("numba-cuda") or "not installed (numba's own cuda)",
            "available": is_available(), "simulated": _guarded(simulated)}
    if not info["available"]:
        return info
    if info["simulated"] is True:
        info["device"] = "numba CUDA simulator"
    else:
        info["device"] = _guarded(_device)
        info["driver"] = _guarded(_driver)
        paths = _guarded(_toolkit_paths)
        info.update(paths if isinstance(paths, dict) else {"nvvm": paths})
        info["nvrtc"] = _guarded(_nvrtc)
    found = _guarded(cublas_library)
    info["cublas"], info["cublas_missing"] = found if isinstance(found, tuple) else (None, found)
    return info
