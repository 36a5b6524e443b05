"""What code reads from outside its arguments: the globals it loads, the closure variables and default
argument values of the compiled function, and which code is the user's (whose reads are guarded).
The guards and the state walk both start from them."""
import dis
import os
import sys
import sysconfig
import types
import weakref

from ..broadcast import in_package
from ..pytree import object_state
from ..tensor import Tensor


def free_objects(fn):
    """(kind, name, holder, object) for the globals and closure variables that `fn`'s code (nested
    code included) reads, and its default argument values."""
    if isinstance(fn, types.MethodType):
        fn = fn.__func__
    if not isinstance(fn, types.FunctionType):
        return []
    codes, names = [fn.__code__], set()
    while codes:
        c = codes.pop()
        names.update(global_names(c))
        codes.extend(k for k in c.co_consts if isinstance(k, types.CodeType))
    out = global_bindings(sorted(names), fn.__globals__)
    for n, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
        out.append(("closure variable", n, cell, cell_value(cell)))
    out += [("default value of", n, fn, v) for n, v in defaults(fn).items()]
    return out


def global_bindings(names, globals_):
    """("global", name, globals, value) for each name defined in the globals dict."""
    return [("global", n, globals_, globals_[n]) for n in names if n in globals_]


_READS = weakref.WeakKeyDictionary()     # code object -> (global names, attribute names) it loads


def code_reads(code):
    """(the names `code` (not its nested code) loads as globals, the attribute names it loads)."""
    got = _READS.get(code)
    if got is None:
        ins = list(dis.get_instructions(code))
        got = _READS[code] = (tuple(sorted({i.argval for i in ins if i.opname in ("LOAD_GLOBAL", "LOAD_NAME")})),
                              frozenset(i.argval for i in ins if i.opname in ("LOAD_ATTR", "LOAD_METHOD")))
    return got


def global_names(code):
    return code_reads(code)[0]


MISSING = object()      # a global deleted since the trace


_LIBRARY = tuple(os.path.abspath(p) + os.sep for p in
                 {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")})


def is_user_code(filename):
    """Whether code from `filename` is the user's: not tracegrad's own, nor the standard library's or
    an installed package's (their globals are assumed fixed), nor frozen."""
    if filename.startswith("<"):                 # made by exec (<string>, <stdin>), or frozen
        return not filename.startswith("<frozen")
    if in_package(filename):
        return False
    return not os.path.abspath(filename).startswith(_LIBRARY) if os.path.isabs(filename) else True


def is_plain(v):
    """An object whose attributes a trace may read and whose class is the user's (a plain class, a
    dataclass), or a SimpleNamespace: its attributes are walked."""
    if isinstance(v, types.SimpleNamespace):
        return True
    if not hasattr(v, "__dict__") or isinstance(v, (type, types.ModuleType, Tensor)) or object_state(v) is not None:
        return False
    return user_class(type(v))


def user_class(cls):
    """Whether class `cls` was defined by the user's code (its module's file is the user's, or it
    has none: a class made by exec)."""
    user = _USER_CLASS.get(cls)
    if user is None:
        where = getattr(sys.modules.get(cls.__module__), "__file__", None)
        user = _USER_CLASS[cls] = is_user_code(where) if where else cls.__module__ not in sys.builtin_module_names
    return user


_USER_CLASS = weakref.WeakKeyDictionary()      # class -> whether from the user's code


def defaults(fn):
    """{parameter: default value} of a function (read when a call leaves the parameter out)."""
    code, pos = fn.__code__, fn.__defaults__ or ()
    names = code.co_varnames[code.co_argcount - len(pos):code.co_argcount]
    return dict(zip(names, pos), **(fn.__kwdefaults__ or {}))


def cell_value(cell):
    try:
        return cell.cell_contents
    except ValueError:       # an empty cell
        return None
