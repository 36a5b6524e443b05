"""Fusion: group an optimized graph into kernels. Target-neutral: the LLVM and CUDA code
generators lower the same groups.

Rules
- Elementwise ops with a scalar lowering (ops.py `lower`) fuse into expression trees whose leaves
  are loads from *buffers* (graph inputs and kernel outputs) at affine indices.
- Movement ops (reshape, permute, expand, slice) and broadcasting never copy: they rewrite the
  strides and offset of the leaves below them. A reshape that no strides can express (e.g. of a
  transposed value) materializes its input first.
- A value is *materialized* (written to a buffer by a kernel) when it is a graph output, when a
  non-fusible op reads it (matmul, indexing, ...), or when it has several consumers and its
  expression is larger than RECOMPUTE_LIMIT ops; smaller shared values are recomputed.
- A reduction (sum, max, min) fuses its elementwise prologue. Reductions over trailing axes are
  *row* reductions; consecutive row reductions and maps over the same iteration space that read
  each other only within the same row merge into one kernel of phases (outer loop over rows, one
  inner loop per phase): a softmax or a layernorm forward is one kernel and one pass over memory.
  Reductions over leading or all axes accumulate in natural loop order (kind "reduce_acc");
  consecutive ones over the same space share one loop nest (the three gradient sums of a
  broadcast op are one kernel), and so does a map over that space next to them (a relu
  backward's masked gradient and its bias-gradient sum; a saved tanh and the sum of it).
- Matmul is an extern call (BLAS) into a preallocated buffer; other non-lowered ops (indexing,
  scatter-add, cat, prod, argmax, random, and any op on float16 or integer division) run their NumPy
  implementation as "host" kernels on strided views of their input buffers.
"""
import math

from ...ops import FLOAT_ONLY_LOWERING, PRIMS

RECOMPUTE_LIMIT = 8
REDUCE_OPS = ("sum", "max", "min")
VIEW_OPS = ("reshape", "permute", "expand", "slice")
LOWERED_DTYPES = ("float32", "float64", "int32", "int64", "bool")


def contiguous_strides(shape):
    strides, acc = [], 1
    for s in reversed(shape):
        strides.append(acc)
        acc *= max(s, 1)
    return tuple(reversed(strides))


# ------------------------------------------------------------------ expression trees

class Load:
    """Read buffer `buf` (a graph Value) at offset + sum(i_d * strides[d]) of the tree's index."""
    __slots__ = ("buf", "strides", "offset", "dtype")

    def __init__(self, buf, strides, offset=0):
        self.buf, self.strides, self.offset, self.dtype = buf, tuple(strides), offset, buf.dtype


class Const:
    __slots__ = ("value", "dtype")

    def __init__(self, value, dtype):
        self.value, self.dtype = value, dtype


class Op:
    """`op` applied to `args`; `lower` is the primitive's scalar expression."""
    __slots__ = ("op", "args", "dtype", "lower")

    def __init__(self, op, args, dtype):
        self.op, self.args, self.dtype, self.lower = op, tuple(args), dtype, PRIMS[op].lower


class NotAffine(Exception):
    pass


def _remap(tree, fn, memo=None):
    """Rebuild `tree` with every Load replaced by fn(load)."""
    memo = {} if memo is None else memo
    key = id(tree)
    if key in memo:
        return memo[key]
    if isinstance(tree, Load):
        out = fn(tree)
    elif isinstance(tree, Const):
        out = tree
    else:
        out = Op(tree.op, [_remap(a, fn, memo) for a in tree.args], tree.dtype)
    memo[key] = out
    return out


def broadcast(tree, shape, to):
    if tuple(shape) == tuple(to):
        return tree
    off = len(to) - len(shape)

    def fn(ld):
        s = [0] * off + [0 if shape[i] == 1 and to[off + i] != 1 else st for i, st in enumerate(ld.strides)]
        return Load(ld.buf, s, ld.offset)
    return _remap(tree, fn)


def permute(tree, perm):
    return _remap(tree, lambda ld: Load(ld.buf, [ld.strides[p] for p in perm], ld.offset))


def slice_(tree, index):
    def fn(ld):
        off = ld.offset + sum(start * s for (start, _, _), s in zip(index, ld.strides))
        return Load(ld.buf, [s * step for (_, _, step), s in zip(index, ld.strides)] + list(ld.strides[len(index):]),
                    off)
    return _remap(tree, fn)


def reshape(tree, shape, new):
    def fn(ld):
        s = reshape_strides(shape, ld.strides, new)
        if s is None:
            raise NotAffine
        return Load(ld.buf, s, ld.offset)
    return _remap(tree, fn)


def reshape_strides(shape, strides, new):
    """Strides that view (shape, strides) as `new` without copying (NumPy's rule), or None."""
    if 0 in shape or 0 in new:
        return [0] * len(new)
    old = [(n, s) for n, s in zip(shape, strides) if n != 1]
    nz = [i for i, n in enumerate(new) if n != 1]
    od, os_ = [n for n, _ in old], [s for _, s in old]
    nd = [new[i] for i in nz]
    res = [0] * len(nd)
    oi = ni = 0
    while ni < len(nd) and oi < len(od):
        np_, op_ = nd[ni], od[oi]
        nj, oj = ni + 1, oi + 1
        while np_ != op_:
            if np_ < op_:
                np_ *= nd[nj]
                nj += 1
            else:
                op_ *= od[oj]
                oj += 1
        for k in range(oi, oj - 1):
            if os_[k] != od[k + 1] * os_[k + 1]:
                return None
        res[nj - 1] = os_[oj - 1]
        for k in range(nj - 1, ni, -1):
            res[k - 1] = res[k] * nd[k]
        ni, oi = nj, oj
    out = [0] * len(new)
    for k, i in enumerate(nz):
        out[i] = res[k]
    return out


def size(tree, seen=None):
    """Number of distinct ops in a tree (DAG)."""
    seen = set() if seen is None else seen
    if not isinstance(tree, Op) or id(tree) in seen:
        return 0
    seen.add(id(tree))
    return 1 + sum(size(a, seen) for a in tree.args)


def loads(tree, out=None, seen=None):
    out = [] if out is None else out
    seen = set() if seen is None else seen
    if id(tree) in seen:
        return out
    seen.add(id(tree))
    if isinstance(tree, Load):
        out.append(tree)
    elif isinstance(tree, Op):
        for a in tree.args:
            loads(a, out, seen)
    return out


def ops_of(tree):
    out, seen, stack = [], set(), [tree]
    while stack:
        t = stack.pop()
        if isinstance(t, Op) and id(t) not in seen:
            seen.add(id(t))
            out.append(t.op)
            stack.extend(t.args)
    return out[::-1]


# ------------------------------------------------------------------ kernels

class Phase:
    """kind "map": write each (value, tree) over the kernel's full space;
    kind "reduce": reduce `tree` over the kernel's inner axes (row) or `axes` (reduce_acc) into value."""
    __slots__ = ("kind", "outputs", "op", "axes")

    def __init__(self, kind, outputs, op=None, axes=None):
        self.kind, self.outputs, self.op, self.axes = kind, outputs, op, axes


class Kernel:
    """kind: "loop" (phases inside an outer loop over shape[:split]), "reduce_acc", "extern", "host".
    `node` is set for extern/host kernels (their inputs are Loads in `args`)."""

    def __init__(self, kind, shape, split=0, phases=(), node=None, args=()):
        self.kind, self.shape, self.split, self.phases = kind, tuple(shape), split, list(phases)
        self.node, self.args = node, list(args)

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
        if self.node is not None:
            return [self.node.op]
        out = []
        for ph in self.phases:
            for _, t in ph.outputs:
                out += ops_of(t)
            if ph.kind == "reduce":
                out.append(ph.op)
        return out

    def bytes_moved(self):
        read = {}
        for ld in self.reads:
            read[id(ld.buf)] = _nbytes(ld.buf)
        return sum(read.values()) + sum(_nbytes(v) for v in self.outputs)


def _nbytes(v):
    return math.prod(v.shape) * v.dtype.itemsize


def lowerable(node):
    p = PRIMS.get(node.op)
    if p is None or p.lower is None or node.out.dtype.name not in LOWERED_DTYPES:
        return False
    if any(i.dtype.name not in LOWERED_DTYPES for i in node.inputs):
        return False
    if node.op in FLOAT_ONLY_LOWERING and not node.out.dtype.is_floating_point:
        return False
    return True


def fuse(graph, enabled=True):
    """The kernels computing `graph`, in execution order, and {id(output): buffer} for outputs that
    are reshapes of a kernel's buffer (no copy). With enabled=False (`tg.compile(fuse=False)`)
    every op is its own kernel: the baseline fusion is measured against."""
    consumers = {}
    for n in graph.nodes:
        for i in n.inputs:
            consumers.setdefault(id(i), []).append(n)
    outputs = {id(v) for v in graph.outputs}
    expr, kernels = {}, []
    for v in graph.inputs:
        expr[id(v)] = Load(v, contiguous_strides(v.shape))

    def materialize(v):
        tree = expr[id(v)]
        if isinstance(tree, Load) and tree.buf is v:
            return
        kernels.append(Kernel("loop", v.shape, 1 if v.shape else 0, [Phase("map", [(v, tree)])]))
        expr[id(v)] = Load(v, contiguous_strides(v.shape))

    def buffer_load(v):
        """v as a plain load of a buffer (materializing an expression first)."""
        if not isinstance(expr[id(v)], Load):
            materialize(v)
        return expr[id(v)]

    for n in graph.nodes:
        p = PRIMS.get(n.op)
        v = n.out
        if n.op == "const":
            expr[id(v)] = Const(n.attrs["value"], v.dtype)
        elif p.kind == "elementwise" and lowerable(n):
            args = [broadcast(expr[id(i)], i.shape, v.shape) for i in n.inputs]
            expr[id(v)] = Op(n.op, args, v.dtype)
            if len(consumers.get(id(v), ())) > 1 and size(expr[id(v)]) > RECOMPUTE_LIMIT:
                materialize(v)
        elif n.op in VIEW_OPS:
            src = n.inputs[0]
            try:
                expr[id(v)] = _move(n, expr[id(src)])
            except NotAffine:
                materialize(src)
                expr[id(v)] = _move(n, expr[id(src)])
        elif n.op in REDUCE_OPS and lowerable_reduce(n):
            src = n.inputs[0]
            axes = n.attrs["axis"]
            tree = expr[id(src)]
            nd = len(src.shape)
            if axes == tuple(range(nd - len(axes), nd)) and len(axes) < nd:
                k = nd - len(axes)
                kernels.append(Kernel("loop", src.shape, k, [Phase("reduce", [(v, tree)], n.op, axes)]))
            else:
                kernels.append(Kernel("reduce_acc", src.shape, 0, [Phase("reduce", [(v, tree)], n.op, axes)]))
            expr[id(v)] = Load(v, contiguous_strides(v.shape))
        else:
            args = [buffer_load(i) if not isinstance(expr[id(i)], Const) else _const_buffer(i, expr, kernels)
                    for i in n.inputs]
            kernels.append(Kernel("extern" if p is not None and p.kind == "extern" else "host", v.shape,
                                  node=n, args=args))
            expr[id(v)] = Load(v, contiguous_strides(v.shape))
        if (id(v) in outputs or not enabled) and isinstance(expr[id(v)], Op):
            materialize(v)
        elif id(v) in outputs and isinstance(expr[id(v)], Const):
            materialize(v)
    aliases = {}
    for v in graph.outputs:          # outputs that are reshapes of a buffer alias it; other views copy
        tree = expr[id(v)]
        if isinstance(tree, Load) and tree.buf is v or v in graph.inputs:
            continue
        if isinstance(tree, Load) and tree.buf not in graph.inputs and not tree.offset and \
                tuple(tree.strides) == contiguous_strides(v.shape) and _nbytes(v) == _nbytes(tree.buf):
            aliases[id(v)] = tree.buf
            continue
        materialize(v)
    return (merge_rows(kernels) if enabled else kernels), aliases


def lowerable_reduce(n):
    return n.out.dtype.name in ("float32", "float64", "int32", "int64") and n.inputs[0].dtype is n.out.dtype


def _const_buffer(v, expr, kernels):
    """A constant read by a host kernel: a small map kernel fills a buffer with it."""
    kernels.append(Kernel("loop", v.shape, 1 if v.shape else 0, [Phase("map", [(v, expr[id(v)])])]))
    expr[id(v)] = Load(v, contiguous_strides(v.shape))
    return expr[id(v)]


def _move(n, tree):
    src, v = n.inputs[0], n.out
    if n.op == "reshape":
        return reshape(tree, src.shape, v.shape)
    if n.op == "permute":
        return permute(tree, n.attrs["perm"])
    if n.op == "expand":
        return broadcast(tree, src.shape, v.shape)
    if n.op == "slice":
        return slice_(tree, n.attrs["index"])
    raise NotAffine


def _row_read(ld, kernel_shape, split, produced):
    """Whether a load of a buffer produced inside the group reads only the current row."""
    kind = produced.get(id(ld.buf))
    if kind is None:
        return True
    if ld.offset:
        return False
    if kind == "reduce":
        nat = contiguous_strides(kernel_shape[:split])
        return tuple(ld.strides[:split]) == tuple(nat) and not any(ld.strides[split:])
    return tuple(ld.strides) == contiguous_strides(kernel_shape)


def merge_rows(kernels):
    """Merge consecutive loop kernels over the same space into one kernel of phases (see rules)."""
    out, group, produced = [], None, {}
    for k in kernels:
        if k.kind == "reduce_acc" and out and out[-1].kind == "reduce_acc" and out[-1].shape == k.shape \
                and not {id(v) for v in out[-1].outputs} & {id(ld.buf) for ld in k.reads}:
            out[-1].phases.extend(k.phases)       # one loop nest accumulates several reductions
            group = None
            continue
        if k.kind == "loop" and out and out[-1].kind == "reduce_acc" and out[-1].shape == k.shape \
                and all(ph.kind == "map" for ph in k.phases) \
                and not {id(v) for v in out[-1].outputs} & {id(ld.buf) for ld in k.reads}:
            out[-1].phases.extend(k.phases)       # a map over the same space rides along
            group = None
            continue
        if k.kind == "reduce_acc" and out and out[-1].kind == "loop" and out[-1].shape == k.shape \
                and all(ph.kind == "map" for ph in out[-1].phases) \
                and all(ld.offset == 0 and tuple(ld.strides) == contiguous_strides(k.shape)
                        for ld in k.reads if ld.buf in out[-1].outputs):
            prev = out.pop()                      # the reduction reads the map's values where they are made
            k.phases[:0] = prev.phases
            group = None
        row_reduce = k.kind == "loop" and k.phases[0].kind == "reduce"
        can = (group is not None and k.kind == "loop" and k.shape == group.shape
               and (not row_reduce or k.split == group.split) and group.split > 0
               and all(_row_read(ld, group.shape, group.split, produced) for ld in k.reads))
        if can:
            group.phases.extend(k.phases)
        else:
            group, produced = (k if k.kind == "loop" else None), {}
            out.append(k)
        if group is not None:
            for ph in k.phases:
                for v, _ in ph.outputs:
                    produced[id(v)] = ph.kind
    return out


def kernels_text(name, kernels):
    """The `stage="kernels"` view: each kernel's kind, space, ops and bytes moved."""
    lines = [f"kernels {name}: {len(kernels)}"]
    for j, k in enumerate(kernels):
        space = "x".join(map(str, k.shape)) or "scalar"
        outs = ", ".join(f"{v.type}" for v in k.outputs)
        lines.append(f"  k{j} [{k.kind}] space={space} split={k.split} ops={'+'.join(k.ops()) or 'copy'} "
                     f"-> {outs}  bytes={k.bytes_moved()}")
    return "\n".join(lines)
