"""Random draws a traced function would freeze into its graph: `watch_draws` warns, naming the line,
when the function draws from Python's random module or NumPy's global generator while it is traced
(jit/capture.py wraps each trace in it)."""
import dis
import os
import random
import sys
import types
import warnings

import numpy as np

from .broadcast import in_package


_RANDOM_FILE = os.path.abspath(random.__file__)
_NP_GLOBAL = np.random.mtrand._rand


class watch_draws:
    """`with watch_draws(name):` around the trace of compiled function `name`: warn, naming the
    line, when the function draws from Python's random module or NumPy's global generator while it
    is traced. Python code runs only while tracing, so such a draw is frozen into the graph and
    every call repeats it.

    The generators' states are compared before and after. A profile hook of this thread names the
    line of each draw from a `random.Random` (C calls are visible to it) and records the code that
    ran, with its globals (`code`: what the compiled function's guards read), whose lines reading
    NumPy's global generator are named when its state changed (NumPy's methods are invisible to the
    hook). A Python-level profile function already set is called from the hook; a C-level one
    (cProfile) keeps its place, and then no code is recorded (`hooked` is False)."""

    def __init__(self, name):
        self.name, self.draws, self.code = name, {}, {}

    def __enter__(self):
        self.states = _global_states()
        self.previous = sys.getprofile()
        self.hooked = self.previous is None or callable(self.previous)
        if self.hooked:
            sys.setprofile(self._hook)
        return self

    def _hook(self, frame, event, arg):
        if self.previous is not None:
            self.previous(frame, event, arg)
        if event == "call":
            self.code[frame.f_code] = frame.f_globals
        elif event == "c_call" and isinstance(getattr(arg, "__self__", None), random.Random):
            f = frame
            while f is not None and f.f_code.co_filename == _RANDOM_FILE:
                f = f.f_back
            if f is not None:
                self.draws.setdefault((f.f_code.co_filename, f.f_lineno), "Python's random module")

    def __exit__(self, *exc):
        if self.hooked:
            sys.setprofile(self.previous)
        python_now, numpy_now = _global_states()
        if python_now != self.states[0] and not self.hooked:
            self.draws[(None, None)] = "Python's random module"
        if numpy_now != self.states[1]:     # (with the hook, no line found: another thread drew)
            lines = [where for code, g in self.code.items() for where in _numpy_global_reads(code, g)]
            for where in lines if self.hooked else [(None, None)]:
                self.draws.setdefault(where, "NumPy's global random generator")
        for (filename, line), source in self.draws.items():
            at = f" at {filename}:{line}" if filename else ""
            msg = (f"compiled function {self.name} used {source}{at} while it was traced: the numbers drawn "
                   f"are frozen into the compiled graph, and every call repeats them (Python code runs only "
                   f"while tracing). Use tracegrad's random functions (tg.rand, tg.randn, nn.Dropout), which "
                   f"draw fresh values at each call, or draw outside and pass the values in as arguments.")
            if filename:
                warnings.warn_explicit(msg, RuntimeWarning, filename, line)
            else:
                warnings.warn(msg, RuntimeWarning, stacklevel=2)


def _global_states():
    """(Python's random state, NumPy's global generator state), each comparable with ==."""
    np_state = np.random.get_state()
    return random.getstate(), (np_state[0], np_state[1].tobytes()) + tuple(np_state[2:])


def _numpy_global_reads(code, globals_):
    """(file, line) of each place in user `code` that reads a method of NumPy's global generator
    (np.random.rand, numpy.random.randint, a `from numpy.random import choice` name)."""
    if in_package(code.co_filename):
        return []
    out, cur = [], None
    for ins in dis.get_instructions(code):
        if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME"):
            cur = globals_.get(ins.argval)
        elif ins.opname in ("LOAD_ATTR", "LOAD_METHOD") and isinstance(cur, types.ModuleType):
            cur = getattr(cur, ins.argval, None)
        else:
            cur = None
            continue
        if getattr(cur, "__self__", None) is _NP_GLOBAL and ins.positions.lineno is not None:
            out.append((code.co_filename, ins.positions.lineno))
    return out
