"""A native segment as a Python builtin function: a call without ctypes' argument conversion.

A ctypes call of a segment costs about half a microsecond before the segment runs; for a small
program that is most of its run. `segment_caller(fn, table)` returns a builtin function (a
PyCFunction, as any C extension's) taking no arguments whose C body is one small trampoline,
compiled once per process through llvmlite: it reads (segment, pointer table, None) from the
address it is bound to, releases the GIL, calls `segment(table)`, takes the GIL back and returns None — what
`ctypes.CFUNCTYPE(None, c_void_p)(fn)(table)` does, without the conversions. Where the Python C API
this needs is not found (another interpreter than CPython), the ctypes call is used instead.

`writeable_check()` gives all_writeable(arrays): True when every item of a list is a writeable
NumPy array (exactly np.ndarray; False for any other item: the caller asks Python then), reading
each array's flags word in place: a call that updates 520 parameter tensors checks them in 0.25 us
instead of 32 us (`a.flags` makes an object per array). It reads the list's and the arrays' C structs at offsets
verified against a list and arrays of known contents when built, else it is that Python expression.

`versions_check(dicts)` gives same() -> bool: whether none of the dicts (a list) changed since the
call, by their version tags (CPython's PEP 509 ma_version_tag: a new value at each insertion,
deletion or replacement of a value by another object). A guard over 263 module and optimizer
dicts holding 1438 items reads 263 words instead of comparing 1438 items (50 us). Only on CPython
3.11 and 3.12 (later versions drop or repurpose the tag), and only where a self-test sees every
kind of change (item set, delete, clear, update, pop, an attribute stored by specialized bytecode)
move the tag and a read leave it; else None (the caller compares items).
"""
import ctypes

import llvmlite.binding as llvm

from ...locks import lock

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


WRITEABLE_CHECK = """
declare ptr @PyLong_AsVoidPtr(ptr)
declare void @Py_IncRef(ptr)

define ptr @tracegrad_all_writeable(ptr %self, ptr %list) {
entry:
  %words = call ptr @PyLong_AsVoidPtr(ptr %self)
  %np = getelementptr i8, ptr %list, i64 LIST_SIZE
  %n = load i64, ptr %np
  %itemsp = getelementptr i8, ptr %list, i64 LIST_ITEMS
  %items = load ptr, ptr %itemsp
  %ndp = getelementptr ptr, ptr %words, i64 2
  %ndarray = load ptr, ptr %ndp
  br label %loop
loop:
  %i = phi i64 [0, %entry], [%next, %flagged]
  %done = icmp sge i64 %i, %n
  br i1 %done, label %yes, label %body
body:
  %ap = getelementptr ptr, ptr %items, i64 %i
  %a = load ptr, ptr %ap
  %tpp = getelementptr i8, ptr %a, i64 8
  %tp = load ptr, ptr %tpp
  %exact = icmp eq ptr %tp, %ndarray
  br i1 %exact, label %flagged, label %no
flagged:
  %fp = getelementptr i8, ptr %a, i64 ARRAY_FLAGS
  %flags = load i32, ptr %fp
  %w = and i32 %flags, WRITEABLE
  %next = add i64 %i, 1
  %ok = icmp ne i32 %w, 0
  br i1 %ok, label %loop, label %no
yes:
  %t = load ptr, ptr %words
  call void @Py_IncRef(ptr %t)
  ret ptr %t
no:
  %fp2 = getelementptr ptr, ptr %words, i64 1
  %f = load ptr, ptr %fp2
  call void @Py_IncRef(ptr %f)
  ret ptr %f
}
"""
METH_O = 0x0008

VERSIONS_CHECK = """
declare ptr @PyLong_AsVoidPtr(ptr)
declare void @Py_IncRef(ptr)

define ptr @tracegrad_same_versions(ptr %self, ptr %unused) {
entry:
  %words = call ptr @PyLong_AsVoidPtr(ptr %self)
  %dp = getelementptr ptr, ptr %words, i64 2
  %dicts = load ptr, ptr %dp
  %vp = getelementptr ptr, ptr %words, i64 3
  %versions = load ptr, ptr %vp
  %np = getelementptr ptr, ptr %words, i64 4
  %n = load i64, ptr %np
  br label %loop
loop:
  %i = phi i64 [0, %entry], [%next, %body]
  %done = icmp sge i64 %i, %n
  br i1 %done, label %yes, label %body
body:
  %dpp = getelementptr ptr, ptr %dicts, i64 %i
  %d = load ptr, ptr %dpp
  %tagp = getelementptr i8, ptr %d, i64 DICT_VERSION
  %tag = load i64, ptr %tagp
  %wantp = getelementptr i64, ptr %versions, i64 %i
  %want = load i64, ptr %wantp
  %next = add i64 %i, 1
  %ok = icmp eq i64 %tag, %want
  br i1 %ok, label %loop, label %no
yes:
  %t = load ptr, ptr %words
  call void @Py_IncRef(ptr %t)
  ret ptr %t
no:
  %fp = getelementptr ptr, ptr %words, i64 1
  %f = load ptr, ptr %fp
  call void @Py_IncRef(ptr %f)
  ret ptr %f
}
"""
DICT_VERSION = 24          # PyDictObject: refcount, type, ma_used, then ma_version_tag


class _MethodDef(ctypes.Structure):
    _fields_ = [("ml_name", ctypes.c_char_p), ("ml_meth", ctypes.c_void_p), ("ml_flags", ctypes.c_int),
                ("ml_doc", ctypes.c_char_p)]


_STATE = []          # [(method def, PyCFunction_NewEx)] once built, or [None] where not possible
_LOCK = lock()


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


def _python_all_writeable(arrays):
    return all(a.flags.writeable for a in arrays)


def _build_writeable_check():
    """The native all_writeable, or the Python one where the structs are not as expected."""
    import numpy as np
    built = _trampoline()
    offsets = _struct_offsets(np)
    if built is None or offsets is None:
        return _python_all_writeable
    engine, _, new = built
    text = WRITEABLE_CHECK
    for name, value in zip(("LIST_SIZE", "LIST_ITEMS", "ARRAY_FLAGS", "WRITEABLE"), offsets):
        text = text.replace(name, str(value))
    from .engine import glue_engine
    own = glue_engine(text)
    mdef = _MethodDef(b"all_writeable", own.get_function_address("tracegrad_all_writeable"), METH_O,
                      b"whether every NumPy array of a list is writeable")
    words = (ctypes.c_void_p * 3)(id(True), id(False), id(np.ndarray))
    bound = _Bound(ctypes.addressof(words))
    bound.keep = (words, own, engine, mdef)
    check = new(ctypes.addressof(mdef), bound, None)
    samples = _samples(np)
    for arrays in [[], *([a] for a in samples), samples]:
        if check(arrays) is not _python_all_writeable(arrays):
            return _python_all_writeable
    return check


def _samples(np):
    base = np.zeros((4, 6), np.float32)
    ro = np.arange(5.0)
    ro.flags.writeable = False
    return [base, base[:, ::2], base.T, ro, np.frombuffer(b"abcd", np.uint8), np.empty(0), np.float64(1.0) * np.ones(3)]


def _struct_offsets(np):
    """(list size, list items, array flags, NPY_ARRAY_WRITEABLE) as read back from known objects on
    this interpreter and NumPy (CPython's PyListObject; NumPy's PyArrayObject_fields), or None."""
    size, items, flags_at, writeable = 16, 24, 64, 0x0400
    probe = [object(), object(), object()]
    try:
        if ctypes.c_ssize_t.from_address(id(probe) + size).value != len(probe):
            return None
        table = ctypes.c_void_p.from_address(id(probe) + items).value
        if [ctypes.c_void_p.from_address(table + 8 * i).value for i in range(3)] != [id(x) for x in probe]:
            return None
        for a in _samples(np):
            if ctypes.c_int.from_address(id(a) + flags_at).value != a.flags.num or \
                    bool(a.flags.num & writeable) != a.flags.writeable:
                return None
    except (ValueError, OverflowError):
        return None
    return size, items, flags_at, writeable


_WRITEABLE = []


_WRITEABLE_LOCK = lock()


def writeable_check():
    """all_writeable(arrays): whether every array of list `arrays` (NumPy arrays) is writeable; native
    where possible, built on first use."""
    with _WRITEABLE_LOCK:
        if not _WRITEABLE:
            _WRITEABLE.append(_build_writeable_check())
    return _WRITEABLE[0]


_VERSIONS = []
_VERSIONS_LOCK = lock()


def versions_check(dicts):
    """same() for the dicts of list `dicts` (held by it), or None where tags cannot be trusted."""
    with _VERSIONS_LOCK:
        if not _VERSIONS:
            _VERSIONS.append(_build_versions())
    built = _VERSIONS[0]
    if built is None:
        return None
    mdef, new, keep = built
    n = len(dicts)
    addresses = (ctypes.c_void_p * max(n, 1))(*map(id, dicts))
    versions = (ctypes.c_uint64 * max(n, 1))(*map(_tag, dicts))
    words = (ctypes.c_void_p * 5)(id(True), id(False), ctypes.addressof(addresses), ctypes.addressof(versions), n)
    bound = _Bound(ctypes.addressof(words))
    bound.keep = (words, addresses, versions, list(dicts), keep)
    return new(ctypes.addressof(mdef), bound, None)


def _tag(d):
    return ctypes.c_uint64.from_address(id(d) + DICT_VERSION).value


def _build_versions():
    import sys
    built = _trampoline()
    if built is None or sys.implementation.name != "cpython" or sys.version_info[:2] not in ((3, 11), (3, 12)) \
            or not _tags_move():
        return None
    engine, _, new = built
    from .engine import glue_engine
    own = glue_engine(VERSIONS_CHECK.replace("DICT_VERSION", str(DICT_VERSION)))
    mdef = _MethodDef(b"same_versions", own.get_function_address("tracegrad_same_versions"), METH_NOARGS,
                      b"whether none of the dicts changed")
    return mdef, new, (own, engine, mdef)


class _Probe:
    pass


def _tags_move():
    """Whether every kind of change moves a dict's tag and a read leaves it, here."""
    d, o = {"a": 1, "b": [], "c": 3.5}, _Probe()
    o.x, o.y = 1, 2
    od = o.__dict__

    def store(obj, v):            # run enough times for the specializing interpreter to specialize it
        obj.x = v
    changes = [lambda: d.__setitem__("a", object()), lambda: d.__setitem__("new", 1), lambda: d.pop("new"),
               lambda: d.__delitem__("c"), lambda: d.update(c=object()), lambda: d.setdefault("z", object()),
               lambda: d.popitem(), lambda: d.clear(), lambda: d.update(a=1)]
    changes = [(d, c) for c in changes] + [(od, lambda: store(o, object())) for _ in range(64)]
    for target, change in changes:
        before = _tag(target)
        _ = list(target.values()), target.get("a"), o.y          # reads leave the tag
        if _tag(target) != before:
            return False
        change()
        if _tag(target) == before:
            return False
    return od is o.__dict__


class _Bound(int):
    """The address the trampoline reads its segment from; it holds what that address points into."""
