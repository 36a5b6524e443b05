"""A native segment as a Python builtin function: a call without ctypes' argument conversion.

A ctypes call of a segment costs about half a microsecond before the segment runs; for a small
program that is most of its run. `segment_caller(fn, table)` returns a builtin function (a
PyCFunction, as any C extension's) taking no arguments whose C body is one small trampoline,
compiled once per process through llvmlite: it reads (segment, pointer table, None) from the
address it is bound to, releases the GIL, calls `segment(table)`, takes the GIL back and returns None — what
`ctypes.CFUNCTYPE(None, c_void_p)(fn)(table)` does, without the conversions. Where the Python C API
this needs is not found (another interpreter than CPython), the ctypes call is used instead.
"""
import ctypes
import threading

import llvmlite.binding as llvm

_API = ("PyLong_AsVoidPtr", "PyEval_SaveThread", "PyEval_RestoreThread", "Py_IncRef")
METH_NOARGS = 0x0004

TRAMPOLINE = """
declare ptr @PyLong_AsVoidPtr(ptr)
declare ptr @PyEval_SaveThread()
declare void @PyEval_RestoreThread(ptr)
declare void @Py_IncRef(ptr)

define ptr @tracegrad_segment_call(ptr %self, ptr %unused) {
entry:
  %pair = call ptr @PyLong_AsVoidPtr(ptr %self)
  %fn = load ptr, ptr %pair
  %tablep = getelementptr ptr, ptr %pair, i64 1
  %table = load ptr, ptr %tablep
  %nonep = getelementptr ptr, ptr %pair, i64 2
  %none = load ptr, ptr %nonep
  %state = call ptr @PyEval_SaveThread()
  call void %fn(ptr %table)
  call void @PyEval_RestoreThread(ptr %state)
  call void @Py_IncRef(ptr %none)
  ret ptr %none
}
"""


class _MethodDef(ctypes.Structure):
    _fields_ = [("ml_name", ctypes.c_char_p), ("ml_meth", ctypes.c_void_p), ("ml_flags", ctypes.c_int),
                ("ml_doc", ctypes.c_char_p)]


_STATE = []          # [(method def, PyCFunction_NewEx)] once built, or [None] where not possible
_LOCK = threading.Lock()


def _trampoline():
    with _LOCK:
        if not _STATE:
            _STATE.append(_build())
        return _STATE[0]


def _build():
    api = getattr(ctypes, "pythonapi", None)
    try:
        addresses = {name: ctypes.cast(getattr(api, name), ctypes.c_void_p).value for name in _API}
        new = api.PyCFunction_NewEx
    except (AttributeError, TypeError):
        return None
    from .engine import glue_engine
    for name, address in addresses.items():
        llvm.add_symbol(name, address)
    engine = glue_engine(TRAMPOLINE)
    mdef = _MethodDef(b"native_segment", engine.get_function_address("tracegrad_segment_call"), METH_NOARGS,
                      b"run one native segment of a compiled program")
    new.restype, new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.py_object, ctypes.c_void_p]
    return engine, mdef, new


def segment_caller(fn, table):
    """A callable running native segment `fn` (address of `void fn(void *table)`) on `table` (a
    ctypes pointer array). It holds what it points to."""
    built = _trampoline()
    if built is None:
        segment = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(fn)
        ref = ctypes.c_void_p(ctypes.addressof(table))
        return lambda: segment(ref)
    engine, mdef, new = built
    words = (ctypes.c_void_p * 3)(fn, ctypes.addressof(table), id(None))   # what the trampoline reads
    bound = _Bound(ctypes.addressof(words))
    bound.keep = (words, table, engine)
    return new(ctypes.addressof(mdef), bound, None)


class _Bound(int):
    """The address the trampoline reads its segment from; it holds what that address points into."""
