"""One LLVM module -> optimized machine code for the target CPU (host.py), through the disk cache."""
import ctypes
import ctypes.util
import hashlib

import llvmlite
import llvmlite.binding as llvm
from llvmlite.binding import ffi
from llvmlite.binding.newpassmanagers import NewPassManager

from ... import _version
from ...lowering import cache
from . import forksafe, host, machine, stream

_LOCK = forksafe.lock()
_READY = []


def _initialize():
    with _LOCK:
        if not _READY:
            host.initialize()
            libm = ctypes.util.find_library("m")   # float64 transcendentals call the C library
            if libm:
                llvm.load_library_permanently(libm)
            _READY.append(True)


def _new_target_machine():
    return host.current().new_machine()


def target_machine():
    """The shared target machine (of TRACEGRAD_CPU's target, host.py) used to optimize and emit code
    (each JIT engine owns its own)."""
    _initialize()
    return host.current().machine


def target_id():
    """What compiled code depends on besides its IR: the target's CPU and features (TRACEGRAD_CPU),
    the thresholds that shape generated code (machine.py), LLVM and tracegrad versions."""
    t = host.current()
    return (f"{t.cpu}|{t.features}|llvmlite {llvmlite.__version__}"
            f"|llvm {'.'.join(map(str, llvm.llvm_version_info))}|tracegrad {_version.__version__}|{machine.fingerprint()}")


def optimize(text):
    """Parse and optimize LLVM IR text at O3 for the host, streamed stores marked (stream.py);
    returns the module."""
    tm = target_machine()
    mod = llvm.parse_assembly(text)
    mod.verify()
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pto.loop_vectorization = True
    pto.slp_vectorization = True
    pb = llvm.create_pass_builder(tm, pto)
    mpm = pb.getModulePassManager()
    try:
        mpm.run(mod, pb)
    finally:
        _free_pipeline(mpm)
    if f"%{stream.NAME}" in text:             # streamed outputs: their aligned vector stores non-temporal
        mod = llvm.parse_assembly(stream.mark(str(mod)))
        mod.verify()
    return mod


def _free_pipeline(mpm):
    """Free a pass pipeline now. llvmlite's ModulePassManager never frees its own: its close() finds
    ObjectRef's empty _dispose before NewPassManager's (the order of its bases), so every compile
    kept its pipeline, about 70 KB, for good, evicted or not."""
    if type(mpm)._dispose is ffi.ObjectRef._dispose:
        NewPassManager._dispose(mpm)
        mpm.detach()
    else:                                   # a llvmlite that frees it itself
        mpm.close()


class Engine:
    """Machine code loaded into an MCJIT engine; `address(name)` of a kernel. `disk_hit` tells whether
    the object code came from the disk cache."""

    def __init__(self, text):
        _initialize()
        key = hashlib.sha256((target_id() + "\n" + text).encode()).hexdigest()
        obj = cache.load(key)
        self.disk_hit = obj is not None
        if obj is None:
            obj = target_machine().emit_object(optimize(text))
            cache.store(key, obj)
        self.ee = llvm.create_mcjit_compiler(llvm.parse_assembly(""), _new_target_machine())
        self.ee.add_object_file(llvm.ObjectFileRef.from_data(obj))
        self.ee.finalize_object()
        self.key = key

    def address(self, name):
        addr = self.ee.get_function_address(name)
        if not addr:
            raise RuntimeError(f"compiled kernel {name} not found in its module (corrupt cache entry {self.key}?)")
        return addr


    def global_address(self, name):
        addr = self.ee.get_global_value_address(name)
        if not addr:
            raise RuntimeError(f"global {name} not found in its compiled module (corrupt cache entry {self.key}?)")
        return addr


def compile_module(text):
    return Engine(text)


def glue_engine(text):
    """An MCJIT engine for a few lines of glue code (native_call.py), compiled as written: no
    optimization, no disk cache."""
    _initialize()
    mod = llvm.parse_assembly(text)
    mod.verify()
    ee = llvm.create_mcjit_compiler(mod, _new_target_machine())
    ee.finalize_object()
    return ee
