"""The primitive table: what a primitive is, the registry of all of them, and `bind`.

Every fact about a primitive is declared once, in its `prim(...)` call (in `tracegrad/ops/`);
fusion, remat, the runtime's work estimate, the code generators and the math library derive
what they need from these fields and keep no list of op names of their own.

- `kind` (KINDS): "elementwise" (one element out per element in, broadcasting),
  "reduction", "view" (the result shares the input's memory: reshape, permute, expand, slice),
  "copy" (rearranges into new memory: cat, unslice), "index" (integer-tensor indexing),
  "extern" (a library call: matmul), "creation", "random" (never merged or folded), "collective"
  (communication with the other processes of a distributed run: never merged, folded or removed).
  `Prim.effect`: random and collective primitives, whose every call counts, not only its value.
  "index" also holds unwindows, the scatter-add of sliding windows (ops/windows.py).
- `rule(shapes, dtypes, **attrs) -> (shape, dtype)`: the type rule (eager dispatch, shape inference).
- `impl(*arrays, **attrs)`: the NumPy implementation (eager tensors, the `interpret` backend,
  host kernels of compiled code).
- `vjp`: reverse mode, one rule per input `(n, g) -> gradient` (None: not differentiable in that
  input), or for variadic primitives one rule returning a tuple; None: not differentiable. Written
  with tensor methods so it runs on eager tensors, builds differentiable graphs (create_graph) and
  emits the backward IR under the tracer. `n` is the autograd node: `n.x(i)` saved input, `n.out`,
  `n.shapes`, `n.dtypes`, `n.attrs`.
- `jvp(n, ts)`: forward mode from the input tangents `ts` (None = zero tangent); None: none.
- `save`: which inputs the VJP reads (their version counters are checked), `save_out` likewise; or
  a dict {input i: inputs read by i's VJP rule}, so only what a needed rule reads is saved; or, for
  variadic primitives, a function of the number of inputs returning one of those.
- `lower`: the scalar lowering, one target-neutral expression over the vocabulary of
  tracegrad/scalar.py (typed data: `a + b`, `exp(a)`, `where(a, b, c)`; None: not lowered, the op
  runs its NumPy implementation as a host kernel). For an elementwise primitive, one element of the
  result from the inputs `a`, `b`, `c`; for a reduction, how an element `b` joins the accumulator `a`.
- `remap(in_shape, out_shape, strides, offset, **attrs) -> (strides, offset) | None`: for a view
  (and only for a view), where its elements sit: the strides and offset (in elements) of the view of
  a buffer read with `strides` and `offset`; None when no strides express it (a reshape of a
  transposed value). Fusion rewrites loads with it, so views never copy.
- `dtypes`: the dtype names the lowering handles, for every operand and the result (others run
  on the host).
- `cost` (COSTS): per element, "cheap" (a few instructions: arithmetic, compares, div, sqrt) or
  "transcendental" (a math-library polynomial): the lowering's (scalar.cost); None when not lowered. Remat recomputes cheap
  chains freely; the runtime counts a transcendental as 8 element-ops when it decides to split a
  kernel across threads.

- `zero` (ZEROS): when the result is exactly zero because some inputs are (the backward of some
  cotangents only drops what only absent ones reach, ir/passes/cotangents.py): "any" input zero (a
  product), "all" inputs zero (a sum, a concatenation), its "first" input zero (a quotient's
  numerator, a sum or copy of it), both "branches" of a select; None: not declared. A view of a zero
  is zero by its kind.
- `rearranges` (bool): a view holding each element of its input exactly once (reshape, permute): its
  values, and how many, are its input's (trace_indices.py reads known index values through it).
- `surface` (Surface): how users reach it, when the table makes its public names: the Tensor method
  and its in-place form (tensor/declared.py), the function `tg.<name>` (function_forms.py) and its
  row of the API reference (tests/test_docs.py reads it); None: its methods are written by hand.
Nothing here imports from above: VJP rules call `bind(name, ...)` for primitives that have no
tensor method, and tensor/dispatch.py installs the dispatcher behind `bind`.
"""
import numpy as np

from . import scalar

KINDS = ("elementwise", "reduction", "view", "copy", "index", "extern", "creation", "random", "collective")
EFFECTS = ("random", "collective")
COSTS = scalar.COSTS
ZEROS = ("any", "all", "first", "branches")
FLOAT = ("float32", "float64")                                 # lowered dtypes of float-only ops
ALL = ("float32", "float64", "int32", "int64", "bool")          # every dtype a lowering can handle
NUMERIC = ("float32", "float64", "int32", "int64")

PRIMS = {}
RNG = [np.random.default_rng()]   # the generator behind tg.manual_seed, rand/randn and dropout
_dispatch = None  # installed by tensor/dispatch.py: _dispatch(prim, inputs, attrs) -> Tensor


def bind(name, *inputs, **attrs):
    """Apply primitive `name` to tensors (eager, traced or forward-mode alike)."""
    return _dispatch(PRIMS[name], inputs, attrs)


class Surface:
    """A primitive's public names: the Tensor method `name` (x.name(other)) with its in-place form
    name_, and the function tg.name(input, other, *, out=None), taking `params` (their names; a
    Python number may stand for any operand but the Tensor's); each alias the same. `floats`: integer
    and bool operands become the default float dtype first, as torch.exp does. `torch` (PyTorch's
    name) and `note` (what differs, how it runs compiled) make its row of the API reference."""
    __slots__ = ("name", "params", "floats", "torch", "note", "aliases")

    def __init__(self, name, torch, note, *, params=("input",), floats=True, aliases=()):
        self.name, self.params, self.floats, self.torch, self.note = name, tuple(params), floats, torch, note
        self.aliases = tuple(aliases)

    def row(self):
        """Its row of docs/api.md: the names, PyTorch's, the differences."""
        names = [f"`tg.{self.name}({', '.join(self.params)})`"] + [f"`tg.{n}`" for n in self.aliases]
        names += [f"`Tensor.{n}{i}`" for n in (self.name,) + self.aliases for i in ("", "_")]
        return f"| {' '.join(names)} | `{self.torch}` | {self.note} |"

    def names(self):
        """The public names it makes, as docs/api.md writes them."""
        return {f"{p}.{n}{i}" for n in (self.name,) + self.aliases for p, i in (("tg", ""), ("Tensor", ""),
                                                                                ("Tensor", "_"))}


class Prim:
    """One primitive: the fields are described in this module's docstring."""
    __slots__ = ("name", "kind", "rule", "impl", "vjp", "jvp", "save", "save_out", "differentiable",
                 "lower", "dtypes", "cost", "remap", "zero", "backward_name", "effect", "surface", "rearranges")

    def __init__(self, name, kind, rule, impl, *, vjp, jvp, save, save_out, lower, dtypes, cost, remap=None,
                 zero=None, surface=None, rearranges=False):
        if kind not in KINDS:
            raise ValueError(f"primitive {name}: kind {kind!r} is not one of {KINDS}")
        if (lower is None) != (cost is None) or (lower is None) != (not dtypes):
            raise ValueError(f"primitive {name}: a lowering, its dtypes and its cost come together "
                             f"(got lower={lower!r}, dtypes={dtypes!r}, cost={cost!r})")
        if lower is not None and not isinstance(lower, scalar.Expr):
            raise TypeError(f"primitive {name}: its lowering is a scalar expression (tracegrad/scalar.py: "
                            f"a + b, exp(a), ...), not {lower!r}")
        if cost is not None and cost != scalar.cost(lower):
            raise ValueError(f"primitive {name}: cost {cost!r}, but its lowering {lower} is {scalar.cost(lower)}")
        if (kind == "view") != (remap is not None):
            raise ValueError(f"primitive {name}: a view, and only a view, declares its remap (got kind "
                             f"{kind!r}, remap={remap!r})")
        self.name, self.kind, self.rule, self.impl = name, kind, rule, impl
        self.vjp, self.jvp, self.save, self.save_out = vjp, jvp, save, save_out
        if zero is not None and zero not in ZEROS:
            raise ValueError(f"primitive {name}: zero {zero!r} is not one of {ZEROS}")
        self.lower, self.dtypes, self.cost, self.remap, self.zero = lower, tuple(dtypes), cost, remap, zero
        if rearranges and kind != "view":
            raise ValueError(f"primitive {name}: only a view rearranges its input (got kind {kind!r})")
        self.surface, self.rearranges = surface, rearranges
        self.differentiable = vjp is not None
        self.effect = kind in EFFECTS
        self.backward_name = "".join(p.capitalize() for p in name.split("_")) + "Backward"

    def __repr__(self):
        return f"<prim {self.name}>"


def prim(name, kind, rule, impl, *, vjp, jvp, save, save_out=False, lower, dtypes, cost, remap=None, zero=None,
         surface=None, rearranges=False):
    """Declare primitive `name` with every field (see the module docstring) and register it."""
    if name in PRIMS:
        raise ValueError(f"primitive {name} is declared twice")
    PRIMS[name] = p = Prim(name, kind, rule, impl, vjp=vjp, jvp=jvp, save=save, save_out=save_out,
                           lower=lower, dtypes=dtypes, cost=cost, remap=remap, zero=zero, surface=surface,
                                rearranges=rearranges)
    return p
