"""Symbolic sizes in compiled functions: which dims of the tensor arguments a trace takes as symbols
(tg.compile's `dynamic`, tg.mark_dynamic / tg.mark_static), and the entry of a symbolic trace.

A symbolic entry traces the user's function once with symbolic sizes (symint.py): its ShapeEnv holds
the symbols, where each is read from (an argument's dim), and the guards the trace decided on. A call
applies when the state guards and every shape guard hold under its sizes; it then runs the program
for its sizes, built on first use from the symbolic graphs (`program_for`, with no trace of the
user's Python) and kept per set of sizes inside the entry.
"""
import copy
import time
import weakref

from ..ir.passes import optimize
from ..symint import ShapeEnv, hint, using
from ..tensor import Tensor
from .callgen import sized_run
from .entry import Entry, entry_name
from .pipeline import finish, instantiate, trace_call

_MARKS = {}     # id(tensor) -> (weak reference, {dim: True (dynamic) | False (static)})


def _marks(x):
    got = _MARKS.get(id(x))
    return got[1] if got is not None and got[0]() is x else {}


def _mark(x, dim, dynamic):
    if not isinstance(x, Tensor):
        raise TypeError(f"expected a tensor, got {type(x).__name__}")
    dims = dim if isinstance(dim, (list, tuple)) else [dim]
    for d in dims:
        if not isinstance(d, int) or not -x.ndim <= d < x.ndim:
            raise IndexError(f"dim {d} is out of range for a tensor of shape {tuple(x.shape)}")
    if id(x) not in _MARKS or _MARKS[id(x)][0]() is not x:
        key = id(x)
        _MARKS[key] = (weakref.ref(x, lambda _: _MARKS.pop(key, None)), {})
    for d in dims:
        _MARKS[id(x)][1][d % x.ndim] = dynamic


def mark_dynamic(x, dim):
    """Make dim `dim` (an int or a list of them) of tensor `x` symbolic in the compiled functions it is
    passed to, from their first call (torch._dynamo.mark_dynamic). Its size may still be 0 or 1:
    where the trace decided something on it (a size-1 stretch), a call taking the other path fails
    a guard and retraces."""
    _mark(x, dim, True)


def mark_static(x, dim):
    """Keep dim `dim` of tensor `x` a fixed size in the compiled functions it is passed to, even with
    dynamic=True or after its size changed (torch._dynamo.mark_static): a new size retraces."""
    _mark(x, dim, False)


def tensor_dims(leaves):
    """[(leaf position, tensor)] of the tensor arguments."""
    return [(k, x) for k, x in enumerate(leaves) if isinstance(x, Tensor)]


def choose_dims(leaves, dynamic, changed=frozenset()):
    """The (leaf position, dim) pairs a trace takes as symbols: marked dynamic, `changed` (dims whose
    size changed since an earlier trace: dynamic=None), or with dynamic=True each dim whose size is
    not 1 (a size-1 dim broadcasts: it stays fixed); never a dim marked static."""
    out = set()
    for k, x in tensor_dims(leaves):
        marks = _marks(x)
        for d, n in enumerate(x._shape):
            want = marks.get(d)
            if want is None:
                want = (dynamic is True and n != 1) or (dynamic is not False and (k, d) in changed)
            if want:
                out.add((k, d))
    return frozenset(out)


def changed_dims(before, leaves):
    """The (leaf position, dim) whose sizes differ between the shapes `before` {leaf position: shape}
    and this call's, or None when anything else differs (a new tensor, a rank)."""
    now = {k: x._shape for k, x in tensor_dims(leaves)}
    if set(now) != set(before) or any(len(now[k]) != len(before[k]) for k in now):
        return None
    return frozenset((k, d) for k in now for d, (a, b) in enumerate(zip(before[k], now[k])) if a != b)


def _symbol_name(d, taken):
    preferred = {0: "B", 1: "T"}.get(d)
    if preferred is not None and preferred not in taken:
        return preferred
    return next(f"S{i}" for i in range(len(taken) + 1) if f"S{i}" not in taken)


class SymbolicEntry:
    """The entry of one symbolic trace: the ShapeEnv, the traced stages, a program per sizes."""

    def __init__(self, cf, args, kwargs, leaves, paths, dims):
        self.cf, self.dims = cf, dims
        self.name = entry_name(cf)
        self.env = env = ShapeEnv()
        self.sources = []           # (leaf position, dim, symbol name) of every symbolic dim
        shapes, by_size = {}, {}
        with using(env):
            for k, d in sorted(dims):
                x, n = leaves[k], leaves[k]._shape[d]
                # dims at one position of different tensors with one size share a symbol (x's and y's
                # batch), checked equal at each call
                s = by_size.get((n, d))
                if s is None:
                    s = by_size[n, d] = env.sym(_symbol_name(d, env.symbols), n, source=(paths[k], d))
                else:
                    env.add_source(str(s), (paths[k], d))
                self.sources.append((k, d, str(s)))
                shapes.setdefault(k, list(x._shape))[d] = s
            self.stages = trace_call(cf.fn, self.name, cf.backend, args, kwargs, leaves, paths, cf.runs,
                                     {k: tuple(v) for k, v in shapes.items()})
            tracer = self.stages.capture.tracer
            if tracer.layout_used:
                # strides are worked out on the sizes seen (trace.py): what a layout question answered
                # at sizes of 2 or more holds for all such sizes; a size of 0 or 1 is pinned
                for s in by_size.values():
                    if hint(s) < 2:
                        int(s)              # pinned: records s == its value
                    elif tracer.layout_by_size:
                        bool(s >= 2)        # records the guard
            pinned = env.pinned()
            if pinned:      # symbols the trace fixed to a number (a feature size meeting a weight's): numbers
                self.stages = instantiate(self.stages, pinned)
        self.paths = paths
        self.at = {}                # symbol -> (leaf position, dim) it is read from
        for k, d, name in self.sources:
            self.at.setdefault(name, (k, d))
        self.state_failure = self.stages.capture.guards.failure
        self.guarded = True
        self.programs = {}          # sizes (by symbol, in ShapeEnv order) -> Entry
        self.core = None            # the symbolic stages lowered once (llvm: _stages_for)
        self.traced = self.stages.traced
        self._optimized = None
        self.disk_hit, self.last_used = False, 0

    def _optimize(self):
        """The symbolic forward and backward graphs optimized (IR text only: a call runs the program
        of its sizes); guards a pass records go to a scratch copy of the env."""
        if self._optimized is None:
            scratch = copy.deepcopy(self.env)
            scratch.sealed = False
            with using(scratch):
                bwd = self.stages.backward
                self._optimized = (optimize(self.traced), None if bwd is None else optimize(bwd.graph))
                if bwd is not None:
                    self._optimized[1].grads_of = [e.value.name for e in bwd.targets]
        return self._optimized

    @property
    def fwd(self):
        return self._optimize()[0]

    @property
    def bwd(self):
        return self._optimize()[1]

    def sizes(self, leaves):
        """{symbol: size} of a call."""
        return self.env.derive({name: leaves[k]._shape[d] for name, (k, d) in self.at.items()})

    def guard_failure(self, leaves):
        """None when this entry applies to the call, else why not: a state guard, then shape_failure."""
        return self.state_failure(leaves) or self.shape_failure(leaves)

    def shape_failure(self, leaves):
        """None when the call's sizes pass this entry's shape guards, else why not: a dim read twice
        with two sizes, or the first guard that fails."""
        sizes = self.sizes(leaves)
        for k, d, name in self.sources:
            n = leaves[k]._shape[d]
            if n != sizes[name]:
                k0, d0 = self.at[name]
                return (f"{self.paths[k]}: dim {d} ({n}) no longer equals {self.paths[k0]} dim {d0} "
                        f"({sizes[name]}), both symbol {name}")
        reason = self.env.check(sizes)
        return None if reason is None else f"guard {reason}"

    def program_for(self, leaves):
        """The compiled program (an Entry) of the call's sizes, built on first use."""
        sizes = self.sizes(leaves)
        key = tuple(sizes[n] for n in self.env.symbols)
        entry = self.programs.get(key)
        if entry is None:
            t0 = time.perf_counter()
            if len(self.programs) >= self.cf.cache_size:       # the oldest sizes go first
                del self.programs[next(iter(self.programs))]
            entry = self.programs[key] = Entry(self.cf, None, None, leaves, self.paths,
                                               stages=self._stages_for(sizes))
            self.disk_hit = entry.disk_hit
            self.cf._stats["compile_seconds"] += time.perf_counter() - t0
        return entry

    def _stages_for(self, sizes):
        """The finished stages for one set of sizes. On the CPU (llvm) and cuda the symbolic graphs are
        lowered once, into programs that take the sizes at each call (backends/cpu/sizes.py,
        backends/cuda/sizes.py): every set of sizes shares them, with no LLVM or kernel work; a strategy
        that needs a size compiled in records its guard in this entry's ShapeEnv, which is then sealed:
        a later compile (a partial backward, a joined forward) that would record one takes a choice
        holding for every size (LateGuard). The interpreter runs the graphs instantiated for the sizes."""
        if self.stages.backend not in ("llvm", "cuda"):
            return instantiate(self.stages, sizes)
        if self.core is None:
            with using(self.env):
                self.core = finish(copy.copy(self.stages), self.cf.fuse)
            self.env.sealed = True
            self.core.shape_env, self.core.shared = self.env, {}
        out = copy.copy(self.core)
        out.sizes = dict(sizes)
        out.run_fwd, out.run_bwd = (None if r is None else sized_run(r, out.sizes)
                                    for r in (self.core.run_fwd, self.core.run_bwd))
        return out

    def call(self, leaves):
        return self.program_for(leaves).call(leaves)

    def latest(self):
        """The program built last (for the stages of one set of sizes: kernels, llvm)."""
        return next(reversed(self.programs.values()))

    def kernel_count(self):
        return sum(e.kernel_count() for e in self.programs.values())

    def symbols_text(self):
        """{symbol: "x dim 0, range [lo, hi]"} for stats()."""
        out = {}
        for name, (lo, hi, (path, d)) in self.env.symbols.items():
            more = [f"{p} dim {dd}" for p, dd in self.env.extra_sources.get(name, ())]
            out[name] = ", ".join([f"{path} dim {d}"] + more) + f" in [{lo}, {'inf' if hi is None else hi}]"
        return out


def describe(entry, leaves, before, was_symbolic):
    """The retrace reasons of a symbolic trace: each dim that became symbolic, with its sizes
    (`before`: the shapes of the previous trace, `was_symbolic` its symbolic dims)."""
    out = []
    for k, d, name in entry.sources:
        if (k, d) in was_symbolic:
            continue
        old = before.get(k)
        was = f"{hint(old[d])} -> " if old is not None and d < len(old) else ""
        out.append(f"{entry.paths[k]}: dim {d} became symbolic {name} ({was}{leaves[k]._shape[d]})")
    return out
