"""tg.compile: the compiled function, its cache of entries (one per signature) and its stats."""
import functools
import gc
import threading
import time
import types
import warnings
from collections import Counter, deque

from .. import logs
from ..core import RNG
from ..locks import after_fork_in_child, lock, rlock
from ..modes import _thread
from ..trace import tracing
from . import introspect
from .dynamic import SymbolicEntry, changed_dims, choose_dims, describe, tensor_dims
from .entry import Entry
from .forward_call import TangentsOf, call_with_tangents
from .signature import call_signature, changes, fast_key, general_key, last_call, sizeless_key

BACKENDS = ("llvm", "interpret")          # the cpu backends
ALL_BACKENDS = BACKENDS + ("cuda",)


CACHE_SIZE = 64     # compiled signatures kept in memory per function (least recently used go first)
RETRACE_REASONS = 100     # the latest retrace reasons kept per function (stats()["retrace_reasons"])


def compile(fn=None, *, backend=None, fuse=True, check=False, cache_size=CACHE_SIZE, dynamic=None):
    """Decorator: `@tg.compile` or `@tg.compile(backend="interpret", fuse=True, check=False, dynamic=None)`.

    Options:
    - backend: "llvm" (the default for cpu tensors): fused kernels compiled through llvmlite, run on
      all cores (TRACEGRAD_THREADS), machine code cached on disk (TRACEGRAD_CACHE_DIR); "cuda" (the
      default for cuda tensors): the same fused kernels as numba.cuda kernels, buffers and the
      whole call on the device; "interpret": the IR run op by op with NumPy, the oracle compiled
      code is tested against. Inputs on two devices raise the device error.
    - fuse: False makes every op its own kernel (to measure what fusion buys, or to bisect a bug).
    - check: True runs the interpreter beside every call and raises tg.CheckError at the first
      kernel whose result differs, naming the ops fused into it (slow; for debugging). The
      interpreter takes the compiled run's random draws, so the generator moves as in one call.
    - cache_size: how many signatures stay compiled in memory per function (see below).
    - dynamic: which sizes of tensor arguments are symbols rather than fixed numbers (as torch.compile's).
      None (the default): the first call is traced with fixed sizes; a later call that differs from
      an earlier one only in some dims' sizes is traced once more with those dims symbolic, and that
      trace serves every size its guards allow. True: every dim of every tensor argument is symbolic
      from the first call, except a dim of size 1 (it broadcasts: it stays fixed). False: every size is
      fixed (a new size retraces). tg.mark_dynamic(x, dim) / tg.mark_static(x, dim) decide per tensor
      argument (also under dynamic=False, mark_dynamic applies). Symbols are named by the dim they are
      read from: dim 0 B, dim 1 T, others S0, S1, ...; dims of one size at the trace share a symbol
      (checked equal at each call). Every decision the trace made on a symbol (a size-1 stretch, an
      equality, `if x.shape[0] > 64`, a size made a plain number) is a guard: a call whose sizes fail
      one traces again, with the reason in retrace_reasons (`guard B != 1 failed (B = 1)`); sizes 0
      and 1 are never assumed away. `stats()["dynamic"]` lists each symbolic trace's symbols and guards.
      A size read inside the function (`n = x.shape[0]`) is then a symbolic int: arithmetic, comparisons,
      reshape/view/arange/slicing/zeros/eye/tg.tensor([n, 2]) keep it symbolic; whatever needs its number
      pins it (a guard n == its value): int(n), float(n), hash(n), len(x), range(n), [0] * n, NumPy
      shapes, "%d" % n, slicing a list (a SymInt is no int subclass, as torch's: no read is unguarded).

    The compiled function f has f.ir(*args, stage="traced"|"forward"|"backward"|"kernels"|"llvm"|"cuda"),
    f.draw(*args, stage=...) (a picture), f.profile(*args, plot=None) (time, bytes and rates per
    kernel), f.stats() (traces, cache hits, compile time, retrace reasons) and f.to_dot(*args).

    Works on functions, methods (`self` is bound) and modules (`tg.compile(model)` stands in for
    the model). The first call with a new *signature* traces fn; later calls with the same
    signature run the compiled code. What a call depends on, and how:

    - retraced when it changes (the signature and guards; `stats()["retrace_reasons"]` says which):
      each tensor argument's shape, dtype, device, requires_grad, whether its .grad is None, and
      which arguments are the same tensor; the values of number, string and None arguments; the
      identity of module, optimizer and plain-object arguments (a method's `self`); grad mode; the
      globals read by the function's code and by the code of every user function it called while
      traced (helpers, a module's forward), its closure variables and default argument values; and
      what each value read holds, by one rule (jit/walk.py): tensors, modules, optimizers and
      functions by identity, numbers, strings and tuples of them by value (floats bit for bit:
      -0.0 is not 0.0, NaN stays NaN), lists, dicts, closure cells and the attributes of modules,
      dataclasses, SimpleNamespaces and plain objects item by item, NumPy arrays by their bytes
      (`training`, so `model.eval()` retraces; momentum, betas, eps, weight_decay; `m.act = tg.relu`;
      `cfg.alpha = 2`); the shape, dtype and requires_grad of tensors read through closures and
      objects; for a function that writes to its inputs, which inputs share memory (and which are
      one array: a and a.detach() are one storage inside the trace, as eagerly); and the memory
      layout (strides) of tensor arguments and captured tensors when the trace depends on it (it
      called contiguous(), is_contiguous(), stride() or view(), or took a reshape and updated a
      tensor in place).
    - read at every call, never retraced: tensor values, and numbers registered as dynamic
      (an optimizer's `lr`, so a learning-rate schedule costs no retrace).
    Results are what eager code returns: an input (or its .grad) returned is that tensor, a view of
    an input or of another result is a view over its memory, one tensor returned twice is one
    object. A call's backward raises eager's in-place error when a tensor it reads was changed in
    place since the call (an input, a result, or a view of either); as under torch.compile, that
    includes an input the compiled backward recomputes from where eager would have saved the result.
    A call that raises while it is traced changes no tensor and no .grad (eagerly, the updates made
    before the exception would remain); the next call traces again. An in-place update of an input
    that autograd records (x.add_(w) with w requiring grad, outside tg.no_grad()) is refused at the
    call: the caller's tensor could not take that history.
    Under tg.jvp a call runs the function traced in forward mode (its arguments' tangents as inputs;
    jit/forward_call.py), compiled and cached apart. A gradient taken inside with create_graph=True
    (a gradient penalty) is part of the traced graph, so the call's backward differentiates it.
    Python code around tensor ops (prints, appends, random draws) runs only while tracing.
    Random tensors (tg.rand, tg.randn, tg.randint, tg.randperm, dropout) draw at every call, in eager's order, unused ones
    included: the generator ends where eager leaves it under the same tg.manual_seed.

    The `cache_size` most recently used signatures stay in memory per function; an evicted one is
    traced again on its next call and its machine code reloads from the disk cache.
    `stats()["retrace_reasons"]` keeps the latest RETRACE_REASONS (100) reasons.
    """
    if fn is None:
        return lambda f: CompiledFunction(f, backend, fuse, check, cache_size, dynamic=dynamic)
    if not callable(fn):
        raise TypeError(f"tg.compile expects a function, got {type(fn).__name__}")
    return CompiledFunction(fn, backend, fuse, check, cache_size, dynamic=dynamic)


class CompiledFunction:
    def __init__(self, fn, backend, fuse, check, cache_size=CACHE_SIZE, runs=None, dynamic=None):
        """runs: what a trace calls instead of fn (the forward-mode twin's TangentsOf), fn still
        being what the guards read."""
        if dynamic not in (None, True, False):
            raise ValueError(f"tg.compile: dynamic must be None, True or False, got {dynamic!r}")
        self.dynamic = dynamic
        self.symbolic = {}   # (symbolic dims, signature with those sizes left out) -> [SymbolicEntry]
        self._sizes = {}     # signature without sizes -> (tensor shapes, symbolic dims) of its latest trace
        self._miss = None    # (symbolic dims, reason) of the latest call a symbolic entry's shape guards refused
        self._static_only = {}   # signature without sizes -> why its symbolic compile failed (compiled per size)
        self._dropped = {}   # (signature without sizes, symbolic dims) -> the state change that dropped its entry
        if backend is not None and backend not in ALL_BACKENDS:     # None: by the inputs' device
            raise ValueError(f"unknown or unavailable backend {backend!r}; available: {', '.join(ALL_BACKENDS)}")
        if not isinstance(cache_size, int) or cache_size < 1:
            raise ValueError(f"tg.compile: cache_size must be a positive int, got {cache_size!r}")
        self.fn, self.backend, self.fuse, self.check, self.cache_size = fn, backend, fuse, check, cache_size
        self.cache = {}      # signature -> entry, at most cache_size (least recently used evicted)
        self._fast = {}      # hot-path signature (all-tensor/number arguments) -> entry
        self._last = None    # (LastCall, entry) of the latest hot-path call: checked first
        self._stats = {"traces": 0, "cache_hits": 0, "disk_hits": 0, "compile_seconds": 0.0, "kernels": 0,
                       "retrace_reasons": deque(maxlen=RETRACE_REASONS), "symbolic_failures": []}
        self._last_desc = None
        self._changes = Counter()
        self._warned = False
        self._clock = 0
        self._lock = rlock()               # one trace at a time: racing first calls compile once
        self.runs, self._twin = runs, None  # _twin: the compiled function of calls under tg.jvp
        if isinstance(fn, (types.FunctionType, types.MethodType)):
            functools.update_wrapper(self, fn)
            self._signature_of = fn
        else:                               # a module (tg.compile(model)) or another callable object
            self.__name__ = getattr(fn, "__name__", type(fn).__name__)
            self.__doc__ = getattr(fn, "__doc__", None)
            self._signature_of = getattr(fn, "forward", fn)
        if runs is not None:
            self._signature_of = runs

    def __getattr__(self, name):
        """tg.compile(model) stands in for the model: its other attributes are the model's."""
        if name == "fn" or name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.fn, name)

    def __get__(self, obj, objtype=None):
        """@tg.compile on a method: instance.method binds the instance as the first argument."""
        return self if obj is None else types.MethodType(self, obj)

    # ------------------------------------------------------------------ calling
    def __call__(self, *args, **kwargs):
        if _thread.interpreters:
            if tracing():                  # called while tracing another function: inline it
                return self.fn(*args, **kwargs)
            return call_with_tangents(self._forward_mode(), args, kwargs)     # under tg.jvp
        last = self._last                  # (LastCall, entry) of the latest hot-path call
        if last is not None and not kwargs and last[0].matches(args):
            entry = last[1]
            if not entry.guarded or entry.guard_failure(args) is None:
                stats = self._stats
                stats["cache_hits"] += 1
                self._clock += 1
                entry.last_used = self._clock
                return entry.call(args)
        fast = fast_key(args, kwargs)
        entry = self._fast.get(fast) if fast is not None else None
        if entry is not None and (not entry.guarded or entry.guard_failure(args) is None):
            m = last_call(args)
            self._last = (m, entry) if m is not None else None
            return self._hit(entry, args)
        leaves, paths, key, desc = call_signature(self._signature_of, args, kwargs)
        entry = self._lookup(key, leaves)
        if entry is None:
            with self._lock:               # another thread may have built it meanwhile
                entry = self._lookup(key, leaves)
                if entry is None:
                    entry = self._build(args, kwargs, leaves, paths, key, desc)
                else:
                    self._stats["cache_hits"] += 1
        else:
            self._stats["cache_hits"] += 1
        if isinstance(entry, SymbolicEntry):
            # the program of these sizes: its guards are the trace's state guards, so the hot paths,
            # which see these exact shapes again, need not check the shape guards (fixed once the
            # first program is built: the ShapeEnv is sealed, a later compile cannot add one)
            entry = entry.program_for(leaves)
        if fast is not None:
            self._fast[fast] = entry
        return entry.call(leaves)

    def _forward_mode(self):
        """The compiled function of calls under forward mode: fn traced with its arguments' tangents
        (forward_call.py), its entries cached apart."""
        if self._twin is None:
            with self._lock:
                if self._twin is None:
                    twin = CompiledFunction(self.fn, self.backend, self.fuse, self.check, self.cache_size,
                                            runs=TangentsOf(self.fn, self.__name__), dynamic=self.dynamic)
                    twin.__name__ = f"{self.__name__}_jvp"
                    self._twin = twin
        return self._twin

    def _hit(self, entry, args):
        self._stats["cache_hits"] += 1
        self._clock += 1
        entry.last_used = self._clock
        return entry.call(args)

    def _forget_fast(self):
        """An entry left the cache: no hot path may lead to it."""
        self._fast, self._last = {}, None

    def _lookup(self, key, leaves):
        """The cached entry for `key` whose guards hold, else None (a failed guard drops the entry)."""
        entry = self.cache.get(key)
        if entry is None:
            return self._lookup_symbolic(key, leaves) if self.symbolic else None
        reason = entry.guard_failure(leaves)
        if reason is None:
            self._clock += 1
            entry.last_used = self._clock
            return entry
        with self._lock:
            if self.cache.get(key) is entry:
                del self.cache[key]
                self._forget_fast()
                self._note_retrace([reason])
                self._last_desc = None
        return None

    def _lookup_symbolic(self, key, leaves):
        """The symbolic entry this call's sizes satisfy, else None; a state guard failing drops the
        entry, a shape guard failing keeps it (other sizes still hold) and is noted for the retrace."""
        self._miss = None
        for (dims, gkey), entries in list(self.symbolic.items()):
            if general_key(key, dims) != gkey:
                continue
            for entry in list(entries):
                reason = entry.state_failure(leaves)
                if reason is not None:
                    with self._lock:
                        entries.remove(entry)
                        self._dropped[sizeless_key(key), dims] = reason
                        self._forget_fast()
                        self._note_retrace([reason])
                        self._last_desc = None
                    continue
                reason = entry.shape_failure(leaves)
                if reason is None:
                    self._clock += 1
                    entry.last_used = self._clock
                    return entry
                self._miss = (dims, reason)
        return None

    def _symbolic_dims(self, leaves, key):
        """(the dims a new trace takes as symbols, the retrace reason when a shape guard refused the
        call), from dynamic, the marks, and (dynamic=None) the sizes of the latest trace of this
        signature up to sizes."""
        miss, self._miss = self._miss, None
        if sizeless_key(key) in self._static_only:
            return frozenset(), None
        if miss is not None:
            return choose_dims(leaves, self.dynamic, miss[0]), [miss[1]]
        before = self._sizes.get(sizeless_key(key))
        changed = frozenset()
        if before is not None and self.dynamic is None:
            changed = (changed_dims(before[0], leaves) or frozenset()) | before[1]
        return choose_dims(leaves, self.dynamic, changed), None

    def _symbolic(self, args, kwargs, leaves, paths, key, dims, before, shape_reason):
        """A SymbolicEntry for `dims`, or the text of why compiling it failed: _build then compiles the
        signature per size (a static entry, as dynamic=False) — correct, only retraced for each new size."""
        state = RNG[0].bit_generator.state        # a failed trace draws as eager did: the static one will
        try:
            entry = SymbolicEntry(self, args, kwargs, leaves, paths, dims)
            newly = describe(entry, leaves, *(before or ({}, frozenset())))
            entry.program_for(leaves)
        except Exception as e:          # noqa: BLE001  (any failure: the static compile decides)
            RNG[0].bit_generator.state = state
            return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        dropped = self._dropped.pop((sizeless_key(key), dims), None)
        if shape_reason is None and before is not None and newly:     # else noted at the lookup or by _build
            self._note_retrace(newly + ([f"the entry of these sizes was dropped earlier ({dropped})"] if dropped else []))
        return entry

    def _symbolic_failed(self, key, why):
        """The symbolic compile of a signature failed where the static one worked: a limit of tracegrad's
        symbolic sizes (please report it). The signature is compiled per size from now on, with a
        RuntimeWarning and stats()["symbolic_failures"] naming why. (Where the static compile fails too,
        the error is the user's: it is raised, and the next call tries symbolic sizes again.)"""
        self._static_only[sizeless_key(key)] = why
        self._stats["symbolic_failures"].append(why)
        warnings.warn(f"{self.__name__}: compiling with symbolic sizes failed ({why}); compiling for these "
                      f"sizes instead (each new size retraces). Please report it with the function.",
                      RuntimeWarning, stacklevel=6)

    def _note_retrace(self, reasons):
        logs.retrace(self.__name__, self._stats["traces"] + 1, reasons)
        self._stats["retrace_reasons"].extend(reasons)
        for r in reasons:
            self._changes[r.split(":")[0]] += 1

    def _build(self, args, kwargs, leaves, paths, key, desc):
        dims, shape_reason = self._symbolic_dims(leaves, key)
        before = self._sizes.get(sizeless_key(key))
        if shape_reason is not None:
            self._note_retrace(shape_reason)
        elif self._last_desc is not None and (not dims or before is None):   # a new signature: what changed
            self._note_retrace(changes(self._last_desc, desc))
        last, self._last_desc = self._last_desc, desc
        t0 = time.perf_counter()
        with _gc_paused(), logs.compiling(self.__name__):
            entry = self._symbolic(args, kwargs, leaves, paths, key, dims, before, shape_reason) if dims else None
            if entry is None or isinstance(entry, str):
                why, dims = entry, frozenset()
                entry = Entry(self, args, kwargs, leaves, paths)     # a user's error raises here, as static
                if why is not None:
                    self._symbolic_failed(key, why)
                    if shape_reason is None and before is not None and last is not None:   # (else noted above)
                        self._note_retrace(changes(last, desc))
        self._sizes[sizeless_key(key)] = ({k: x._shape for k, x in tensor_dims(leaves)}, dims)
        self._stats["traces"] += 1
        self._stats["compile_seconds"] += time.perf_counter() - t0
        self._stats["kernels"] = entry.kernel_count()
        self._stats["disk_hits"] += int(entry.disk_hit)
        self._clock += 1
        entry.last_used = self._clock
        if dims:
            self.symbolic.setdefault((dims, general_key(key, dims)), []).insert(0, entry)
        else:
            if len(self.cache) >= self.cache_size:     # evict the least recently used signature
                old = min(self.cache, key=lambda k: self.cache[k].last_used)
                del self.cache[old]
                self._forget_fast()
            self.cache[key] = entry
        if self._stats["traces"] > 8 and not self._warned:
            self._warned = True
            what = ", ".join(f"{k} ({n}×)" for k, n in self._changes.most_common(3))
            warnings.warn(f"{self.__name__} was traced {self._stats['traces']} times; what keeps changing: {what}. "
                          f"Keep shapes, dtypes and non-tensor arguments fixed, or pass changing numbers "
                          f"as tensors.", RuntimeWarning, stacklevel=3)
        introspect.dump(entry, self._stats["traces"])
        return entry

    def _entry_for(self, args, kwargs, concrete=False):
        """(the entry of this call, its leaves); concrete: of a symbolic entry, the program of the
        call's sizes."""
        leaves, paths, key, desc = call_signature(self._signature_of, args, kwargs)
        with self._lock:
            entry = self._lookup(key, leaves)
            if entry is None:
                entry = self._build(args, kwargs, leaves, paths, key, desc)
        if concrete and isinstance(entry, SymbolicEntry):
            entry = entry.program_for(leaves)
        return entry, leaves

    # ------------------------------------------------------------------ introspection
    def ir(self, *args, stage="forward", source=False, optimized=False, **kwargs):
        """The IR text of a stage: traced, forward, backward, kernels, llvm, cuda (see SPEC §5)."""
        entry, leaves = self._entry_for(args, kwargs)
        if isinstance(entry, SymbolicEntry) and stage not in introspect.SYMBOLIC_STAGES:
            entry = entry.program_for(leaves)       # kernels, llvm: those of this call's sizes
        return introspect.stage_text(entry, stage, source, optimized)

    def profile(self, *args, repeat=5, plot=None, **kwargs):
        """Per kernel of the forward program, a dict: "kernel", "kind", "ops", "time" (median seconds
        over `repeat` runs), "bytes" moved, achieved "GB/s", "flops", "GFLOP/s", "intensity" (flop per
        byte), and its "bandwidth share" and "compute share" of this machine's measured peaks
        (tg.viz.roofline.peaks()). `plot="profile.svg"` also writes the kernels on an SVG roofline.
        Needs backend="llvm", or "cuda": kernels timed with CUDA events, rows without the cpu's
        roofline shares."""
        entry, leaves = self._entry_for(args, kwargs, concrete=True)
        return introspect.profile_rows(entry, leaves, repeat, plot)

    def to_dot(self, *args, **kwargs):
        return introspect.to_dot(self._entry_for(args, kwargs)[0].fwd)

    def draw(self, *args, stage="forward", **kwargs):
        """A picture (tg.viz.Drawing) of a stage: "traced", "forward", "backward", or "kernels" (the
        forward and backward graphs, each fused kernel a box around its ops). `str()` is DOT text;
        `.render("graph.svg")` needs Graphviz."""
        return introspect.drawing(self._entry_for(args, kwargs, concrete=True)[0], stage)

    def stats(self):
        """traces, cache_hits, disk_hits, compile_seconds, kernels, retrace_reasons; and per symbolic
        trace ("dynamic"): its symbols (where each is read, its range), its guards and how many
        programs it compiled, one per set of sizes ("size_programs": their total); "symbolic_failures":
        why a symbolic compile failed, for signatures then compiled per size (with a RuntimeWarning)."""
        entries = [e for es in self.symbolic.values() for e in es]
        dynamic = [{"symbols": e.symbols_text(), "guards": [g.text for g in e.env.guards],
                    "programs": len(e.programs)} for e in entries]
        return dict(self._stats, retrace_reasons=list(self._stats["retrace_reasons"]), dynamic=dynamic,
                    symbolic_failures=list(self._stats["symbolic_failures"]),
                    size_programs=sum(d["programs"] for d in dynamic))


class _gc_paused:
    """Python's cyclic garbage collector paused while a signature compiles (any thread): compiling
    makes hundreds of thousands of IR objects that all stay alive, and each collection of the oldest
    generation walks them all, so its cost grew with the square of the function's size. Cycles
    made meanwhile are collected once it is resumed. The pauses are counted per thread: a forked
    child, which has only the forking thread, drops the others' (and resumes it when none is left)."""
    _lock, _depth, _was = lock(), {}, [False]     # _depth: thread id -> its nested pauses

    def __enter__(self):
        with self._lock:
            if not self._depth:
                self._was[0] = gc.isenabled()
                gc.disable()
            me = threading.get_ident()
            self._depth[me] = self._depth.get(me, 0) + 1

    def __exit__(self, *exc):
        with self._lock:
            me = threading.get_ident()
            self._depth[me] -= 1
            if not self._depth[me]:
                del self._depth[me]
            self._resume()

    @classmethod
    def _resume(cls):
        if not cls._depth and cls._was[0]:
            gc.enable()

    @classmethod
    def after_fork(cls):
        mine = cls._depth.pop(threading.get_ident(), None)
        cls._depth.clear()
        if mine:
            cls._depth[threading.get_ident()] = mine
        cls._resume()


after_fork_in_child(_gc_paused.after_fork)


def make_ir(f):
    """`tg.make_ir(f)(*args)`: the forward IR text of f for these arguments, without compiling."""
    def build(*args, **kwargs):
        fn = f.fn if isinstance(f, CompiledFunction) else f
        return CompiledFunction(fn, "interpret", True, False).ir(*args, stage="forward", **kwargs)
    return build
