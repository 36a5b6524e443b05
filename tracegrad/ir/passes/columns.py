"""The walks of a column normalization: its kernels ordered so that each walk over memory does as much as
the data dependencies allow (fusion.py runs this before merging neighbours).

A reduction over leading axes (a column statistic: softmax or batch norm over dim 0, a reduce_acc
kernel) is complete only after the last row, so every kernel over the same space that reads it is a
later walk over all of memory. Fusion emits kernels in graph order: a forward's column sums, its loss,
then the backward's sums and the gradient map; merge_rows joins neighbours only. Here the kernels of a
run of loop and reduce_acc kernels (extern and host kernels end a run and keep their place) that
holds such a statistic read over its space get levels: the walk kernels (over the statistic's space)
walk w = 1..L, the longest chain of walks their reads make; the other kernels (small ones over the
kept axes) run between walks. Each kernel takes the latest level its readers allow (a loss and the
gradient map in the last walk, the backward's column sums in the walk before, beside the forward's
statistic of the same level; a sum of exp(x - max) shares the maximum's walk where one online walk
computes both, walks.online_columns), so walks late in the chain, which read every input anyway, take the
sums, and the number of walks is the chain's length. Kernels then run by level, stably, a level's loop kernels
before its reduce_acc kernels (which merge_rows then joins to them: a loss summed in the walk that
writes the gradient).
"""
import math

from ...symint import hint
from ..kernels import Kernel, same_shape, shape_key
from ..walks import online_columns


def order_walks(kernels):
    """`kernels` with every run of loop and reduce_acc kernels that holds a column normalization
    reordered by walk level (see the module docstring)."""
    out, run = [], []
    for k in kernels + [None]:
        if k is not None and k.kind in ("loop", "reduce_acc"):
            run.append(k)
            continue
        out += _ordered(run)
        run = []
        if k is not None:
            out.append(k)
    return out


def _statistic_space(run):
    """The space of the first column statistic of `run` that a later kernel over its space reads, or None."""
    last = None         # (id(buffer), space) -> the last kernel over that space reading the buffer
    for i, k in enumerate(run):
        if k.kind != "reduce_acc" or len(k.shape) < 2 or not any(
                0 in ph.axes and len(ph.axes) < len(k.shape) for ph in k.phases if ph.kind == "reduce"):
            continue
        if last is None:
            last = {(id(ld.buf), shape_key(q.shape)): j for j, q in enumerate(run) for ld in q.reads}
        if any(last.get((id(v), shape_key(k.shape)), -1) > i for v in k.outputs):
            return k.shape
    return None


def _streams(k):
    """Whether kernel k moves memory of its space's size (a reduction of a broadcast row does not)."""
    n = math.prod(map(hint, k.shape))
    return any(2 * math.prod(map(hint, v.shape)) >= n for v in [ld.buf for ld in k.reads] + k.outputs)


def _online(a, b):
    """Whether reduce_acc kernel b reads a's results only as maxima it sums exp of: one online walk."""
    return a.kind == b.kind == "reduce_acc" and \
        online_columns(Kernel("reduce_acc", a.shape, 0, a.phases + b.phases)) is not None


def _ordered(run):
    space = _statistic_space(run)
    if space is None:
        return run
    walk = [same_shape(k.shape, space) and _streams(k) for k in run]
    if not any(walk):            # the statistic's readers move no memory of its space's size: no walk
        return run
    maker = {id(v): i for i, k in enumerate(run) for v in k.outputs}
    reads = [sorted({maker[id(ld.buf)] for ld in k.reads if id(ld.buf) in maker and maker[id(ld.buf)] < i})
             for i, k in enumerate(run)]
    # levels: walk kernels at integers 1..L, the others at j + 0.5 (after walk j)
    online = {(j, i) for i, js in enumerate(reads) for j in js if walk[i] and walk[j] and _online(run[j], run[i])}
    asap = []
    for i in range(len(run)):
        step = (lambda j: asap[j] + ((j, i) not in online) if walk[j] else asap[j] + 0.5) if walk[i] else \
            (lambda j: asap[j] + 0.5 if walk[j] else asap[j])
        asap.append(max([step(j) for j in reads[i]], default=1 if walk[i] else 0.5))
    last = max(a for a, w in zip(asap, walk) if w)
    alap = [None] * len(run)
    readers = [[] for _ in run]
    for i, js in enumerate(reads):
        for j in js:
            readers[j].append(i)
    for i in reversed(range(len(run))):
        if walk[i]:
            bound = [alap[c] - ((i, c) not in online) if walk[c] else alap[c] - 0.5 for c in readers[i]]
            alap[i] = min(bound + [last])
        else:
            bound = [alap[c] - 0.5 if walk[c] else alap[c] for c in readers[i]]
            alap[i] = min(bound + [last + 0.5])
    order = sorted(range(len(run)), key=lambda i: (alap[i], walk[i] and run[i].kind == "reduce_acc", i))
    return [run[i] for i in order]
