"""Which kernels fusion (fusion.py) makes one, and in which order they run: `arrange` turns the kernels
of a graph, in execution order, into fewer kernels of several phases.

Rules
- Consecutive row reductions and maps over the same iteration space that read each other only
  within the same row merge into one kernel of phases (outer loop over rows, one inner loop per
  phase): a softmax or a layernorm forward is one kernel and one pass over memory.
- A reduction over all the outer axes of a neighbouring row kernel over the same space (a loss
  summed after a layer norm forward, the weight and bias gradients beside its backward) joins
  that kernel and accumulates while its rows stream by, when it reads the row kernel's results only
  in the current row and the row kernel does not read it: the inputs are read once for both. Later
  row phases may follow it in the same kernel when they do not read it (a forward's loss, then the
  backward's rows: a loss and its gradients in one pass).
- A kernel over another space between two over the same one (a scalar loss kernel) moves after the
  second when that does not read it; a reduction of inputs only whose result a kernel over a larger
  space reads runs first (cross_entropy's count of counted labels, which its gradient's rows scale
  by: they can then join the forward's rows).
- A value a row kernel's map phase makes that only its later phases read, each at the same element,
  is not written to memory: those reads become its expression, shared, so a target computes it
  once per element (the LLVM target keeps it in the row's scratch buffer).
- Consecutive reductions accumulated in natural loop order (kind "reduce_acc") over the same space
  share one loop nest (the three gradient sums of a broadcast op are one kernel), and so does a map
  over that space next to them (a relu backward's masked gradient and its bias-gradient sum; a saved
  tanh and the sum of it), also when it reads their map results at the element being made and they
  only sum into scalars (a joined loss's gradient reading its forward's tanh), which are then not
  written unless kept (keep_in_rows).
"""
import math

from ...symint import hint, is_sym
from ..kernels import Kernel, Load, Op, contiguous_strides, known, loads, postorder, same_shape, shape_key
from .columns import order_walks
from ..layout import in_order
from ..walks import online_columns

MAX_TREE_OPS = 256   # a longer chain is cut into kernels of this many ops (code size; LLVM's time grows faster than linearly)


def arrange(kernels, keep):
    """`kernels` (fusion's, in execution order) reordered and merged by the rules above; `keep`: the ids
    of the buffers that must be written (graph outputs, aliased buffers)."""
    return keep_in_rows(merge_accumulations(merge_rows(order_walks(gather(hoist(kernels))))), keep)


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
    return in_order(Kernel("loop", rows.shape, rows.split, rows.phases + acc.phases))   # memory in natural order


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
