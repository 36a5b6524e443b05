"""Generated source to a numba.cuda kernel, once: cached in memory by source text, and on disk.

The source is written to `<TRACEGRAD_CACHE_DIR>/cuda/<sha256>.py` (content-addressed, never
rewritten) and imported from there, so that `cuda.jit(cache=True)` can work: numba.cuda's file
cache needs a function defined in a source file, and keys its entries by that file's path and
timestamp. On a GPU the compiled code is then saved under the file's `__pycache__` and a new
process loads it instead of compiling. numba's simulator ignores `cache=` (it runs Python). Those
folders are private as the rest of the cache (lowering/cache.py): where one is not, or a file of the
kernel there is another user's, the file goes to a temporary folder of this process, uncached (a
warning names what was refused); every new file is followed by a prune, so they count toward the cap.

Under numba's CUDA simulator (NUMBA_ENABLE_CUDASIM=1) two names of the module are bound to
stand-ins before the first launch, so that the same source runs there: `shfl_xor_sync` (the
simulator has no warp shuffles: the stand-in exchanges values through a table between two
barriers of the warp's 32 threads, which is exact because the generated code shuffles only where
every lane of the warp does) and `math` (IEEE results on NumPy scalars where Python's math raises: log(0), exp(1000));
a kernel's vector loads and stores (vector.py's intrinsics) are bound to vector.SIM's Python stand-ins.
"""
import hashlib
import importlib.util
import math
import os
import sys
import tempfile
import threading

import numpy as np

from ...scalar import FUNCS
from ...lowering import cache
from ...locks import lock

HEADER = ("# tracegrad: a kernel generated from the kernel IR (tracegrad/backends/cuda)\n"
          "import math\n"
          "from numba import cuda, float32, float64, int32, int64, boolean\n"
          "shfl_xor_sync = cuda.shfl_xor_sync\n")
VECTOR = "from tracegrad.backends.cuda.emit.vector import vload2, vload4, vstore2, vstore4, address\n"
WARP = 32
REGISTERS = 65536      # 32-bit registers of a block (every GPU numba.cuda supports)
REGISTER_NOTE = "# at most {} registers a thread"      # the generated file's last line, where capped
_KERNELS = {}
_UNCACHED = []      # the TemporaryDirectory of uncached kernels' files, once made
_LOCK = lock()


def simulated():
    from numba import config
    return bool(config.ENABLE_CUDASIM)


def module_text(body):
    """The whole file of a generated kernel function `body` (what `stage="cuda"` shows)."""
    half = "from numba.types import float16\n" if "float16" in body else ""    # only where float16 is used
    vec = VECTOR if "address(" in body else ""
    return HEADER + half + vec + "\n\n" + body + "\n"


def max_registers(threads):
    """The most registers per thread that let a block of `threads` launch (REGISTERS a block, given
    out per warp, 8 a thread at a time), or None where a thread's 255 fit (256 threads or fewer)."""
    cap = REGISTERS // (-(-threads // WARP) * WARP) // 8 * 8
    return cap if cap < 255 else None


def kernel(body, fn_name, threads=None):
    """The numba.cuda dispatcher of the function `fn_name` defined by `body` (built once), for blocks
    of up to `threads` threads: past 256 its registers are capped (max_registers) so that every
    block launches (spilling rather than failing with too many resources requested for launch)."""
    cap = max_registers(threads) if threads else None
    text = module_text(body) + (f"{REGISTER_NOTE.format(cap)} (blocks of {threads} threads)\n" if cap else "")
    key = hashlib.sha256(text.encode()).hexdigest()
    with _LOCK:
        hit = _KERNELS.get(key)
        if hit is None:
            hit = _KERNELS[key] = _build(text, key, fn_name, cap)
    return hit


def _build(text, key, fn_name, cap):
    from numba import cuda
    sim = simulated()
    path, cached = _write(text, key)
    # the header's `cuda.shfl_xor_sync` does not exist in the simulator: run the rest there
    code = text.replace("shfl_xor_sync = cuda.shfl_xor_sync\n", "") if sim else text
    name = f"tracegrad_cuda_{key[:16]}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    exec(compile(code, path, "exec"), module.__dict__)
    if sim:
        module.shfl_xor_sync, module.math = _sim_shfl_xor, _SimMath
        if VECTOR in text:
            from .emit.vector import SIM
            module.__dict__.update(SIM)
    sys.modules.setdefault(name, module)
    limits = {"max_registers": cap} if cap and not sim else {}
    dispatcher = cuda.jit(getattr(module, fn_name), cache=cached and not sim, **limits)
    if cached:
        cache.prune()           # the new file counts toward the cap (after cuda.jit, which needs it)
    return dispatcher


def _write(text, key):
    """The path of the generated file (written once, touched when reused: recently used), and
    whether numba.cuda may cache its compiled code beside it: the cache keeps something
    (TRACEGRAD_CACHE_SIZE > 0), its folders are private and no file of this kernel there is another
    user's (else the file goes to _uncached_folder())."""
    pycache = cache.private(cache.CUDA, "__pycache__") if cache.max_size() > 0 else None
    folder = os.path.dirname(pycache) if pycache else None
    if folder is not None:
        own = [os.path.join(pycache, n) for n in os.listdir(pycache) if n.startswith(key + ".")]
        folder = folder if cache.trusted([os.path.join(folder, key + ".py")] + own) else None
    path = os.path.join(folder or _uncached_folder(), key + ".py")
    try:
        os.utime(path)
    except FileNotFoundError:
        cache.write_new(os.path.dirname(path), path, text.encode(), "py")   # atomic: never a partial file
    return path, folder is not None


def _uncached_folder():
    """A private temporary folder of this process (removed at exit) for the files of uncached kernels
    (called under _LOCK)."""
    if not _UNCACHED:
        _UNCACHED.append(tempfile.TemporaryDirectory(prefix="tracegrad-cuda-"))
    return _UNCACHED[0].name


def _sim_shfl_xor(mask, value, lane_mask):
    """The simulator's stand-in for cuda.shfl_xor_sync: the value of lane (lane ^ lane_mask), the
    32 lanes of the warp meeting at a barrier of their own (the simulator runs each GPU thread as
    a Python thread)."""
    me = threading.current_thread()
    warps = me._manager.__dict__.setdefault("_tracegrad_warps", {})
    with _LOCK:
        barrier, table = warps.setdefault(me.thread_id >> 5, (threading.Barrier(WARP, timeout=600), {}))
    lane = me.thread_id & 31
    table[lane] = value
    barrier.wait()
    other = table[lane ^ lane_mask]
    barrier.wait()
    return other


def _quiet(fn):
    """fn through NumPy's array loops (C99 special cases: NumPy's scalar pow(-inf, 0.5) is nan),
    on a NumPy scalar, keeping its dtype."""
    def call(*args):
        with np.errstate(all="ignore"):
            return fn(*[np.asarray(a).reshape(1) for a in args])[0]
    return call


class _SimMath:
    """math for the simulator: the vocabulary's host functions for its `math.<cuda>` calls (NumPy's
    IEEE functions: float32 arguments stay float32), and those the inline lowerings use."""
    inf, nan = math.inf, math.nan
    floor, ceil, trunc, copysign = _quiet(np.floor), _quiet(np.ceil), _quiet(np.trunc), _quiet(np.copysign)


for _fn in FUNCS.values():
    if _fn.cuda is not None:
        setattr(_SimMath, _fn.cuda, _quiet(_fn.host) if isinstance(_fn.host, np.ufunc) else staticmethod(_fn.host))
