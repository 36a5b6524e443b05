"""The kernel IR: what fusion (ir/passes/fusion.py) produces and every code generator lowers.

A program is a list of `Kernel`s run in order. A loop kernel is a loop nest over an iteration
space (`shape`) whose outer `split` axes run over rows; its `Phase`s each write expression trees
over the space ("map") or reduce one over the inner axes ("reduce"). An expression tree is a DAG
of `Op`s (a primitive's target-neutral scalar lowering, a tracegrad/scalar.py expression, applied to its arguments) whose leaves are
`Const`s, `Load`s: reads of a buffer (a graph Value) at an affine index (strides, offset), and
`Iota`s: the affine index itself (an arange seen through views). A `Gather` reads a buffer at an
affine index plus integer values times strides (x[arange(n), y]: the row's label picked), each value
a `Checked` index: wrapped (-1 is the last) and checked against the axis's size.
Extern and host kernels call a library or a primitive's NumPy implementation on strided views of
their input buffers. Nothing here depends on a target or on the primitive table.
"""
import math

from ..scalar import head
from ..strides import contiguous_strides  # noqa: F401  (the kernel IR's row-major strides; backends import it here)
from ..symint import hint, is_sym, same_size


class Tiles:
    """ceil(n / tile) for a symbolic size n: a tiled loop's trip count, known at the call (its int is
    the hint's; backends/cpu/sizes.py computes it from the call's sizes)."""
    __slots__ = ("n", "tile")

    def __init__(self, n, tile):
        self.n, self.tile = n, tile

    def __int__(self):
        return -(-hint(self.n) // self.tile)

    def __str__(self):
        return f"ceil({self.n}/{self.tile})"


def known(d, value):
    """Whether size d is a plain int equal to `value` (a symbolic size is never known, and records no guard)."""
    return not is_sym(d) and d == value


def shape_key(shape):
    """A shape as a dict key: a symbolic size by its expression (hashing a SymInt specializes it)."""
    return tuple(str(d) if is_sym(d) else d for d in shape)


def same_shape(a, b):
    """Whether two shapes (or stride tuples) are the same for every value of their symbols: equal
    expressions; choices of speed take unequal ones as different (no guard recorded)."""
    return len(a) == len(b) and all(map(same_size, a, b))



class Load:
    """Read buffer `buf` (a graph Value) at offset + sum(i_d * strides[d]) of the tree's index."""
    __slots__ = ("buf", "strides", "offset", "dtype")

    def __init__(self, buf, strides, offset=0):
        self.buf, self.strides, self.offset, self.dtype = buf, tuple(strides), offset, buf.dtype


class Iota:
    """The int64 value offset + sum(i_d * strides[d]) of the tree's index (an arange read through
    views, without memory)."""
    __slots__ = ("strides", "offset", "dtype")

    def __init__(self, strides, offset, dtype):
        self.strides, self.offset, self.dtype = tuple(strides), offset, dtype


class Const:
    __slots__ = ("value", "dtype")

    def __init__(self, value, dtype):
        self.value, self.dtype = value, dtype


class Op:
    """Primitive `op` applied to `args`; `lower` is its scalar lowering (one expression over a, b, c)
    and `cost` its cost class per element ("cheap" or "transcendental"). Its args never change, so
    postorder() keeps its result in `order`."""
    __slots__ = ("op", "args", "dtype", "lower", "cost", "order")

    def __init__(self, op, args, dtype, lower, cost):
        self.op, self.args, self.dtype, self.lower, self.cost = op, tuple(args), dtype, lower, cost
        self.order = None

    def with_args(self, args):
        """This op applied to other arguments."""
        return Op(self.op, args, self.dtype, self.lower, self.cost)


def applies(t, fn):
    """Whether node t is an Op whose lowering is vocabulary function fn (tracegrad/scalar.py) of its
    arguments in order (an exp, a difference): the structural match the scheduler and the code
    generators ask of expression trees."""
    return isinstance(t, Op) and head(t.lower) is fn


class Checked(Op):
    """An integer index into axis `dim` of size `size` of a gathered buffer: its value, plus `size`
    when negative (unless `wrap` is False: then negative is out of range); a value outside [-size, size) reads element 0 instead and makes the call raise
    IndexError as eager indexing does (the target records it, backends/cpu/scalar.py)."""
    __slots__ = ("size", "dim", "wrap")

    def __init__(self, index, size, dim, dtype, wrap=True):
        super().__init__("index_check", [index], dtype, None, "cheap")
        self.size, self.dim, self.wrap = size, dim, wrap

    def with_args(self, args):
        return Checked(args[0], self.size, self.dim, self.dtype, self.wrap)


class Gather(Op):
    """Read `src.buf` at src's affine index plus sum(args[j] * strides[j]): the args are Checked
    indices (trees over the same space). `src`'s strides are the affine part only."""
    __slots__ = ("src", "strides")

    def __init__(self, src, indices, strides):
        super().__init__("gather", indices, src.dtype, None, "cheap")
        self.src, self.strides = src, tuple(strides)

    def with_args(self, args, src=None):
        return Gather(src or self.src, args, self.strides)


def postorder(tree):
    """The distinct nodes of an expression DAG, every node after its arguments (no recursion), as a
    tuple (kept on an Op: fusion, scheduling and lowering each ask again)."""
    if not isinstance(tree, Op):
        return (tree,)
    if tree.order is not None:
        return tree.order
    out, seen, stack = [], set(), [(tree, False)]
    while stack:
        t, expanded = stack.pop()
        if expanded:
            out.append(t)
            continue
        if id(t) in seen:
            continue
        seen.add(id(t))
        stack.append((t, True))
        if isinstance(t, Op):
            stack.extend((a, False) for a in reversed(t.args) if id(a) not in seen)
    tree.order = tuple(out)
    return tree.order


def remap(tree, fn, memo=None):
    """`tree` read at another affine index: every Load's, Iota's and Gather source's (strides,
    offset) replaced by fn(strides, offset) (shared nodes stay shared; a `memo` passed for several
    trees keeps the nodes they share shared)."""
    memo = {} if memo is None else memo
    for t in postorder(tree):
        if id(t) in memo:
            continue
        if isinstance(t, Load):
            memo[id(t)] = Load(t.buf, *fn(t.strides, t.offset))
        elif isinstance(t, Iota):
            memo[id(t)] = Iota(*fn(t.strides, t.offset), t.dtype)
        elif isinstance(t, Gather):
            memo[id(t)] = t.with_args([memo[id(a)] for a in t.args], Load(t.src.buf, *fn(t.src.strides, t.src.offset)))
        elif isinstance(t, Op):
            memo[id(t)] = t.with_args([memo[id(a)] for a in t.args])
        else:
            memo[id(t)] = t
    return memo[id(tree)]


def size(tree):
    """Number of distinct ops in a tree (DAG)."""
    return sum(isinstance(t, Op) for t in postorder(tree))


def loads(tree):
    """The distinct Loads of a tree, in evaluation order (a Gather's source among them: its strides
    then say nothing of the element it reads, see `gathered`)."""
    return [t.src if isinstance(t, Gather) else t for t in postorder(tree) if isinstance(t, (Load, Gather))]


def gathered(tree):
    """The buffers (ids) that some Gather of the tree reads."""
    return {id(t.src.buf) for t in postorder(tree) if isinstance(t, Gather)}


def _op_nodes(tree):
    """The Ops of a tree in the order `stage="kernels"` lists them."""
    out, seen, stack = [], set(), [tree]
    while stack:
        t = stack.pop()
        if isinstance(t, Op) and id(t) not in seen:
            seen.add(id(t))
            out.append(t)
            stack.extend(t.args)
    return out[::-1]


def ops_of(tree):
    """The op names of a tree as `stage="kernels"` lists them."""
    return [t.op for t in _op_nodes(tree)]


class Phase:
    """kind "map": write each (value, tree) over the kernel's full space;
    kind "reduce": reduce `tree` over `axes` into value (in a loop kernel: its inner axes, a row
    reduction, or axes that include all its outer axes, an accumulation over the rows), with
    primitive `op` whose lowering `lower` joins an element b to the accumulator a (at cost class
    `cost`)."""
    __slots__ = ("kind", "outputs", "op", "axes", "lower", "cost")

    def __init__(self, kind, outputs, op=None, axes=None, lower=None, cost=None):
        self.kind, self.outputs, self.op, self.axes, self.lower, self.cost = kind, outputs, op, axes, lower, cost


class Schedule:
    """How a loop or reduce_acc kernel walks its space (the CPU planner chooses it, backends/cpu/plan/; every
    target follows it; a kernel without one runs in natural order).

    `levels`: the loop nest, outermost first, as (axis, tile) pairs: tile 0 is a loop over the
    axis's elements, tile T > 0 a loop over its tiles of T elements (an element loop of that axis
    further in then stays inside the current tile). Threads split the outermost level.
    `across`: for a kernel of row reductions whose unit-stride axis is a kept one (column sums):
    the levels up to and including the tile loop of axis `across` run once; inside, each phase runs
    the remaining levels (the reduced axes, then `across` innermost), a reduction keeping a vector
    of partial results for the tile while the rows stream by. `map_levels`: the levels a map phase
    runs inside the tile instead (its output is contiguous along the last reduced axis: a
    transpose tiled like any other, so that neither its reads nor its writes leave the cache).
    `online`: pairs (i, i + 1) of a row kernel's phases that one walk over the row computes: phase i
    the maximum m of a tree, phase i + 1 the sum of exp(a - g(m)) (g reads only m); the walk keeps
    the running maximum and rescales the running sum by exp(g(old) - g(new)) when it grows. A target
    may also run the two phases in turn: the values are the same up to rounding. In a reduce_acc
    kernel (with `across`: reductions over leading axes, walks.online_columns): pairs (i, j) of a
    maximum i and a sum j linear in exp(a - g(m)) (any number per maximum), computed in one walk
    while its other phases (reading neither) accumulate beside them; threads split its column tiles,
    or, with `rows`, its rows (each chunk's sums relative to its own maxima; the join rescales them).
    A target may also run the maxima first, then the rest (Kernel.online_apart).
    `walks`: a row kernel's phases grouped into walks over the row, in order (tuples of phase
    indices, each phase in one; empty: one walk per phase): the phases of a walk read no result of
    each other, so one loop over the row computes them all, each element's shared subexpressions
    once (a layer norm backward's row sums beside its weight and bias gradient sums). A target may
    also run the phases one by one in index order: the values are the same.
    `rows`: (with `across`, a kernel of reductions none of which reads another) the levels walk
    memory in order, the reduced axes outermost: each row of memory is read whole, threads split
    the outermost reduced axis, and each chunk keeps a vector of partial results over all of
    `across` that the runtime joins (Kernel.partials).
    `transposed`: (a map kernel tiled as a transpose, levels ending (b, T), (a, T'), (a, 0), (b, 0)
    with b its outputs' unit-stride axis) the Loads that walk a with unit stride: a target may read
    each whole tile of them with unit-stride vectors and transpose it in registers, so that the
    element loops read it along b (backends/cpu/transpose.py); reading them in place gives the same values.
    With `across` (a mixed kernel, layout.mixed): the Loads that walk the innermost reduced axis (the
    level before the last) with unit stride, read a tile at a time and transposed so that the element
    loops read them along `across`."""
    __slots__ = ("levels", "across", "map_levels", "online", "walks", "rows", "transposed")

    def __init__(self, levels, across=None, map_levels=None, online=(), walks=(), rows=False, transposed=()):
        self.levels, self.across, self.map_levels = tuple(levels), across, map_levels and tuple(map_levels)
        self.online, self.walks, self.rows = tuple(online), tuple(tuple(w) for w in walks), rows
        self.transposed = tuple(transposed)

    def reorders(self):
        """Whether the levels differ from the natural loop order over the space."""
        return self.levels != tuple((d, 0) for d in range(len(self.levels))) or self.across is not None

    def trips(self, shape, level):
        d, tile = level
        if tile and is_sym(shape[d]):
            return Tiles(shape[d], tile)
        return -(-shape[d] // tile) if tile else shape[d]

    def text(self):
        loops = ",".join(f"d{d}/{t}" if t else f"d{d}" for d, t in self.levels)
        text = f"loops={loops}" if self.reorders() else ""
        text += f" reduce=across d{self.across}" if self.across is not None else ""
        text += f" threads=d{self.levels[0][0]}" if self.rows else ""
        text += (" map=" + ",".join(f"d{d}/{t}" if t else f"d{d}" for d, t in self.map_levels)
                 if self.map_levels else "")
        text += "".join(f" online=p{i}+p{j}" for i, j in self.online)
        if self.walks:
            text += " walks=" + ",".join("+".join(f"p{i}" for i in w) for w in self.walks)
        text += f" transpose={len(self.transposed)}" if self.transposed else ""
        return text.strip()


class Kernel:
    """kind: "loop" (phases inside an outer loop over shape[:split]), "reduce_acc", "extern", "host".
    `node` is set for extern/host kernels (their inputs are Loads in `args`), and `impl`, the
    primitive's NumPy implementation (an extern one writes into `out=`); `schedule` (a Schedule or
    None: natural order) is set by the scheduling pass."""

    def __init__(self, kind, shape, split=0, phases=(), node=None, args=(), impl=None):
        self.kind, self.shape, self.split, self.phases = kind, tuple(shape), split, list(phases)
        self.node, self.args, self.impl, self.schedule = node, list(args), impl, None

    def accumulated(self):
        """The reduce phases whose results every chunk of the outer loop adds to, so that threads
        keep private partials: a reduce_acc kernel's, and a row kernel's reductions over all its
        outer axes (a sum over the rows streamed by: a layer norm backward's weight gradient)."""
        if self.kind == "reduce_acc":
            return [ph for ph in self.phases if ph.kind == "reduce"]
        if self.kind != "loop" or not self.split:
            return []
        return [ph for ph in self.phases if ph.kind == "reduce" and set(range(self.split)) <= set(ph.axes)]

    def reads_own_reductions(self):
        """Whether an accumulated reduction of this kernel (any of a reduce_acc kernel's, a row kernel's over
        its outer axes) reads another's result (a sum of exp(x - max)): each chunk of rows would read
        maxima still being accumulated. A reduce_acc kernel computes that only as an online column walk
        (walks.online_columns); a row kernel cannot."""
        acc = [ph for ph in self.phases if ph.kind == "reduce"] if self.kind == "reduce_acc" else self.accumulated()
        made = {id(v) for ph in acc for v, _ in ph.outputs}
        return any(id(ld.buf) in made for ph in acc for _, t in ph.outputs for ld in loads(t))

    def partials(self):
        """The reduce phases whose results each chunk of the outer loop computes apart, for the
        runtime to join: the accumulated ones, or all of a kernel whose threads split its reduced
        axes (Schedule.rows)."""
        if self.schedule is not None and self.schedule.rows:
            return [ph for ph in self.phases if ph.kind == "reduce"]
        if self.kind == "reduce_acc" and self.schedule is not None and self.schedule.online:
            return []                   # threads split its column tiles (walks.online_columns): none to join
        return self.accumulated()

    def online_apart(self):
        """(maxima, the rest): a reduce_acc kernel with online pairs as two kernels run in turn."""
        maxima = {i for i, _ in self.schedule.online}
        return [Kernel("reduce_acc", self.shape, 0, [ph for i, ph in enumerate(self.phases) if (i in maxima) == first])
                for first in (True, False)]

    def apart(self):
        """(row kernel, reduce_acc kernel): this row kernel without, and with only, its accumulated
        phases; the second runs after the first (a target without accumulating row kernels)."""
        acc = self.accumulated()
        rows = Kernel("loop", self.shape, self.split, [ph for ph in self.phases if ph not in acc])
        sums = Kernel("reduce_acc", self.shape, 0, acc)
        return rows, sums

    def sizes(self):
        """Every size the kernel's code reads: its space, its outputs' and buffers' shapes, its reads'
        strides and offsets, gathers' strides, index checks' sizes, size-valued constants."""
        out = list(self.shape) + [d for v in self.outputs for d in v.shape]
        for ld in self.reads:
            out += [*ld.strides, ld.offset, *ld.buf.shape]
        for ph in self.phases:
            for _, t in ph.outputs:
                out += _tree_sizes(t)
        return out

    def symbolic(self):
        """Whether some size the kernel reads is symbolic (tracegrad/symint.py: known at the call)."""
        return any(is_sym(d) for d in self.sizes())

    def parallel_extent(self):
        """The trip count of the outermost loop, which threads split (1: not splittable)."""
        if self.schedule is not None:
            return self.schedule.trips(self.shape, self.schedule.levels[0])
        split = self.split > 0 if self.kind == "loop" else bool(self.shape)
        return self.shape[0] if split else 1

    @property
    def outputs(self):
        if self.node is not None:
            return [self.node.out]
        return [v for ph in self.phases for v, _ in ph.outputs]

    @property
    def reads(self):
        if self.node is not None:
            return list(self.args)
        return [ld for ph in self.phases for _, t in ph.outputs for ld in loads(t)]

    def ops(self):
        """The op names of the kernel, as `stage="kernels"` lists them."""
        return [op for op, _ in self._op_costs()]

    def costs(self):
        """The cost class of each of ops() (None for an extern or host kernel's op)."""
        return [cost for _, cost in self._op_costs()]

    def _op_costs(self):
        if self.node is not None:
            return [(self.node.op, None)]
        out = []
        for ph in self.phases:
            for _, t in ph.outputs:
                out += [(o.op, o.cost) for o in _op_nodes(t)]
            if ph.kind == "reduce":
                out.append((ph.op, ph.cost))
        return out

    def bytes_moved(self):
        """Whole buffers read and written; a buffer only gathered from counts what the gathers touch (at
        most its size): an element each where they read runs of unit stride, else a cache line each."""
        read = {}
        for ld in self.reads:
            read[id(ld.buf)] = nbytes(ld.buf)
        if self.node is None:
            picked = {}
            for ph in self.phases:
                for _, t in ph.outputs:
                    for g in postorder(t):
                        if isinstance(g, Gather):     # runs of unit stride, else a cache line each
                            run = any(not is_sym(s) and s == 1 and hint(n) > 1
                                      for s, n in zip(g.src.strides, self.shape))
                            each = g.dtype.itemsize if run else 64
                            picked[id(g.src.buf)] = picked.get(id(g.src.buf), 0) + each * math.prod(map(hint, self.shape))
            plain = {id(ld.buf) for ph in self.phases for _, t in ph.outputs for ld in _plain_loads(t)}
            for b, n in picked.items():
                if b not in plain:
                    read[b] = min(read[b], n)
        return sum(read.values()) + sum(nbytes(v) for v in self.outputs)


def _plain_loads(tree):
    return [t for t in postorder(tree) if isinstance(t, Load)]


def nbytes(v):
    """Bytes of Value v (symbolic sizes at their hints: an estimate for choices of speed)."""
    return math.prod(map(hint, v.shape)) * v.dtype.itemsize


def pinned(kernel, fn):
    """`kernel` with every size it reads (its space, its reads' strides and offsets, gathers' strides, index
    checks' sizes, size-valued constants) mapped by fn (backends/cpu/sizes.py's `pin`: a symbolic size to its hint)."""
    memo = {}
    phases = [Phase(ph.kind, [(v, pinned_tree(t, fn, memo)) for v, t in ph.outputs], ph.op, ph.axes, ph.lower, ph.cost)
              for ph in kernel.phases]
    out = Kernel(kernel.kind, [fn(d) for d in kernel.shape], kernel.split, phases, kernel.node,
                 [Load(ld.buf, [fn(s) for s in ld.strides], fn(ld.offset)) for ld in kernel.args], kernel.impl)
    out.schedule = kernel.schedule
    return out


def hinted(kernel):
    """`kernel` with its symbolic sizes at their hints (no guard recorded): what the planners' heuristics
    (backends/cpu/plan/, backends/cuda/plan.py) look at, since their choices change speed, never results. A kernel without
    symbolic sizes comes back as it is."""
    return pinned(kernel, hint) if kernel.symbolic() else kernel


def hinted_tree(shape, tree):
    """(shape, tree) with their symbolic sizes at their hints (see `hinted`)."""
    if not any(is_sym(d) for d in shape) and not _tree_symbolic(tree):
        return shape, tree
    return tuple(map(hint, shape)), pinned_tree(tree, hint, {})


def _tree_symbolic(tree):
    return any(is_sym(d) for d in _tree_sizes(tree))


def _tree_sizes(tree):
    out = []
    for x in postorder(tree):
        if isinstance(x, (Load, Iota)):
            out += [*x.strides, x.offset]
        if isinstance(x, Gather):
            out += [*x.strides, *x.src.strides, x.src.offset]
        elif isinstance(x, Checked):
            out.append(x.size)
        elif isinstance(x, Const) and isinstance(x.value, int):
            out.append(x.value)
    return out


def pinned_tree(tree, fn, memo):
    def sizes(strides, offset):
        return [fn(s) for s in strides], fn(offset)
    for t in postorder(tree):           # leaves remap keeps as they are: new ones first
        if isinstance(t, Const) and is_sym(t.value) and id(t) not in memo:
            memo[id(t)] = Const(fn(t.value), t.dtype)
    tree = remap(tree, sizes, memo)
    for t in postorder(tree):           # the Checked and Gather nodes remap made anew (fn(fn(d)) == fn(d))
        if isinstance(t, Checked):
            t.size = fn(t.size)
        elif isinstance(t, Gather):
            t.strides = tuple(fn(s) for s in t.strides)
    return tree


def kernels_text(name, kernels):
    """The `stage="kernels"` view: each kernel's kind, space, ops, bytes moved and, when scheduled
    out of natural order, its loop nest (outermost first; dA/T loops over tiles of T along axis A;
    transpose=N: N operands read a tile at a time and transposed in registers, Schedule.transposed)."""
    lines = [f"kernels {name}: {len(kernels)}"]
    for j, k in enumerate(kernels):
        space = "x".join(map(str, k.shape)) or "scalar"
        outs = ", ".join(f"{v.type}" for v in k.outputs)
        lines.append(f"  k{j} [{k.kind}] space={space} split={k.split} ops={'+'.join(k.ops()) or 'copy'} "
                     f"-> {outs}  bytes={k.bytes_moved()}" + (f"  {k.schedule.text()}" if k.schedule else ""))
    return "\n".join(lines)
