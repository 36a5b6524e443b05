"""TRACEGRAD_LOG: what the compiler does, printed to stderr (in the manner of PyTorch's TORCH_LOGS).

    TRACEGRAD_LOG=stages,recompiles,kernels     (any of them, comma-separated; `all` for every one)

stages      each stage of a compile (jit/pipeline.py: trace, autodiff, optimize, ..., LLVM) and its
            wall time, then the compile's total
recompiles  each retrace of a compiled function, with its reason
kernels     each kernel built: its kind, ops, and how the target lowers it where that is known

The variable is read once per compile, never per call: a compile opens `compiling(name)`, which
reads it, and the stages and kernels inside report through `lap` and `enabled`/`say`, which cost a
thread-local read. An unknown name is a ValueError listing the valid ones."""
import os
import sys
import threading
import time

NAMES = ("stages", "recompiles", "kernels")
_PARSED = {}                  # TRACEGRAD_LOG's text -> the names it turns on
_local = threading.local()    # .on: (function name, names, [time of the last lap]) during a logged compile


def wanted():
    """The names TRACEGRAD_LOG turns on now: a frozenset, empty when it is unset."""
    text = os.environ.get("TRACEGRAD_LOG", "")
    got = _PARSED.get(text)
    if got is None:
        names = [s.strip() for s in text.split(",") if s.strip()]
        bad = [n for n in names if n not in NAMES + ("all",)]
        if bad:
            raise ValueError(f"TRACEGRAD_LOG={text!r}: unknown {'name' if len(bad) == 1 else 'names'} "
                             f"{', '.join(map(repr, bad))}; valid: {', '.join(NAMES)} or all, comma-separated "
                             f"(e.g. TRACEGRAD_LOG=stages,recompiles)")
        got = _PARSED[text] = frozenset(NAMES if "all" in names else names)
    return got


class compiling:
    """`with compiling(name, what):` around one compile of function `name` (`what`: which one, e.g.
    "compile", "backward for some gradients"); the stage lines inside and the total at the end are
    printed when TRACEGRAD_LOG has `stages`."""

    def __init__(self, name, what="compile"):
        self.name, self.what = name, what

    def __enter__(self):
        self.outer = getattr(_local, "on", None)
        want = wanted()
        self.start = time.perf_counter()
        _local.on = (self.name, want, [self.start]) if want else None
        return self

    def __exit__(self, *exc):
        on = _local.on
        if on is not None and "stages" in on[1]:
            lap("finish")
            status = "" if exc[0] is None else f" (stopped by {exc[0].__name__})"
            _print("stages", self.name, f"{self.what}: {_ms(time.perf_counter() - self.start)} in all{status}")
        _local.on = self.outer


def lap(stage, note=""):
    """In a logged compile with `stages`: print the time since the previous lap as `stage`'s."""
    on = getattr(_local, "on", None)
    if on is not None and "stages" in on[1]:
        now = time.perf_counter()
        _print("stages", on[0], f"{stage} {_ms(now - on[2][0])}{note and ' (' + note + ')'}")
        on[2][0] = now


def enabled(name):
    """Whether the compile under way logs `name` (False outside one: no read of the environment)."""
    on = getattr(_local, "on", None)
    return on is not None and name in on[1]


def say(name, text):
    """Print `text` under `name` for the compile under way (call it where `enabled(name)`)."""
    _print(name, _local.on[0], text)


def retrace(fn_name, n, reasons):
    """A retrace of `fn_name` (its trace number n) and why, where TRACEGRAD_LOG has `recompiles`."""
    if "recompiles" in wanted():
        _print("recompiles", fn_name, f"retrace (trace {n}): " + ("; ".join(reasons) or "no change recorded"))


def _ms(seconds):
    return f"{seconds * 1e3:.2f} ms"


def _print(name, fn_name, text):
    print(f"[tracegrad.{name}] {fn_name}: {text}", file=sys.stderr, flush=True)
