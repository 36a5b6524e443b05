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
  expression is larger than RECOMPUTE_LIMIT ops, or has a transcendental per element and its
  consumers lie on both sides of a matrix product (an LSTM's gate activations, read by its step and
  again by the step's backward after the products between: `_read_apart`); smaller shared values
  are recomputed.
- A lowered reduction (sum, max, min) fuses its elementwise prologue. Reductions over trailing axes are
  *row* reductions (a kernel of kind "loop" split after its kept axes).
  A reduction whose reduced axes lie innermost in memory (x.T.sum(0)) is a row reduction over a
  permuted space (schedule.rows_first), its kept axes outer. Conversely, a row reduction whose
  reduced axes lie outermost in memory (softmax(x.T, 1)) is a reduction over leading axes of a
  permuted space (schedule.columns_first) when it is a maximum read back over its input's space or
  reads such a reduction (the sum of exp(x - max), the backward's sums, the loss): one online column
  walk, as softmax over dim 0; plain sums of such views keep their row kernel (tiles across the
  kept axis).
  Other reductions over leading or all axes accumulate in natural loop order (kind "reduce_acc").
- The kernels so made are then ordered and merged (merge.py, rules in its docstring): a softmax or a
  layernorm forward is one kernel and one pass over memory.
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
import bisect
import math

from ...ops import PRIMS
from ...ops.layout import broadcast_strides
from ...symint import hint, is_sym
from ..divisors import BROADCAST_DIV, broadcast_divisor
from ..kernels import (Const, Gather, Iota, Kernel, Load, Op, Phase,
                       contiguous_strides, known, loads, postorder, remap, same_shape, size)
from .copies import copy_tree
from .gathers import index_tree
from .merge import MAX_TREE_OPS, arrange
from .window_sums import window_sum_tree, written_once
from ..layout import columns_first, rows_first

RECOMPUTE_LIMIT = 8
ROW_RECOMPUTE_LIMIT = 48   # the same for a row statistic (_recompute_limit)


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
    consumers, producer = {}, {}
    for n in graph.nodes:
        producer[id(n.out)] = n
        for i in n.inputs:
            consumers.setdefault(id(i), []).append(n)
    outputs = {id(v) for v in graph.outputs}
    apart = _apart(graph.nodes)
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
            if n.op == "unwindows" and written_once(n) or \
                    len(consumers.get(id(v), ())) > 1 and bound[id(v)] > RECOMPUTE_LIMIT:
                materialize(v)
        elif p.kind == "copy" and enabled and not half and \
                (fused := copy_tree(n, [expr[id(i)] for i in n.inputs], buffer_load)) is not None:
            expr[id(v)] = fused
            bound[id(v)] = size(fused)
            if len(consumers.get(id(v), ())) > 1 and bound[id(v)] > RECOMPUTE_LIMIT or _read_by_externs(n, consumers):
                materialize(v)
        elif p.kind == "elementwise" and lowerable(n, half):
            args = [broadcast(expr[id(i)], i.shape, v.shape) for i in n.inputs]
            lower = BROADCAST_DIV if n.op == "div" and v.dtype.is_floating_point and \
                broadcast_divisor(v.shape, n.inputs[1].shape, args[0]) else p.lower
            expr[id(v)] = Op(n.op, args, v.dtype, lower, p.cost)
            bound[id(v)] = 1 + sum(bound.get(id(i), 0) for i in n.inputs if isinstance(expr[id(i)], Op))
            if len(consumers.get(id(v), ())) > 1 and (_element_ops(expr[id(v)], v.shape) > _recompute_limit(v)
                                                      or _read_apart(v, expr[id(v)], consumers[id(v)], apart)):
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
            perm = rows_first(src.shape, axes, tree) if any(same_shape(v.shape, s) for s in (
                tuple(n for d, n in enumerate(src.shape) if d not in axes),           # keepdims or not
                tuple(1 if d in axes else n for d, n in enumerate(src.shape)))) else None
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
            if n.op == "matmul":
                for i in n.inputs:
                    _shared_source(i, expr, consumers, producer, materialize)
                if _shared_transposed_right(n, expr, consumers):
                    materialize(n.inputs[1])
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
    return arrange(kernels, keep), aliases


def _shared_transposed_right(n, expr, consumers):
    """Matrix product n's right operand is a transposed view (x @ w.T: a Linear's weight) that other
    products read as their right operand too: it is written once in its product's layout. BLAS packs
    a transposed right operand by strided reads at each call (OpenBLAS, one thread, 32x128 @ 128x512:
    88 us transposed, 52 us not, 48 us the copy), so a recurrent layer's h @ W_hh.T at every step
    reads one copy instead."""
    w = n.inputs[1]
    tree = expr[id(w)]
    if len(w.shape) != 2 or not w.dtype.is_floating_point or not isinstance(tree, Load) or tree.buf is w or \
            not (known(tree.strides[0], 1) and not known(tree.strides[1], 1)):
        return False
    return sum(r.op == "matmul" and r.inputs[1] is w for r in consumers.get(id(w), ())) > 1


def _read_by_externs(n, consumers):
    """A cat that only matrix products (or other extern calls) read, through views: it is written in
    its own layout, each piece's box a run of whole rows, and a transposing view read by BLAS's
    flag; written in the product's layout instead, every element would gather from every piece
    across rows (a 32-piece [1024, 512] cat read transposed: 19 ms; written natural ~0.2 ms).
    product_sums.py makes such cats."""
    if n.op != "cat":
        return False
    readers, seen = list(consumers.get(id(n.out), ())), 0
    while readers:
        r = readers.pop()
        seen += 1
        kind = PRIMS[r.op].kind if r.op in PRIMS else None
        if kind == "view" and r.op != "windows" and seen < 64:
            readers.extend(consumers.get(id(r.out), ()))
        elif kind != "extern":
            return False
    return seen > 0


def _shared_source(i, expr, consumers, producer, materialize):
    """A matrix product's operand i that views (reshape, permute, ...) an expression other kernels read
    too: that expression is written once, in its own layout, and i read through the view's strides
    (BLAS takes a transposed operand by its flag), instead of the expression computed again into a
    copy of i's layout. W12's logits gradient was written twice, natural and transposed (for the
    tied embedding's gradient), one 512x512 map with exp (~0.2 ms) of its step. Left as it is where
    the view would give the product neither axis of unit stride."""
    chain, src = [], i
    while id(src) in producer and getattr(PRIMS.get(producer[id(src)].op), "kind", None) == "view" \
            and producer[id(src)].op != "windows":          # (const and iota nodes are no primitives)
        chain.append(producer[id(src)])
        src = chain[-1].inputs[0]
    tree = expr[id(src)]
    written = isinstance(tree, Load) and tree.buf is src
    if not chain or isinstance(expr[id(i)], Load) or not (written or isinstance(tree, Op) and len(consumers.get(id(src), ())) > 1):
        return
    moved = Load(src, contiguous_strides(src.shape))
    try:
        for n in reversed(chain):
            moved = _move(n, moved)
    except NotAffine:
        return
    st = moved.strides[-2:]
    if len(st) < 2 or not (known(st[-1], 1) or known(st[-2], 1)):
        return
    materialize(src)
    for n in reversed(chain):
        expr[id(n.out)] = _move(n, expr[id(n.inputs[0])])


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
        if same_shape(c.out.shape, shape) and PRIMS[c.op].kind == "elementwise":
            return True
        todo += consumers.get(id(c.out), ())
    return False


def _recompute_limit(v):
    """The ops a shared value may have and still be recomputed by each consumer: more for a row
    statistic (a trailing axis of 1, read broadcast along the row: its expression is invariant in the
    inner loop, which LLVM hoists), so it stays in the row kernel that reads it."""
    return ROW_RECOMPUTE_LIMIT if len(v.shape) > 1 and known(v.shape[-1], 1) else RECOMPUTE_LIMIT


def _element_ops(tree, shape):
    """How many ops of `tree` (over a space of `shape`) vary along every axis of it (_varying_ops)."""
    return len(_varying_ops(tree, shape))


def _varying_ops(tree, shape):
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
    return [t for t in postorder(tree) if isinstance(t, Op) and varying[id(t)]]


def _apart(nodes):
    """apart(consumers): whether a matrix product (or another extern call) runs between the first and
    the last of `consumers` (nodes of `nodes`, in their order)."""
    at = {id(n): k for k, n in enumerate(nodes)}
    externs = [k for k, n in enumerate(nodes) if getattr(PRIMS.get(n.op), "kind", None) == "extern"]

    def apart(consumers):
        first, last = min(at[id(c)] for c in consumers), max(at[id(c)] for c in consumers)
        return bisect.bisect_right(externs, first) < bisect.bisect_left(externs, last)
    return apart


def _read_apart(v, tree, consumers, apart):
    """Shared value v (expression `tree`) computes a transcendental per element and its consumers lie
    on both sides of an extern call: it is written once rather than computed again by a kernel after
    the call (which would also read its inputs again). An LSTM step's gate activations, which its
    backward reads after the products between (W11: its backward gate kernels of 58-66 ops became ~25 ops
    of arithmetic; bench.ab --rev main --only W11 --cpu at load 5-6: 0.92x with ir/passes/slices.py)."""
    return any(t.cost == "transcendental" for t in _varying_ops(tree, v.shape)) and apart(consumers)


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
