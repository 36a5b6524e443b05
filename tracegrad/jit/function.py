"""tg.compile: the compiled function, its cache of entries (one per signature) and its stats."""
import functools
import time
import warnings
from collections import Counter

from ..tensor import Hooks
from . import introspect
from .entry import Entry
from .signature import call_signature, changes, fast_key

BACKENDS = ("llvm", "interpret")


def compile(fn=None, *, backend=None, fuse=True, check=False):
    """Decorator: `@tg.compile` or `@tg.compile(backend="interpret", fuse=True, check=False)`."""
    if fn is None:
        return lambda f: CompiledFunction(f, backend, fuse, check)
    if not callable(fn):
        raise TypeError(f"tg.compile expects a function, got {type(fn).__name__}")
    return CompiledFunction(fn, backend, fuse, check)


class CompiledFunction:
    def __init__(self, fn, backend, fuse, check):
        backend = backend or "llvm"
        if backend not in BACKENDS:
            raise ValueError(f"unknown or unavailable backend {backend!r}; available: {', '.join(BACKENDS)}")
        self.fn, self.backend, self.fuse, self.check = fn, backend, fuse, check
        self.cache = {}
        self._fast = {}      # hot-path signature (all-tensor/number arguments) -> entry
        self._stats = {"traces": 0, "cache_hits": 0, "disk_hits": 0, "compile_seconds": 0.0, "kernels": 0,
                       "retrace_reasons": []}
        self._last_desc = None
        self._changes = Counter()
        self._warned = False
        functools.update_wrapper(self, fn)

    # ------------------------------------------------------------------ calling
    def __call__(self, *args, **kwargs):
        if Hooks.tracer is not None:       # called while tracing another function: inline it
            return self.fn(*args, **kwargs)
        fast = fast_key(args, kwargs)
        entry = self._fast.get(fast) if fast is not None else None
        if entry is not None and (not entry.guards or entry.guard_failure() is None):
            self._stats["cache_hits"] += 1
            return entry.call(args)
        leaves, paths, key, desc = call_signature(self.fn, args, kwargs)
        entry = self.cache.get(key)
        if entry is not None:
            reason = entry.guard_failure()
            if reason is None:
                self._stats["cache_hits"] += 1
                if fast is not None:
                    self._fast[fast] = entry
                return entry.call(leaves)
            del self.cache[key]
            self._fast.clear()
            self._note_retrace([reason])
            self._last_desc = None
        entry = self._build(args, kwargs, leaves, paths, key, desc)
        if fast is not None:
            self._fast[fast] = entry
        return entry.call(leaves)

    def _note_retrace(self, reasons):
        self._stats["retrace_reasons"].extend(reasons)
        for r in reasons:
            self._changes[r.split(":")[0]] += 1

    def _build(self, args, kwargs, leaves, paths, key, desc):
        if self._last_desc is not None:
            self._note_retrace(changes(self._last_desc, desc))
        self._last_desc = desc
        t0 = time.perf_counter()
        entry = Entry(self, args, kwargs, leaves, paths)
        self._stats["traces"] += 1
        self._stats["compile_seconds"] += time.perf_counter() - t0
        self._stats["kernels"] = entry.kernel_count()
        self._stats["disk_hits"] += int(entry.disk_hit)
        self.cache[key] = entry
        if self._stats["traces"] > 8 and not self._warned:
            self._warned = True
            what = ", ".join(f"{k} ({n}×)" for k, n in self._changes.most_common(3))
            warnings.warn(f"{self.__name__} was traced {self._stats['traces']} times; what keeps changing: {what}. "
                          f"Keep shapes, dtypes and non-tensor arguments fixed, or pass changing numbers "
                          f"as tensors.", RuntimeWarning, stacklevel=3)
        introspect.dump(entry, self._stats["traces"])
        return entry

    def _entry_for(self, args, kwargs):
        leaves, paths, key, desc = call_signature(self.fn, args, kwargs)
        entry = self.cache.get(key)
        if entry is None or entry.guard_failure() is not None:
            self._fast.clear()
            entry = self._build(args, kwargs, leaves, paths, key, desc)
        return entry, leaves

    # ------------------------------------------------------------------ introspection
    def ir(self, *args, stage="forward", source=False, optimized=False, **kwargs):
        """The IR text of a stage: traced, forward, backward, kernels, llvm (see SPEC §5)."""
        return introspect.stage_text(self._entry_for(args, kwargs)[0], stage, source, optimized)

    def profile(self, *args, repeat=5, plot=None, **kwargs):
        """Per kernel of the forward program, a dict: "kernel", "kind", "ops", "time" (median seconds
        over `repeat` runs), "bytes" moved, achieved "GB/s", "flops", "GFLOP/s", "intensity" (flop per
        byte), and its "bandwidth share" and "compute share" of this machine's measured peaks
        (tg.viz.roofline.peaks()). `plot="profile.svg"` also writes the kernels on an SVG roofline.
        Needs backend="llvm"."""
        entry, leaves = self._entry_for(args, kwargs)
        return introspect.profile_rows(entry, leaves, repeat, plot)

    def to_dot(self, *args, **kwargs):
        return introspect.to_dot(self._entry_for(args, kwargs)[0].fwd)

    def draw(self, *args, stage="forward", **kwargs):
        """A picture (tg.viz.Drawing) of a stage: "traced", "forward", "backward", or "kernels" (the
        forward and backward graphs, each fused kernel a box around its ops). `str()` is DOT text;
        `.render("graph.svg")` needs Graphviz."""
        return introspect.drawing(self._entry_for(args, kwargs)[0], stage)

    def stats(self):
        return dict(self._stats, retrace_reasons=list(self._stats["retrace_reasons"]))


def make_ir(f):
    """`tg.make_ir(f)(*args)`: the forward IR text of f for these arguments, without compiling."""
    def build(*args, **kwargs):
        fn = f.fn if isinstance(f, CompiledFunction) else f
        return CompiledFunction(fn, "interpret", True, False).ir(*args, stage="forward", **kwargs)
    return build
