"""What a generated program (and the repro file written for it) calls: input data, the record of
what a run observed, and `main` for running a repro file on its own; for the size-sequence mode
(sizes.py), the sizes of the current call and the functions compiled once across them."""
import numpy as np

import tracegrad as tg

SPECIALS = (np.nan, np.inf, -np.inf, 0.0, -0.0, 1e4, -1e-30)


def data(rng, shape, dtype="float32", grad=False, special=False, low=None, layout="C", ints=None):
    """A tensor of standard normal values (|x| + `low` when `low` is given: a positive domain);
    `special` sprinkles NaN, ±inf, ±0 and extreme values in; layout "F" lays it out column-major
    (not contiguous: contiguous(), view() and reshape() then copy or refuse as eagerly).
    ints=(int dtype, lo, hi, nonzero): integers in [lo, hi] of that dtype instead (zeros made 1)."""
    if ints is not None:
        kind, lo, hi, nonzero = ints
        a = rng.integers(lo, hi, shape, endpoint=True)
        return tg.tensor(np.where(a == 0, 1, a) if nonzero else a, dtype=getattr(tg, kind))
    a = rng.standard_normal(shape)
    if low is not None:
        a = np.abs(a) + low
    if special and a.size:
        k = max(1, a.size // 5)
        a.flat[rng.integers(0, a.size, k)] = rng.choice(SPECIALS, k)
    t = tg.tensor(a, dtype=getattr(tg, dtype))
    if layout == "F":
        t = tg.from_numpy(np.asfortranarray(t.numpy()))
    if grad:
        t.requires_grad = True
    return t


def labels(rng, n, classes):
    return tg.tensor(rng.integers(0, classes, n), dtype=tg.int64)


def set_lr(opt, lr):
    """Change an optimizer's learning rate as a PyTorch user does (param_groups) or directly."""
    for group in getattr(opt, "param_groups", ()):
        group["lr"] = lr
    if hasattr(opt, "lr"):
        opt.lr = lr


_SIZES = {}         # the size-sequence mode: size as generated -> size at the current call
_COMPILED = []      # [name, compiled function, [(traces, retrace reasons) at the start of each size]]
_RAISED = []        # per size so far: whether a call raised


def resize(shape):
    """A size or a shape at the current call's sizes (use_sizes)."""
    if isinstance(shape, int):
        return _SIZES.get(shape, shape)
    return tuple(_SIZES.get(s, s) for s in shape)


def compiled(fn, backend):
    """tg.compile(fn) for a mode such as "llvm" or "llvm/dynamic" (dynamic=True), kept for use_sizes."""
    name, _, dynamic = backend.partition("/")
    f = tg.compile(fn, backend=name, **({"dynamic": True} if dynamic else {}))
    _COMPILED.append([getattr(fn, "__name__", "f"), f, []])
    return f


def _with_twin(f):
    return [f] + ([f._twin] if getattr(f, "_twin", None) is not None else [])      # calls under tg.jvp


def _counts(f):
    fs = _with_twin(f)
    return sum(g.stats()["traces"] for g in fs), [r for g in fs for r in g.stats()["retrace_reasons"]]


def start_sizes():
    _SIZES.clear()
    _COMPILED.clear()
    _RAISED.clear()


def use_sizes(sizes):
    """Make the following calls' inputs at `sizes` ({size as generated: size}); None ends the sequence and
    returns, per compiled function, per size, (the traces it made, the retrace reasons it added), with the
    reasons of a size after one that raised dropped from the check (its trace started over); the symbolic
    compiles that failed are read with symbolic_failures() before the next start_sizes."""
    for entry in _COMPILED:
        entry[2].append(_counts(entry[1]))
    _SIZES.clear()
    if sizes is not None:
        _SIZES.update(sizes)
        _RAISED.append(False)
        return None
    record = []
    for name, _, snaps in _COMPILED:
        calls = [(t1 - t0, r1[len(r0):] if r1[:len(r0)] == r0 else r1) for (t0, r0), (t1, r1) in zip(snaps, snaps[1:])]
        record.append((name, [(traced, reasons or (["after a raise"] if traced and k and _RAISED[k - 1] else []))
                              for k, (traced, reasons) in enumerate(calls)]))
    return record


def symbolic_failures():
    """Per compiled function of the sequence, the symbolic compiles that failed (stats()["symbolic_failures"]:
    each fell back to a per-size static compile, so its values are right but a symbolic compile was lost)."""
    return [(name, [w for g in _with_twin(f) for w in g.stats()["symbolic_failures"]]) for name, f, _ in _COMPILED]


class Recorder:
    """The observations of one run, in order: (label, array or None)."""

    def __init__(self):
        self.items, self.prefix = [], ""

    def __call__(self, label, value):
        if isinstance(value, tg.Tensor):
            value = np.array(value.detach().cpu().numpy(), copy=True)
        elif value is not None:
            value = np.asarray(value)
        self.items.append((self.prefix + label, value))

    def raised(self, e):
        """An error a call raised: its nearest built-in class (what is compared) and its own type and first
        line (the size-sequence mode records it and goes on with the next size)."""
        builtin = next(c.__name__ for c in type(e).__mro__ if c.__module__ == "builtins")
        text = f"{type(e).__name__}: {(str(e).splitlines() or [''])[0][:200]}"
        self("raised", np.array([builtin, text], object))
        if _RAISED:
            _RAISED[-1] = True

    def outputs(self, outs, prefix="out"):
        outs = outs if isinstance(outs, (tuple, list)) else (outs,)
        for k, o in enumerate(outs):
            self(f"{prefix}{k}", o)
        return [o for o in outs if isinstance(o, tg.Tensor)]

    def grads(self, outs, xs, prefix="grad", seed=0):
        """Gradients of the outputs (seeded cotangents) with respect to the inputs that require grad."""
        outs = [o for o in outs if o.requires_grad and o.dtype.is_floating_point]
        xs = [x for x in xs if isinstance(x, tg.Tensor) and x.requires_grad]
        if not outs or not xs:
            return
        if outs[0].numel() == 1:          # backward() with the implicit gradient, into each leaf's .grad
            self.backward_grads(outs[0], xs, prefix)
        rng = np.random.default_rng(seed)
        cots = [tg.tensor(rng.standard_normal(o.shape), dtype=o.dtype) for o in outs]
        gs = tg.grad(outs, xs, grad_outputs=cots, allow_unused=True)
        for k, (x, g) in enumerate(zip(xs, gs)):
            self(f"{prefix}{k}", g if g is not None else tg.zeros_like(x))

    def backward_steps(self, fn, xs, n=3):
        """n calls of fn, each followed by `backward()` of its first result when that is one element
        that requires grad (a training loop around a compiled loss: the later calls may compute the
        gradient with the forward, jit/joined.py): each step's .grad of the leaves among xs, reset
        to None before each call and after the last."""
        leaves = [x for x in xs if isinstance(x, tg.Tensor) and x.requires_grad and x.grad_fn is None]
        for step in range(n):
            out = fn(*xs)
            first = out[0] if isinstance(out, (tuple, list)) else out
            if not (isinstance(first, tg.Tensor) and first.requires_grad and first.dtype.is_floating_point
                    and first.numel() == 1):
                return
            first.backward()
            for k, x in enumerate(leaves):
                self(f"step{step}_grad{k}", x.grad if x.grad is not None else tg.zeros_like(x))
                x.grad = None

    def backward_grads(self, out, xs, prefix):
        """What `out.backward(retain_graph=True)` accumulates into the .grad of each leaf among xs
        (their .grad restored after: the program may read it later)."""
        leaves = [x for x in xs if x.grad_fn is None]
        before = [x.grad for x in leaves]
        out.backward(retain_graph=True)
        for k, (x, b) in enumerate(zip(leaves, before)):
            self(f"{prefix}_acc{k}", x.grad if x.grad is not None else tg.zeros_like(x))
            x.grad = b


def main(run, sizes=False):
    """Run a repro file: every backend (cuda too where tg.cuda.is_available(); with `sizes`, each
    compiled with dynamic=True and with the default) against eager; print the differences; exit status
    1 if any."""
    import sys

    from .compare import compare_runs
    from .runner import observe
    from .sizes import compare_sized, modes
    dtype = getattr(sys.modules["__main__"], "DTYPE", "float32")
    backends = ("interpret", "llvm") + (("cuda",) if tg.cuda.is_available() else ())
    backends = tuple(modes(backends)) if sizes else backends
    obs = {m: observe(run, m, dtype) for m in ("eager",) + backends}
    ref = observe(run, "eager", "float64") if dtype == "float32" else obs["eager"]
    compare, problems = compare_sized if sizes else compare_runs, []
    for b in backends:
        problems += [f"{b}: {c}: {t}" for c, t in compare(obs["eager"], obs[b], ref, dtype)]
        problems += [f"{b}: traces:symbolic-failure: {name}: {why}" for name, whys in getattr(obs[b], "symbolic_failures", [])
                     for why in dict.fromkeys(whys)]
    names = ("eager",) + backends
    print("\n".join(problems) or f"no difference between {', '.join(names[:-1])} and {names[-1]}")
    sys.exit(1 if problems else 0)
