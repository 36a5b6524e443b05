"""Random straight-line tensor code: a pool of named values (inputs first) that each new statement
extends with an elementwise op, a broadcast binary op, a reduction, a view, an indexing, a matmul
or a functional layer, written as the Python a user writes (`v3 = (v1 * x2).tanh()`).

Shapes use odd and empty sizes (0, 1, 2, 3, 17) and 0-d values; the generator tracks every shape
so that each program is valid eager code (what eager refuses, e.g. a max over an empty axis, is
not generated)."""
import numpy as np

SIZES = (1, 2, 3, 3, 17, 0)
F = "tg.nn.functional"

# elementwise ops on one float value: every unary primitive, the composites built on them, casts
UNARY = [
    "-{x}", "{x}.exp()", "{x}.log()", "({x}.abs() + 0.5).log()", "{x}.sqrt()", "({x}.abs() + 0.1).sqrt()",
    "{x}.tanh()", "{x}.sigmoid()", "{x}.relu()", "{x}.sin()", "{x}.cos()", "{x}.abs()", "{x}.sign()",
    "{x}.floor()", F + ".erf({x})", F + ".gelu({x})", F + ".gelu({x}, approximate='tanh')",
    "({x}.abs() + 0.5).rsqrt()", "({x} * {x} + 1.0).reciprocal()", "{x}.square()", "{x}.abs().log1p()",
    "{x}.expm1()", "{x}.clamp(-0.5, 0.5)", "{x}.clamp(min=0.1)", "{x}.clamp(max=0.2)", "{x} ** 2", "{x} ** 3",
    "({x}.abs() + 0.1) ** 0.5", "2.0 ** {x}", "{x} // 0.7", "{x} % 0.7", "{x} * 0.7 - 0.2", "1.5 - {x}",
    "2.0 / ({x} * {x} + 1.0)", "{x}.clone()", "{x}.contiguous()", "tg.zeros_like({x}) + {x}",
    "{x}.to(tg.float64).to({x}.dtype)", "({x} > 0).to({x}.dtype) * {x}", "tg.where({x} > 0, {x}, 0.1 * {x})",
    F + ".sigmoid({x}) * {x}", "{x}.relu() - (-{x}).relu()",
]
RANDOM = ["{x} * tg.rand({x}.shape, dtype={x}.dtype)", "{x} + 0.1 * tg.randn({x}.shape, dtype={x}.dtype)",
          "tg.nn.functional.dropout({x}, 0.25)"]
# two float values that broadcast against each other
BINARY = [
    "{a} + {b}", "{a} - {b}", "{a} * {b}", "{a} / ({b} * {b} + 1.0)", "{a} / {b}", "tg.maximum({a}, {b})",
    "tg.minimum({a}, {b})", "tg.where({a} > {b}, {a}, {b} * 0.5)", "({a}.abs() + 0.5) ** {b}",
    "{a} // ({b}.abs() + 0.5)", "{a} % ({b}.abs() + 0.5)", "tg.where(({a} > 0) & ({b} < 0), {a}, {b})",
    "tg.where(({a} > 0) | ~({b} < 0), {a}, -{b})", "{a} - {b} * 0.5",
]
COMPARE = ["{a} < {b}", "{a} <= {b}", "{a} > {b}", "{a} >= {b}", "{a} == {b}", "{a} != {b}"]
BOOL_USE = ["tg.where({m}, {a}, {b})", "{m}.to({a}.dtype) * {a} + {b}"]


class Val:
    __slots__ = ("name", "shape", "kind")

    def __init__(self, name, shape, kind="f"):
        self.name, self.shape, self.kind = name, tuple(shape), kind


def bshape(a, b):
    try:
        return tuple(np.broadcast_shapes(a, b))
    except ValueError:
        return None


class Builder:
    """Accumulates inputs (name, shape, data options) and statements over a pool of values."""

    def __init__(self, rng, max_elems=1200):
        self.rng, self.max_elems = rng, max_elems
        self.inputs, self.lines, self.pool, self.keep = [], [], [], []
        self.zero_sizes = rng.random() < 0.15
        self.big = rng.random() < 0.08          # one axis of 257 or 1023: vector loops, threads, long sums
        if self.big:
            self.max_elems = 40000

    # ---------------------------------------------------------------- helpers
    def pick(self, seq):
        return seq[int(self.rng.integers(len(seq)))]

    def chance(self, p):
        return self.rng.random() < p

    def shape(self, ndim=None):
        ndim = int(self.rng.choice([0, 1, 2, 2, 3, 3])) if ndim is None else ndim
        out = []
        for _ in range(ndim):
            n = int(self.pick(SIZES if self.zero_sizes else SIZES[:-1]))
            if n == 17 and any(m == 17 for m in out):
                n = 3
            if self.big and not any(m > 17 for m in out) and self.chance(0.4):
                n = int(self.pick([257, 1023]))
            out.append(n)
        return tuple(out)

    def add_input(self, shape, grad=True, **opts):
        if len(shape) >= 2 and min(shape) > 1 and self.chance(0.2):
            opts["layout"] = "F"               # a column-major input: its layout matters to views
        name = f"x{len(self.inputs)}"
        self.inputs.append((name, tuple(shape), dict(grad=grad, **opts)))
        v = Val(name, shape)
        self.pool.append(v)
        return v

    def emit(self, expr, shape, kind="f"):
        if int(np.prod(shape, dtype=np.int64)) > self.max_elems:
            return None
        name = f"v{len(self.lines)}"
        self.lines.append(f"{name} = {expr}")
        v = Val(name, shape, kind)
        self.pool.append(v)
        return v

    def floats(self):
        return [v for v in self.pool if v.kind == "f"]

    def partner(self, a):
        """A float value broadcasting with `a`: from the pool, or a new input (a suffix of a's shape
        with some sizes set to 1)."""
        cands = [v for v in self.floats() if bshape(v.shape, a.shape) is not None and v is not a]
        if cands and self.chance(0.6):
            return self.pick(cands)
        k = int(self.rng.integers(0, len(a.shape) + 1))
        shape = tuple(1 if self.chance(0.4) else s for s in a.shape[len(a.shape) - k:])
        return self.add_input(shape, special=False)

    def axes(self, s, one=False):
        nd = len(s)
        if one:
            return int(self.rng.integers(-nd, nd))
        k = int(self.rng.integers(1, nd + 1))
        return tuple(int(a) for a in self.rng.permutation(nd)[:k])

    # ---------------------------------------------------------------- statements
    def step(self):
        kind = self.pick(["unary", "unary", "binary", "binary", "compare", "reduce", "reduce", "view", "view",
                          "index", "matmul", "layer", "random"])
        getattr(self, "_" + kind)(self.pick(self.floats()))

    def _unary(self, x):
        self.emit(self.pick(UNARY).format(x=x.name), x.shape)

    def _random(self, x):
        if self.chance(0.3):     # returned or not: an unused draw still advances the generator, as eagerly
            v = self.emit(self.pick(RANDOM).format(x=x.name), x.shape)
            self.keep += [v.name] if v is not None and self.chance(0.5) else []
        else:
            self._unary(x)

    def _binary(self, a):
        b = self.partner(a)
        s = bshape(a.shape, b.shape)
        if self.chance(0.5):
            a, b = b, a
        self.emit(self.pick(BINARY).format(a=a.name, b=b.name), s)

    def _compare(self, a):
        b = self.partner(a)
        m = self.emit(self.pick(COMPARE).format(a=a.name, b=b.name), bshape(a.shape, b.shape), "b")
        if m is None:
            return
        if self.chance(0.3):
            m2 = self.emit(self.pick(["~{m}", "{m} & ({a} > 0)", "{m} | ({a} < -0.5)"]).format(m=m.name, a=a.name),
                           m.shape, "b")
            m = m2 or m
        if self.chance(0.2):
            self.emit(f"{m.name}.sum()", (), "i")
        c = self.partner(a)
        s = bshape(m.shape, bshape(a.shape, c.shape) or ())
        if s is not None and bshape(a.shape, c.shape) is not None:
            self.emit(self.pick(BOOL_USE).format(m=m.name, a=a.name, b=c.name), s)

    def _reduce(self, x):
        s, n = x.shape, x.name
        if not s:
            self.emit(f"{n}.sum()", ())
            return
        op = self.pick(["sum", "sum", "mean", "max", "min", "amax", "amin", "prod", "argmax", "argmin", "var",
                        "std", "logsumexp", "sum_all", "mean_all"])
        keep = self.chance(0.4)
        kw = ", keepdims=True" if keep else ""
        if op in ("sum_all", "mean_all"):
            self.emit(f"{n}.{op[:-4]}()", ())
            return
        if op in ("sum", "mean", "amax", "amin"):
            axes = self.axes(s)
        else:
            axes = (self.axes(s, one=True),)
        norm = {a % len(s) for a in axes}
        empty = any(s[a] == 0 for a in norm)
        if op in ("max", "min"):
            if 0 in s:
                return self._reduce_sum(x)
            self.emit(f"{n}.{op}()", ())
            return
        if empty and op in ("amax", "amin", "argmax", "argmin", "logsumexp"):
            return self._reduce_sum(x)
        out = tuple((1 if d in norm else k) for d, k in enumerate(s) if keep or d not in norm)
        ax = axes if len(axes) > 1 else axes[0]
        if op in ("var", "std"):
            corr = self.pick(["", ", correction=0", ", unbiased=False", ", correction=2"])
            self.emit(f"{n}.{op}({ax}{corr}{kw})", out)
        elif op in ("argmax", "argmin"):
            i = self.emit(f"{n}.{op}({ax}{kw})", out, "i")
            if i is not None and self.chance(0.5):
                self.emit(f"{i.name}.to({n}.dtype) * 0.5", out)
        else:
            self.emit(f"{n}.{op}({ax}{kw})", out)

    def _reduce_sum(self, x):
        self.emit(f"{x.name}.sum()", ())

    def _view(self, x):
        s, n = x.shape, x.name
        nd, numel = len(s), int(np.prod(s, dtype=np.int64))
        opts = ["reshape", "reshape", "unsqueeze", "expand", "flatten", "index0"]
        if nd >= 2:
            opts += ["permute", "transpose", "mT", "slice", "slice", "select", "cat", "stack"]
        elif nd == 1:
            opts += ["slice", "slice", "select", "cat", "stack", "none"]
        if 1 in s:
            opts.append("squeeze")
        if nd == 2:
            opts.append("T")
        op = self.pick(opts)
        if op == "reshape":
            cands = [(numel,), (1, numel), (numel, 1), (-1,)]
            if nd and s[-1]:
                cands.append((-1,) + s[-1:])
            t = self.pick(cands)
            view = "contiguous().view" if self.chance(0.3) else "reshape"
            self.emit(f"{n}.{view}{t if len(t) > 1 else '(' + str(t[0]) + ')'}",
                      np.empty(s).reshape(t).shape)
        elif op == "unsqueeze":
            d = int(self.rng.integers(0, nd + 1))
            self.emit(f"{n}.unsqueeze({d})", s[:d] + (1,) + s[d:])
        elif op == "expand":
            k = int(self.pick([1, 2, 3]))
            full = (k,) + tuple(int(self.pick([1, 2, 3])) if d == 1 else d for d in s)
            fn = self.pick(["expand", "broadcast_to"])
            arg = f"{full}" if fn == "broadcast_to" else ", ".join(map(str, full))
            self.emit(f"{n}.{fn}({arg})", full)
        elif op == "flatten":
            self.emit(f"{n}.flatten()", (numel,))
        elif op == "index0":
            self.emit(f"{n}[..., None]", s + (1,))
        elif op == "permute":
            perm = tuple(int(p) for p in self.rng.permutation(nd))
            self.emit(f"{n}.permute{perm}", tuple(s[p] for p in perm))
        elif op in ("transpose", "mT", "T"):
            d0, d1 = (nd - 2, nd - 1) if op != "transpose" else tuple(int(p) for p in self.rng.permutation(nd)[:2])
            expr = f"{n}.transpose({d0}, {d1})" if op == "transpose" else f"{n}.{op}"
            t = list(s)
            t[d0], t[d1] = t[d1], t[d0]
            self.emit(expr, tuple(t))
        elif op == "slice":
            d = int(self.rng.integers(0, nd))
            start = int(self.rng.integers(0, s[d] + 1))
            stop = self.pick([None, s[d], max(start, s[d] - 1)])
            step = int(self.pick([1, 1, 2, 3]))
            idx = "".join([":, "] * d) + f"{start}:{'' if stop is None else stop}:{step}"
            self.emit(f"{n}[{idx}]", s[:d] + (len(range(start, s[d] if stop is None else stop, step)),) + s[d + 1:])
        elif op == "select":
            d = int(self.rng.integers(0, nd))
            if s[d] == 0:
                return self._unary(x)
            i = int(self.rng.integers(-s[d], s[d]))
            self.emit(f"{n}[{''.join([':, '] * d)}{i}]", s[:d] + s[d + 1:])
        elif op in ("cat", "stack"):
            d = int(self.rng.integers(0, nd + (op == "stack")))
            other = self.pick([v for v in self.floats() if v.shape == s])
            shape = list(s)
            if op == "cat":
                shape[d] *= 2
            else:
                shape.insert(d, 2)
            self.emit(f"tg.{op}([{n}, {other.name} * 0.5], {d})", tuple(shape))
        elif op == "squeeze":
            d = s.index(1)
            self.emit(f"{n}.squeeze({d})", s[:d] + s[d + 1:])
        else:
            self._unary(x)

    def _index(self, x):
        """Integer-tensor indexing (gather; its gradient scatter-adds, repeats included), and picks of k
        entries per row (cross-entropy's label pick, take_along; fused as expressions)."""
        s, n = x.shape, x.name
        if not s or s[0] == 0:
            return self._unary(x)
        idx = [int(i) for i in self.rng.integers(-s[0], s[0], int(self.rng.integers(1, 5)))]
        if len(s) >= 2 and s[1] and self.chance(0.4):         # per-row picks: x[arange(n)[:, None], labels]
            k = int(self.pick([1, 1, 2, 3]))
            picks = self.rng.integers(-s[1], s[1], (s[0], k)).tolist()
            if k == 1 and self.chance(0.5):
                self.emit(f"{n}[tg.arange({s[0]}), tg.tensor({[p[0] for p in picks]})]", (s[0],) + s[2:])
            else:
                self.emit(f"{n}[tg.arange({s[0]}).reshape({s[0]}, 1), tg.tensor({picks})]", (s[0], k) + s[2:])
        elif len(s) >= 2 and s[1] and self.chance(0.4):
            idx2 = [int(i) for i in self.rng.integers(0, s[1], len(idx))]
            self.emit(f"{n}[tg.tensor({idx}), tg.tensor({idx2})]", (len(idx),) + s[2:])
        else:
            self.emit(f"{n}[tg.tensor({idx})]", (len(idx),) + s[1:])

    def _matmul(self, x):
        s = x.shape
        if not s:
            return self._unary(x)
        m = int(self.pick([1, 2, 3, 17]))
        form = self.pick(["right", "right", "left", "vec"])
        if form == "vec" or len(s) == 1 and self.chance(0.5):
            w = self.add_input((s[-1],))
            self.emit(f"{x.name} @ {w.name}", s[:-1])
        elif form == "right":
            w = self.add_input((s[-1], m))
            self.emit(f"{x.name} @ {w.name}", s[:-1] + (m,))
        else:
            if len(s) == 1:
                w = self.add_input((m, s[0]))
                self.emit(f"{w.name} @ {x.name}", (m,))
            else:
                w = self.add_input((m, s[-2]))
                self.emit(f"{w.name} @ {x.name}", s[:-2] + (m, s[-1]))

    def _layer(self, x):
        s, n = x.shape, x.name
        if not s:
            return self._unary(x)
        op = self.pick(["softmax", "log_softmax", "layer_norm", "linear", "mse", "cross_entropy"])
        if op in ("softmax", "log_softmax"):
            self.emit(f"{F}.{op}({n}, {self.axes(s, one=True)})", s)
        elif op == "layer_norm":
            affine = self.chance(0.5)
            w = self.add_input(s[-1:]) if affine else None
            extra = f", {w.name}, {self.add_input(s[-1:]).name}" if affine else ""
            self.emit(f"{F}.layer_norm({n}, ({s[-1]},){extra})", s)
        elif op == "linear":
            m = int(self.pick([1, 3, 17]))
            w, b = self.add_input((m, s[-1])), self.add_input((m,))
            self.emit(f"{F}.linear({n}, {w.name}, {b.name})", s[:-1] + (m,))
        elif op == "mse":
            y = self.add_input(s, grad=False)
            red = self.pick(["mean", "sum", "none"])
            self.emit(f"{F}.mse_loss({n}, {y.name}, reduction={red!r})", s if red == "none" else ())
        else:
            if len(s) != 2 or s[1] == 0:
                return self._unary(x)
            name = f"x{len(self.inputs)}"
            self.inputs.append((name, (s[0],), dict(labels=s[1])))
            red = self.pick(["mean", "sum", "none"])
            self.emit(f"{F}.cross_entropy({n}, {name}, reduction={red!r})", (s[0],) if red == "none" else ())


def graph_builder(rng, n_inputs=None, same_shape=False):
    """A Builder with one or two inputs (of one shape when same_shape), a quarter of the time special values."""
    b = Builder(rng)
    special = rng.random() < 0.25
    first = b.shape(int(rng.choice([1, 2, 2, 3])) if same_shape else None)
    for k in range(n_inputs or int(rng.integers(1, 3))):
        b.add_input(first if (k == 0 or same_shape) else b.partner(b.pool[0]).shape, special=special and k == 0)
    return b


def returns(b, rng):
    """The names a graph program returns: its last value, those it must keep, and a few more."""
    computed = [v for v in b.pool if v.name.startswith("v")]
    if not computed:           # nothing computed (every step too large): a sum always fits
        computed = [b.emit(f"{b.pool[0].name}.tanh()", b.pool[0].shape) or b.emit(f"{b.pool[0].name}.sum()", ())]
    k = int(rng.integers(1, 3))
    picks = {computed[-1].name, *b.keep} | {computed[int(i)].name for i in rng.integers(0, len(computed), k - 1)}
    return sorted(picks, key=lambda n: int(n[1:]))
