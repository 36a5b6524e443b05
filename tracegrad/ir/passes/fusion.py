"""Fusion: group an optimized graph into kernels of the target-neutral kernel IR (ir/kernels.py),
which the code generators lower.

Rules
- Elementwise ops with a scalar lowering (the primitive's `lower`, for its operands' dtypes) fuse
  into expression trees whose leaves are loads from *buffers* (graph inputs and kernel outputs)
  at affine indices.
- Views (reshape, permute, expand, slice: each primitive's `remap`) and broadcasting never copy:
  they rewrite the strides and offset of the leaves below them. A reshape that no strides can
  express (e.g. of a transposed value) materializes its input first, and so do sliding windows
  (ops/windows.py) of an expression, which would compute each element once per window holding it:
  a padded input of a 3x3 convolution is written once, then its windows copied by plain strided
  loads ((32, 32, 16, 16) float32 im2col: 11.2 -> 0.24 ms, one thread, the loaded bench machine).
- A value is *materialized* (written to a buffer by a kernel) when it is a graph output, when a
  non-fusible op reads it (matmul, indexing, ...), or when it has several consumers and its
  expression is larger than RECOMPUTE_LIMIT ops; smaller shared values are recomputed.
- A lowered reduction (sum, max, min) fuses its elementwise prologue. Reductions over trailing axes are
  *row* reductions; consecutive row reductions and maps over the same iteration space that read
  each other only within the same row merge into one kernel of phases (outer loop over rows, one
  inner loop per phase): a softmax or a layernorm forward is one kernel and one pass over memory.
  A reduction over all the outer axes of a neighbouring row kernel over the same space (a loss
  summed after a layer norm forward, the weight and bias gradients beside its backward) joins
  that kernel and accumulates while its rows stream by, when it reads the row kernel's results only
  in the current row and the row kernel does not read it: the inputs are read once for both. Later
  row phases may follow it in the same kernel when they do not read it (a forward's loss, then the
  backward's rows: a loss and its gradients in one pass). A kernel over another space between two
  over the same one (a scalar loss kernel) moves after the second when that does not read it; a
  reduction of inputs only whose result a kernel over a larger space reads runs first (cross_entropy's
  count of counted labels, which its gradient's rows scale by: they can then join the forward's rows).
  A value a row kernel's map phase makes that only its later phases read, each at the same element,
  is not written to memory: those reads become its expression, shared, so a target computes it
  once per element (the LLVM target keeps it in the row's scratch buffer).
  A reduction whose reduced axes lie innermost in memory (x.T.sum(0)) is a row reduction over a
  permuted space (schedule.rows_first), its kept axes outer. Conversely, a row reduction whose
  reduced axes lie outermost in memory (softmax(x.T, 1)) is a reduction over leading axes of a
  permuted space (schedule.columns_first) when it is a maximum read back over its input's space or
  reads such a reduction (the sum of exp(x - max), the backward's sums, the loss): one online column
  walk, as softmax over dim 0; plain sums of such views keep their row kernel (tiles across the
  kept axis).
  Other reductions over leading or all axes accumulate in natural loop order (kind "reduce_acc");
  consecutive ones over the same space share one loop nest (the three gradient sums of a
  broadcast op are one kernel), and so does a map over that space next to them (a relu
  backward's masked gradient and its bias-gradient sum; a saved tanh and the sum of it), also when
  it reads their map results at the element being made and they only sum into scalars (a joined
  loss's gradient reading its forward's tanh), which are then not written unless kept (keep_in_rows).
- Integer-tensor indexing is a view whose coordinates are values (gathers.py): x[arange(n), y]
  reads x's expression at the picked elements only (a Gather of a Checked index: wrapped, bounds
  checked, out of range raises as eagerly), an arange (an `iota` node) being an affine index; the
  scatter-add of a pick's gradient is where(column == y[row], g[row], 0), fused into its consumer.
- The scatter-add of sliding windows (unwindows, a convolution's input gradient) is a sum of
  gathers (window_sums.py).
- unslice and cat (up to copies.MAX_PIECES pieces) are expressions too (copies.py): each piece
  read where its box holds it (a constant piece shifted, any other gathered at clamped
  coordinates), else 0.
- Matmul is an extern call (BLAS) into a preallocated buffer; other non-lowered ops (indexing
  gathers.py does not express, a cat of many pieces, prod, argmax, random, and any op on float16
  or integer division) run their NumPy implementation as "host" kernels on strided views of their
  input buffers. A target that computes
  float16 in float32 (cuda: `half=True`) fuses float16 ops as float32 ones.
"""
import math

from ...ops import PRIMS
from ...ops.layout import broadcast_strides
from ...symint import hint, is_sym
from ..kernels import (Const, Gather, Iota, Kernel, Load, Op, Phase, contiguous_strides, known, loads, postorder,
                       remap, same_shape, shape_key, size)
from .columns import order_walks
from .copies import copy_tree
from .gathers import index_tree
from .window_sums import window_sum_tree
from .schedule import columns_first, online_columns, rows_first

RECOMPUTE_LIMIT = 8
ROW_RECOMPUTE_LIMIT = 48   # the same for a row statistic (_recompute_limit)
MAX_TREE_OPS = 256   # a longer chain is cut into kernels of this many ops (code size; LLVM's time grows faster than linearly)


class NotAffine(Exception):
    pass


def broadcast(tree, shape, to):
    """`tree` (of `shape`) read broadcast to `to` (an elementwise op's operand)."""
    if same_shape(shape, to):
        return tree
    return remap(tree, lambda st, off: (broadcast_strides(shape, to, st), off))


def lowerable(node, half=False):
    """Whether `node` has a scalar lowering for the dtypes of its operands and result (with `half`,
    float16 counts as float32: the target computes it so, each float16 result rounded once)."""
    p = PRIMS.get(node.op)
    if p is None or p.lower is None:
        return False
    names = [v.dtype.name for v in (node.out, *node.inputs)]
    return all(("float32" if half and d == "float16" else d) in p.dtypes for d in names)


def fuse(graph, enabled=True, half=False):
    """The kernels computing `graph`, in execution order, and {id(output): buffer} for outputs that
    are reshapes of a kernel's buffer (no copy). With enabled=False (`tg.compile(fuse=False)`)
    every op is its own kernel: the baseline fusion is measured against. half=True: float16 ops
    fuse as float32 ones (a target that computes float16 in float32: cuda; the LLVM target runs
    them as host kernels)."""
    consumers = {}
    for n in graph.nodes:
        for i in n.inputs:
            consumers.setdefault(id(i), []).append(n)
    outputs = {id(v) for v in graph.outputs}
    expr, kernels = {}, []
    columned = set()     # ids of the row reductions built as column reductions (schedule.columns_first)
    bound = {}           # id(value) -> an upper bound of the ops in its tree (shared nodes counted twice)
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
        fused = None
        if n.op == "const":
            expr[id(v)] = Const(n.attrs["value"], v.dtype)
        elif n.op == "iota":
            expr[id(v)] = Iota((n.attrs["step"],), n.attrs["start"], v.dtype)
        elif p.kind == "index" and enabled and not half and (fused := (
                window_sum_tree(n, expr[id(n.inputs[0])], buffer_load) if n.op == "unwindows"
                else index_tree(n, [expr[id(i)] for i in n.inputs]))) is not None:
            expr[id(v)] = fused
            bound[id(v)] = size(fused)
            if len(consumers.get(id(v), ())) > 1 and bound[id(v)] > RECOMPUTE_LIMIT:
                materialize(v)
        elif p.kind == "copy" and enabled and not half and \
                (fused := copy_tree(n, [expr[id(i)] for i in n.inputs], buffer_load)) is not None:
            expr[id(v)] = fused
            bound[id(v)] = size(fused)
            if len(consumers.get(id(v), ())) > 1 and bound[id(v)] > RECOMPUTE_LIMIT:
                materialize(v)
        elif p.kind == "elementwise" and lowerable(n, half):
            args = [broadcast(expr[id(i)], i.shape, v.shape) for i in n.inputs]
            expr[id(v)] = Op(n.op, args, v.dtype, p.lower, p.cost)
            bound[id(v)] = 1 + sum(bound.get(id(i), 0) for i in n.inputs if isinstance(expr[id(i)], Op))
            if len(consumers.get(id(v), ())) > 1 and _element_ops(expr[id(v)], v.shape) > _recompute_limit(v):
                materialize(v)
            elif bound[id(v)] > MAX_TREE_OPS and size(expr[id(v)]) > MAX_TREE_OPS:
                materialize(v)
        elif p.kind == "view":
            src = n.inputs[0]
            if n.op == "windows" and not isinstance(expr[id(src)], Load):
                materialize(src)        # each element is read by up to prod(size) windows: compute it once
            try:
                expr[id(v)] = _move(n, expr[id(src)])
            except NotAffine:
                materialize(src)
                expr[id(v)] = _move(n, expr[id(src)])
            bound[id(v)] = bound.get(id(src), 0)
        elif p.kind == "reduction" and lowerable(n, half):
            src = n.inputs[0]
            axes = n.attrs["axis"]
            tree = expr[id(src)]
            nd = len(src.shape)
            perm = rows_first(src.shape, axes, tree) if tuple(v.shape) == tuple(
                n for d, n in enumerate(src.shape) if d not in axes) else None
            if perm is not None:        # a row reduction in memory: the space permuted, reduced axes last
                k = nd - len(axes)
                tree = remap(tree, lambda st, off: (tuple(st[d] for d in perm), off))
                kernels.append(Kernel("loop", [src.shape[d] for d in perm], k,
                                      [Phase("reduce", [(v, tree)], n.op, tuple(range(k, nd)), p.lower, p.cost)]))
            elif _shift_or_reads(n, consumers, columned, tree) and \
                    (perm := columns_first(src.shape, axes, tree)) is not None:
                columned.add(id(v))
                r = len(axes)         # a column reduction in memory: the space permuted, reduced axes first
                tree = remap(tree, lambda st, off: (tuple(st[d] for d in perm), off))
                kernels.append(Kernel("reduce_acc", [src.shape[d] for d in perm], 0,
                                      [Phase("reduce", [(v, tree)], n.op, tuple(range(r)), p.lower, p.cost)]))
            elif axes == tuple(range(nd - len(axes), nd)) and len(axes) < nd:
                k = nd - len(axes)
                kernels.append(Kernel("loop", src.shape, k, [Phase("reduce", [(v, tree)], n.op, axes, p.lower, p.cost)]))
            else:
                kernels.append(Kernel("reduce_acc", src.shape, 0, [Phase("reduce", [(v, tree)], n.op, axes, p.lower, p.cost)]))
            expr[id(v)] = Load(v, contiguous_strides(v.shape))
        else:
            args = [buffer_load(i) if not isinstance(expr[id(i)], Const) else _const_buffer(i, expr, kernels)
                    for i in n.inputs]
            kernels.append(Kernel("extern" if p.kind == "extern" else "host", v.shape, node=n, args=args,
                                  impl=p.impl))
            expr[id(v)] = Load(v, contiguous_strides(v.shape))
        if (id(v) in outputs or not enabled) and isinstance(expr[id(v)], Op):
            materialize(v)
        elif id(v) in outputs and isinstance(expr[id(v)], Const):
            materialize(v)
        elif id(v) in outputs and isinstance(expr[id(v)], Iota):      # written; its readers keep the index
            iota = expr[id(v)]
            materialize(v)
            expr[id(v)] = iota
    aliases = {}
    for v in graph.outputs:          # outputs that are reshapes of a buffer alias it; other views copy
        tree = expr[id(v)]
        if isinstance(tree, Load) and tree.buf is v or v in graph.inputs:
            continue
        if isinstance(tree, Load) and tree.buf not in graph.inputs and known(tree.offset, 0) and \
                same_shape(tree.strides, contiguous_strides(v.shape)) and v.dtype.itemsize == tree.buf.dtype.itemsize \
                and same_shape((math.prod(v.shape),), (math.prod(tree.buf.shape),)):     # (for every size)
            aliases[id(v)] = tree.buf
            continue
        materialize(v)
    if not enabled:
        return kernels, aliases
    keep = {id(v) for v in graph.outputs} | {id(b) for b in aliases.values()}
    return keep_in_rows(merge_accumulations(merge_rows(order_walks(gather(hoist(kernels))))), keep), aliases


def _shift_or_reads(n, consumers, columned, tree):
    """Whether reduction node n is a maximum read back over its input's space (a softmax's or
    logsumexp's shift), or its tree reads a row reduction built as a column reduction (the sum of
    exp(x - max), a backward's sum of g * y, the loss): such reductions become one online column walk
    (schedule.columns_first). Other row reductions of a transposed view (sums, variances) keep their
    tiles across the kept axis, which read the rows of a tile twice while in cache."""
    if any(id(ld.buf) in columned for ld in loads(tree)):
        return True
    if n.op != "max":
        return False
    shape, todo, seen = tuple(n.inputs[0].shape), list(consumers.get(id(n.out), ())), set()
    while todo:
        c = todo.pop()
        if id(c) in seen or PRIMS[c.op].kind not in ("elementwise", "view"):
            continue
        seen.add(id(c))
        if tuple(c.out.shape) == shape and PRIMS[c.op].kind == "elementwise":
            return True
        todo += consumers.get(id(c.out), ())
    return False


def _recompute_limit(v):
    """The ops a shared value may have and still be recomputed by each consumer: more for a row
    statistic (a trailing axis of 1, read broadcast along the row: its expression is invariant in the
    inner loop, which LLVM hoists), so it stays in the row kernel that reads it."""
    return ROW_RECOMPUTE_LIMIT if len(v.shape) > 1 and known(v.shape[-1], 1) else RECOMPUTE_LIMIT


def _element_ops(tree, shape):
    """The ops of `tree` (over a space of `shape`) that vary along every axis of it: those over a load
    or index that walks them all. The others read only broadcast values (a column statistic's expression: it varies along
    the kept axes only), which a target computes once per row or column, not per element."""
    varying = {}
    for t in postorder(tree):
        if isinstance(t, Op):
            varying[id(t)] = any(varying[id(a)] for a in t.args) or isinstance(t, Gather)
        else:
            varying[id(t)] = isinstance(t, (Load, Iota)) and all(is_sym(st) or st for st, n in zip(t.strides, shape)
                                                                 if hint(n) > 1)
    return sum(varying[id(t)] for t in postorder(tree) if isinstance(t, Op))


def _const_buffer(v, expr, kernels):
    """A constant read by a host kernel: a small map kernel fills a buffer with it."""
    kernels.append(Kernel("loop", v.shape, 1 if v.shape else 0, [Phase("map", [(v, expr[id(v)])])]))
    expr[id(v)] = Load(v, contiguous_strides(v.shape))
    return expr[id(v)]


def _identity(moved, probe):
    """Whether a view's remap of the contiguous strides `probe` (at offset 0) gave them back: the same
    expressions (no guard on symbolic sizes)."""
    return moved is not None and same_shape(moved[0], probe) and known(moved[1], 0)


def _move(n, tree):
    """`tree` read through view node n: its loads rewritten by the view's `remap` (no copy). The loads
    of an empty view read at offset 0 (host kernels see them as NumPy views of their buffers)."""
    p, src, v = PRIMS[n.op], n.inputs[0], n.out
    if any(known(d, 0) for d in v.shape):   # reads nothing, and its offset may lie past the buffer: a fresh empty
        return remap(tree, lambda st, off: (contiguous_strides(v.shape), 0))    # array's layout
    probe = contiguous_strides(src.shape)
    if same_shape(src.shape, v.shape) and _identity(p.remap(src.shape, v.shape, probe, 0, **n.attrs), probe):
        return tree                           # the identity (an expand or slice to the same shape)

    def fn(strides, offset):
        moved = p.remap(src.shape, v.shape, strides, offset, **n.attrs)
        if moved is None:
            raise NotAffine
        return moved
    return remap(tree, fn)


def _row_read(ld, kernel_shape, split, produced):
    """Whether a load of a buffer produced inside the group reads only the current row."""
    kind = produced.get(id(ld.buf))
    if kind is None:
        return True
    if kind == "acc":                 # a sum over the rows is complete only after the last row
        return False
    if not known(ld.offset, 0):      # (symbolic sizes: only what holds for every size)
        return False
    if kind == "reduce":
        nat = contiguous_strides(kernel_shape[:split])
        return same_shape(ld.strides[:split], nat) and all(known(s, 0) for s in ld.strides[split:])
    return same_shape(ld.strides, contiguous_strides(kernel_shape))


def hoist(kernels):
    """Move to the front each reduce_acc kernel that reads no kernel's output and whose result a later
    kernel over a larger space reads (cross_entropy's count of the labels that count, which its
    gradient's rows scale by): that kernel may then join the row kernels before it (a joined forward
    and backward reading x once)."""
    made = {id(v) for k in kernels for v in k.outputs}
    front, rest = [], []
    for j, k in enumerate(kernels):
        if k.kind == "reduce_acc" and not any(id(ld.buf) in made for ld in k.reads):
            outs, n = {id(v) for v in k.outputs}, math.prod(map(hint, k.shape))
            if any(math.prod(map(hint, q.shape)) > n and outs & {id(ld.buf) for ld in q.reads} for q in kernels[j + 1:]):
                front.append(k)
                continue
        rest.append(k)
    return front + rest


def gather(kernels):
    """Move each loop or reduce_acc kernel up to just after the latest earlier kernel over the same
    space, when it reads nothing the kernels in between make (a forward's scalar loss kernel between
    its rows and the backward's): such neighbours can then merge. Loop kernels are pure, so the
    others keep their order; in-place writes are decided later, on the final order."""
    out = []
    for k in kernels:
        j = len(out)
        if k.kind in ("loop", "reduce_acc"):
            reads = {id(ld.buf) for ld in k.reads}
            while j > 0 and not same_shape(out[j - 1].shape, k.shape) and not reads & {id(v) for v in out[j - 1].outputs}:
                j -= 1
            if j == 0 or not same_shape(out[j - 1].shape, k.shape):
                j = len(out)
        out.insert(j, k)
    return out


def merge_rows(kernels):
    """Merge consecutive loop kernels over the same space into one kernel of phases (see rules), when
    they are `linked`."""
    out, group, produced, group_ops = [], None, {}, 0
    link = linked(kernels)
    for k in kernels:
        if group is not None and _accumulates_into(k, group, after=True):
            group.phases.extend(k.phases)         # sums over the rows join the rows: later row phases
            group_ops += len(k.ops())             # may follow (they cannot read the sums)
            for ph in k.phases:
                for v, _ in ph.outputs:
                    produced[id(v)] = "acc"
            continue
        if k.kind == "reduce_acc" and out and out[-1].kind == "reduce_acc" and same_shape(out[-1].shape, k.shape) \
                and _accumulate_beside(out[-1], k):
            out[-1].phases.extend(k.phases)       # one loop nest accumulates several reductions
            group = None
            continue
        if k.kind == "loop" and out and out[-1].kind == "reduce_acc" and same_shape(out[-1].shape, k.shape) \
                and all(ph.kind == "map" for ph in k.phases) and _same_element(k, out[-1]) \
                and not out[-1].reads_own_reductions():    # (a map beside it leaves no online walk)
            out[-1].phases.extend(k.phases)       # a map over the same space rides along
            group = None
            continue
        if k.kind == "reduce_acc" and out and out[-1].kind == "loop" and same_shape(out[-1].shape, k.shape) \
                and all(ph.kind == "map" for ph in out[-1].phases) \
                and all(known(ld.offset, 0) and same_shape(ld.strides, contiguous_strides(k.shape))
                        for ld in k.reads if ld.buf in out[-1].outputs) and not k.reads_own_reductions():
            prev = out.pop()                      # the reduction reads the map's values where they are made
            k.phases[:0] = prev.phases
            group = None
        row_reduce = k.kind == "loop" and k.phases[0].kind == "reduce"
        k_ops = len(k.ops())
        can = (group is not None and k.kind == "loop" and same_shape(k.shape, group.shape)
               and (not row_reduce or k.split == group.split) and group.split > 0
               and group_ops + k_ops <= MAX_TREE_OPS and link(k) == link(group)
               and all(_row_read(ld, group.shape, group.split, produced) for ld in k.reads))
        if can:
            group.phases.extend(k.phases)
            group_ops += k_ops
        else:
            group, produced, group_ops = (k if k.kind == "loop" else None), {}, k_ops
            out.append(k)
        if group is not None:
            for ph in k.phases:
                for v, _ in ph.outputs:
                    produced[id(v)] = ph.kind
    return out


def _same_element(k, acc):
    """Whether map kernel k reads none of reduce_acc kernel acc's results, or, where acc only sums into
    scalars (a loss), reads them only where acc's map phases make them, at the element being made (a
    joined loss: its forward's tanh, read by the gradient's map). Sums over some axes keep the map
    apart: W6's joined broadcast loss as one accumulation of four sums over different axes with the
    tanh inline ran 2.7x slower than the tanh written once and summed by a kernel of its own."""
    made = {id(v): ph.kind for ph in acc.phases for v, _ in ph.outputs}
    reads = [ld for ld in k.reads if id(ld.buf) in made]
    if not reads:
        return True
    full = contiguous_strides(k.shape)
    scalars = all(len(ph.axes) == len(acc.shape) for ph in acc.phases if ph.kind == "reduce")
    return scalars and all(made[id(ld.buf)] == "map" and known(ld.offset, 0) and same_shape(ld.strides, full)
                           for ld in reads)


def linked(kernels):
    """A function naming each loop kernel's group of linked kernels: those over one space joined, each
    to the next, by a buffer both read along some axis (not a 0-d or broadcast scalar) or one makes and
    the other reads. Unrelated maps over one space (one optimizer update per parameter) are not
    merged: together they save no memory traffic, while apart their LLVM bodies are identical and
    compile once (W8: ten 32 x 32 Adam updates were one kernel of 180 ops, 0.07 s of LLVM)."""
    parent, owner = {}, {}

    def find(j):
        while parent.setdefault(j, j) != j:
            j = parent[j]
        return j
    for k in kernels:
        if k.kind != "loop":
            continue
        for b in {id(ld.buf) for ld in k.reads if any(is_sym(s) or s for s in ld.strides)} | {id(v) for v in k.outputs}:
            other = owner.setdefault((shape_key(k.shape), b), id(k))
            parent[find(id(k))] = find(other)
    return lambda k: find(id(k))


def _accumulate_beside(acc, k):
    """Whether reduce_acc kernel k can join reduce_acc kernel `acc` (same space) in one loop nest: it
    reads none of acc's results, or only maxima it sums exp of, online (schedule.online_columns), and
    acc keeps its online walk."""
    merged = Kernel("reduce_acc", acc.shape, 0, acc.phases + k.phases)
    if {id(v) for v in acc.outputs} & {id(ld.buf) for ld in k.reads}:
        return online_columns(merged) is not None
    return online_columns(acc) is None or online_columns(merged) is not None


def merge_accumulations(kernels):
    """Move the phases of a reduce_acc kernel into a neighbouring row kernel over the same space (see
    rules) when they all reduce over its outer axes and read its results only within a row."""
    out = []
    for k in kernels:
        prev = out[-1] if out else None
        if prev is not None and _accumulates_into(k, prev, after=True):
            prev.phases.extend(k.phases)
            continue
        if prev is not None and _accumulates_into(prev, k, after=False):
            out[-1] = k
            k.phases.extend(prev.phases)
        else:
            out.append(k)
    return out


def _accumulates_into(acc, rows, after):
    """Whether reduce_acc kernel `acc` (run after row kernel `rows` when `after`, else before it)
    can accumulate inside it."""
    if acc.kind != "reduce_acc" or rows.kind != "loop" or not rows.split or not same_shape(acc.shape, rows.shape) \
            or acc.reads_own_reductions():            # only an online column walk computes that
        return False
    outer = set(range(rows.split))
    if not all(ph.kind == "reduce" and outer <= set(ph.axes) for ph in acc.phases):
        return False
    made = {id(v) for v in acc.outputs}
    if any(id(ld.buf) in made for ld in rows.reads):
        return False
    summed = {id(ph) for ph in rows.accumulated()}      # complete only after the last row ("acc")
    produced = {id(v): "acc" if id(ph) in summed else ph.kind for ph in rows.phases for v, _ in ph.outputs}
    if not after and any(id(ld.buf) in produced for ld in acc.reads):
        return False
    if len(rows.ops()) + len(acc.ops()) > MAX_TREE_OPS or \
            not all(_row_read(ld, rows.shape, rows.split, produced) for ld in acc.reads):
        return False
    from .schedule import choose                 # the merged kernel must walk memory in natural order
    return choose(Kernel("loop", rows.shape, rows.split, rows.phases + acc.phases)) is None


def keep_in_rows(kernels, keep):
    """Drop the map-phase outputs that only later phases of the same row or reduce_acc kernel read, at
    the same element, and are not in `keep` (graph outputs, aliased buffers): their loads become the
    expression (see rules)."""
    readers = {}
    for j, k in enumerate(kernels):
        for ld in k.reads:
            readers.setdefault(id(ld.buf), set()).add(j)
    for j, k in enumerate(kernels):
        if not (k.kind == "loop" and k.split or k.kind == "reduce_acc"):
            continue
        full = contiguous_strides(k.shape)
        for pi, ph in enumerate(k.phases):
            for v, tree in list(ph.outputs) if ph.kind == "map" else ():
                later = [ld for q in k.phases[pi + 1:] for _, t in q.outputs for ld in loads(t) if ld.buf is v]
                if id(v) in keep or readers.get(id(v), set()) != {j} or not isinstance(tree, Op) or \
                        any(not known(ld.offset, 0) or not same_shape(ld.strides, full) for ld in later):
                    continue
                memo = {}
                for q in k.phases[pi + 1:]:
                    q.outputs = [(w, _inline(t, v, tree, memo)) for w, t in q.outputs]
                ph.outputs.remove((v, tree))
        k.phases = [ph for ph in k.phases if ph.outputs]
    return kernels


def _inline(tree, v, expr, memo):
    """`tree` with its loads of buffer v replaced by `expr`; nodes that do not read v stay the same
    objects (`memo` shared across the trees of a kernel keeps shared nodes shared)."""
    for t in postorder(tree):
        if id(t) in memo:
            continue
        if isinstance(t, Load):
            memo[id(t)] = expr if t.buf is v else t
        elif isinstance(t, Op):
            args = [memo[id(a)] for a in t.args]
            memo[id(t)] = t if all(a is b for a, b in zip(args, t.args)) else t.with_args(args)
        else:
            memo[id(t)] = t
    return memo[id(tree)]
