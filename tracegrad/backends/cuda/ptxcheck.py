"""Whether every kernel tracegrad launches compiles for a real GPU, checked without one.

numba's simulator runs kernels as Python and never types them, so a kernel can pass every simulator
test and still fail to compile on a GPU. This module closes that gap in two steps:

1. record: with TRACEGRAD_RECORD_KERNELS=<file> set under NUMBA_ENABLE_CUDASIM=1, each distinct
   kernel launch appends one JSON line to <file>: how to rebuild its Python function in another
   process (module and qualified name, the generated source for generated kernels, the values its
   closure holds) and the numba types of its arguments (arrays: dtype, rank, layout as numba.cuda
   types a device array; scalars and tuples: their numba types);
2. compile: `python -m tracegrad.backends.cuda.ptxcheck <file>...` (numba.cuda not simulated) rebuilds each
   recorded function with real numba.cuda device functions (the simulator's stand-ins for warp
   shuffles and math are refused) and compiles it with `cuda.compile_ptx(fn, argtypes, cc=(9, 0))`
   through the CUDA toolkit's NVVM (CUDA_HOME, or /usr/local/cuda*): PTX for sm_90 (H100/H200).
   Where ptxas is at hand, a kernel launched with more than 256 threads per block or using shared
   memory is also assembled, and its registers and static shared memory checked against the most
   threads per block it was launched with (a launch a real GPU refuses, the simulator runs); a
   generated kernel with its register cap (backends/cuda/compile.py's max_registers).

The whole cuda suite and examples/gpu_check.py (tests/test_cuda_ptx.py checks a smaller set):

    NUMBA_ENABLE_CUDASIM=1 TRACEGRAD_RECORD_KERNELS=/tmp/k.jsonl python -m pytest -q tests/cuda
    NUMBA_ENABLE_CUDASIM=1 TRACEGRAD_RECORD_KERNELS=/tmp/k.jsonl python examples/gpu_check.py --quick --reps 1
    python -m tracegrad.backends.cuda.ptxcheck --jobs 2 /tmp/k.jsonl
"""
import base64
import glob
import hashlib
import importlib
import json
import math
import os
import pickle
import re
import shutil
import subprocess
import tempfile
import sys
import types

RECORD_ENV = "TRACEGRAD_RECORD_KERNELS"
CC = (9, 0)
REGISTERS = 65536        # 32-bit registers of a block on sm_90 (allocated per warp, 256 at a time)
STATIC_SHARED = 48 << 10  # bytes of static shared memory a block may have


# ------------------------------------------------------------ recording (under the simulator)
def record_launches(path):
    """Append each distinct kernel launched from now on (tracegrad's own kernels only) to `path`."""
    from numba.cuda.simulator import kernel as sim
    seen, launch = set(), sim.FakeCUDAKernel.__call__

    def call(self, *args):
        if not self._device and _ours(self.fn):
            fn = self.__dict__.get("_tg_recipe") or self.__dict__.setdefault("_tg_recipe", _recipe(self.fn))
            line = json.dumps({"fn": fn, "args": [_argtype(a) for a in args],
                               "block": math.prod(self.block_dim)}, sort_keys=True)
            if line not in seen:
                seen.add(line)
                with open(path, "a") as fh:
                    fh.write(line + "\n")
        return launch(self, *args)
    sim.FakeCUDAKernel.__call__ = call


def _ours(fn):
    return fn.__module__.startswith(("tracegrad.", "tracegrad_cuda_"))


def _recipe(fn):
    """How another process rebuilds the Python function `fn`."""
    r = {"module": fn.__module__, "qualname": fn.__qualname__, "line": fn.__code__.co_firstlineno,
         "cells": [_value(c.cell_contents) for c in fn.__closure__ or ()]}
    if not fn.__module__.startswith("tracegrad."):       # a generated kernel: its file's text
        with open(fn.__code__.co_filename) as fh:
            r["source"] = fh.read()
    return r


def _value(v):
    if hasattr(v, "fn") and hasattr(v, "_device"):       # a jitted function of the simulator
        return {"jit": _recipe(v.fn), "device": bool(v._device)}
    return {"pickle": base64.b64encode(pickle.dumps(v)).decode()}


def _argtype(a):
    """A kernel argument's numba type, as JSON: arrays by numba.cuda's rule for device arrays (layout C
    or F when contiguous without a stride-0 axis, else A)."""
    import numpy as np
    ary = getattr(a, "_ary", a)                  # the simulator's device array wraps a NumPy array
    if isinstance(ary, np.ndarray):
        broadcast = 0 in ary.strides
        layout = "C" if ary.flags.c_contiguous and not broadcast else \
            "F" if ary.flags.f_contiguous and not broadcast else "A"
        return ["array", ary.dtype.name, ary.ndim, layout]
    if isinstance(a, tuple):
        return ["tuple", [_argtype(x) for x in a]]
    from numba import typeof
    from numba.np.numpy_support import as_dtype
    return ["scalar", as_dtype(typeof(a)).name]


# ------------------------------------------------------------ compiling (real numba.cuda)
def numba_type(t):
    from numba import types
    from numba.np.numpy_support import from_dtype
    import numpy as np
    if t[0] == "array":
        return types.Array(from_dtype(np.dtype(t[1])), t[2], t[3])
    if t[0] == "tuple":
        return types.BaseTuple.from_types([numba_type(x) for x in t[1]])
    return from_dtype(np.dtype(t[1]))


_MODULES = {}


def _module(r):
    src = r.get("source")
    if src is None:
        return importlib.import_module(r["module"])
    key = hashlib.sha256(src.encode()).hexdigest()
    if key not in _MODULES:
        mod = types.ModuleType(r["module"])
        exec(compile(src, f"<{r['module']}>", "exec"), mod.__dict__)
        _MODULES[key] = mod
    return _MODULES[key]


def rebuild(r):
    """The Python function a recipe names, its closure rebuilt with real numba.cuda functions."""
    from numba import cuda
    mod = _module(r)
    head, *nested = r["qualname"].split(".<locals>.")
    obj = mod
    for part in head.split("."):
        obj = getattr(obj, part)
    obj = getattr(obj, "py_func", obj)
    if not nested:
        _refuse_stand_ins(obj)
        return obj
    code = _nested_code(getattr(obj, "__wrapped__", obj).__code__, nested[-1], r["line"])
    cells = []
    for v in r["cells"]:
        if "jit" in v:
            fn = rebuild(v["jit"])
            cells.append(types.CellType(cuda.jit(device=True)(fn) if v["device"] else cuda.jit(fn)))
        else:
            cells.append(types.CellType(pickle.loads(base64.b64decode(v["pickle"]))))
    fn = types.FunctionType(code, mod.__dict__, nested[-1], None, tuple(cells))
    _refuse_stand_ins(fn)
    return fn


def _nested_code(code, name, line):
    """The code object of the function `name` defined at `line` inside `code` (at any depth)."""
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            if c.co_name == name and c.co_firstlineno == line:
                return c
            found = _nested_code(c, name, line)
            if found is not None:
                return found
    return None


def _refuse_stand_ins(fn):
    """Raise when a global the function reads is a simulator stand-in (not what a GPU compiles)."""
    from . import compile as build
    for name in fn.__code__.co_names:
        v = fn.__globals__.get(name)
        if v is build._SimMath or v is build._sim_shfl_xor or \
                getattr(v, "__module__", "").startswith("numba.cuda.simulator"):
            raise RuntimeError(f"{fn.__qualname__} reads the simulator's stand-in {name!r}")


def load(paths):
    """The distinct recorded kernels of the files at `paths`: [(recipe, argtypes, most threads per
    block of a launch)]."""
    found = {}
    for p in paths:
        with open(p) as fh:
            for line in fh:
                if line.strip():
                    rec = json.loads(line)
                    key = json.dumps([rec["fn"], rec["args"]], sort_keys=True)
                    block = max(rec.get("block", 1), found.get(key, (0, 0, 0))[2])
                    found[key] = (rec["fn"], rec["args"], block)
    return list(found.values())


def label(recipe, args):
    kinds = ",".join(_short(a) for a in args)
    return f"{recipe['module']}.{recipe['qualname']}({kinds})"


def _short(t):
    if t[0] == "array":
        return f"{t[1]}[{t[2]}d{t[3]}]"
    if t[0] == "tuple":
        return "(" + ",".join(_short(x) for x in t[1]) + ")"
    return t[1]


def compile_one(recipe, args, cc=CC):
    """PTX of one recorded kernel for compute capability `cc`."""
    from numba import cuda
    from numba.cuda import dispatcher
    real = dispatcher.get_current_device
    # device functions a kernel calls (numba's own shfl_xor_sync among them) compile for the current
    # device's compute capability: with no GPU here, the target's stands for it
    dispatcher.get_current_device = lambda: types.SimpleNamespace(compute_capability=cc)
    try:
        return cuda.compile_ptx(rebuild(recipe), tuple(numba_type(a) for a in args), cc=cc)[0]
    finally:
        dispatcher.get_current_device = real


def ptxas():
    """The path of the toolkit's PTX assembler, or None."""
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
    path = os.path.join(home, "bin", "ptxas")
    return path if os.path.exists(path) else shutil.which("ptxas")


def resources(ptx, assembler, cap=None, cc=CC):
    """(registers per thread, static shared bytes) of the kernel in `ptx`, assembled for `cc` (with
    at most `cap` registers a thread, as numba.cuda's max_registers asks the linker)."""
    with tempfile.NamedTemporaryFile("w", suffix=".ptx") as fh:
        fh.write(ptx)
        fh.flush()
        limit = [f"--maxrregcount={cap}"] if cap else []
        r = subprocess.run([assembler, f"-arch=sm_{cc[0]}{cc[1]}", "-v", *limit, "-o", os.devnull, fh.name],
                           capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(f"ptxas rejects the PTX: {r.stderr.strip()[-2000:]}")
    regs = re.search(r"Used (\d+) registers", r.stderr)
    smem = re.search(r"(\d+) bytes smem", r.stderr)
    return int(regs.group(1)) if regs else 0, int(smem.group(1)) if smem else 0


def launch_problem(regs, smem, block):
    """Why a block of `block` threads of a kernel using `regs` registers per thread and `smem` bytes of
    static shared memory cannot launch on sm_90 (None when it can)."""
    per_warp = -(-regs * 32 // 256) * 256
    if block > 1024:
        return f"{block} threads per block (at most 1024)"
    if -(-block // 32) * per_warp > REGISTERS:
        return (f"{regs} registers per thread x {block} threads per block exceed the {REGISTERS} registers "
                f"of a block (cudaErrorLaunchOutOfResources)")
    if smem > STATIC_SHARED:
        return f"{smem} bytes of static shared memory (at most {STATIC_SHARED})"
    return None


def check_one(recipe, args, block, assembler):
    """Compile one kernel; where it may not fit its launch (more than 256 threads per block, or
    shared memory) and ptxas is at hand, assemble it and check its registers and shared memory."""
    ptx = compile_one(recipe, args)
    if assembler and (block > 256 or ".shared" in ptx):
        from . import compile as build     # a generated kernel's cap: its file's last line
        cap = re.search(build.REGISTER_NOTE.format(r"(\d+)"), recipe.get("source", ""))
        problem = launch_problem(*resources(ptx, assembler, cap and int(cap.group(1))), block)
        if problem:
            raise RuntimeError(f"launched with {block} threads per block: {problem}")


def nvvm_missing():
    """Why NVVM cannot be used here (None when it can). Without CUDA_HOME, the newest toolkit under
    /usr/local/cuda* is used."""
    if not (os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")):
        kits = sorted(glob.glob("/usr/local/cuda*/nvvm/libdevice"))
        if kits and not os.path.isdir("/usr/local/cuda/nvvm"):
            os.environ["CUDA_HOME"] = os.path.dirname(os.path.dirname(kits[-1]))
    try:
        from numba.cuda.cudadrv import nvvm
        nvvm.NVVM()
    except Exception as e:        # numba raises several errors when no toolkit is found
        return f"no NVVM (CUDA toolkit) found: set CUDA_HOME ({type(e).__name__}: {str(e).strip()[:300]})"
    return None


def check(launches, jobs=1):
    """[(label, error text)] of the recorded kernels that fail to compile or to fit their launch
    (checked in `jobs` forked processes)."""
    if jobs <= 1:
        return _check_part(launches)
    import concurrent.futures
    import multiprocessing
    with concurrent.futures.ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("fork")) as pool:
        return [f for part in pool.map(_check_part, [launches[j::jobs] for j in range(jobs)]) for f in part]


def _check_part(launches):
    failed, assembler = [], ptxas()
    for recipe, args, block in launches:
        try:
            check_one(recipe, args, block, assembler)
        except Exception as e:
            failed.append((label(recipe, args), f"{type(e).__name__}: {str(e).strip()[:2000]}"))
    return failed


def main(argv=None):
    import argparse
    ap = argparse.ArgumentParser(prog="python -m tracegrad.backends.cuda.ptxcheck", description=(
        f"Compile recorded kernels to PTX for sm_{CC[0]}{CC[1]} (record them with NUMBA_ENABLE_CUDASIM=1 "
        f"{RECORD_ENV}=FILE)."))
    ap.add_argument("files", nargs="+", help="files of recorded launches (JSON lines)")
    ap.add_argument("--jobs", type=int, default=1, help="processes compiling at once")
    args = ap.parse_args(argv)
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        print("ptxcheck compiles for a real GPU: run it without NUMBA_ENABLE_CUDASIM=1")
        return 2
    why = nvvm_missing()
    if why:
        print(why)
        return 3
    launches = load(args.files)
    failed = check(launches, args.jobs)
    for name, err in failed:
        print(f"FAILED {name}\n    {err}\n")
    fit = "registers and shared memory checked against their launches by ptxas" if ptxas() else \
        "no ptxas found: registers and shared memory per block not checked"
    print(f"{len(launches) - len(failed)} of {len(launches)} distinct kernels compiled to PTX for sm_"
          f"{CC[0]}{CC[1]} ({fit})" + (f"; {len(failed)} failed" if failed else ""))
    return 1 if failed or not launches else 0


if __name__ == "__main__":
    sys.exit(main())
