"""Save or recompute: which forward values the backward graph receives.

Rule: a value v the backward needs is *recomputed* in the backward graph, instead of being saved
by the forward, when it is produced by lowered elementwise, view or constant ops (at most
MAX_RECOMPUTE_OPS of them) from a *frontier* of forward inputs and results of expensive ops
(matmul, reductions, indexing), and reading that frontier costs no more memory traffic than saving
v does (a copy -- unslice, cat -- is an expression too, ir/passes/copies.py: the box mask of
x[:, a:b] = v, unslice of a constant, is recomputed from nothing): saving costs a write in the forward and a read in the backward (2·|v| bytes); recomputing
costs reading the frontier values that are not saved anyway. The frontier values are then saved in
v's place. So a chain of elementwise ops is recomputed from its one input (a tanh chain from x, a
relu mask from the pre-activation), while a residual x*w+b-y of four inputs is saved. A chain
with a transcendental (a primitive of cost "transcendental": tanh, exp, ...) applied per element,
producing more than HEAVY_RECOMPUTE_BYTES, is saved: there recomputing costs more time than the traffic it avoids.
Except a softmax numerator exp(x - max(x)) that the forward only sums, directly or through
elementwise ops (log-softmax's, logsumexp's, cross_entropy's; a softmax whose output only a loss
sums): the forward computes it in the walks that reduce it (online with the maximum where it can,
never written), so saving it would cost the forward the write; the backward recomputes it from x
and the saved max instead.
"""
import math

from ...ops import PRIMS
from ...symint import hint, same_shape
from ..graph import Graph
from .copies import fusible

MAX_RECOMPUTE_OPS = 64
HEAVY_RECOMPUTE_BYTES = 256 * 1024   # above this, a chain with a transcendental is saved, not redone


def _cheap(node):
    if node.op in ("const", "iota"):          # no inputs: recomputed from nothing
        return True
    p = PRIMS.get(node.op)
    return p is not None and (p.kind == "elementwise" and p.lower is not None or p.kind == "view"
                              or p.kind == "copy" and fusible(node))


def _transcendental(node):
    p = PRIMS.get(node.op)
    return p is not None and p.cost == "transcendental"


def _online_exp(v):
    """Whether v = exp(a - r) with r computed by cheap ops from max(a) (a softmax numerator)."""
    if v.node is None or v.node.op != "exp" or v.node.inputs[0].node is None or v.node.inputs[0].node.op != "sub":
        return False
    a, r = v.node.inputs[0].node.inputs
    stack, seen = [r], set()
    while stack:
        u = stack.pop()
        if id(u) in seen or u.node is None:
            continue
        seen.add(id(u))
        if u.node.op == "max" and u.node.inputs[0] is a:
            return True
        if _cheap(u.node):
            stack.extend(u.node.inputs)
    return False


def _nbytes(v):
    return math.prod(map(hint, v.shape)) * v.dtype.itemsize      # (an estimate: symbolic sizes at their hints)


def rematerialize(fwd, bwd, first_saved, n_cotangents):
    """Returns (fwd, bwd) with recomputable saved values moved into the backward graph.

    fwd.outputs[first_saved:] are the saved values, fed to bwd.inputs[n_cotangents:][:n_saved]."""
    saved = fwd.outputs[first_saved:]
    n_saved = len(saved)
    inputs = {id(v) for v in fwd.inputs}
    plan = {}                     # id(saved value) -> frontier values, or None to keep it saved

    def frontier(v, acc, seen, count):
        if id(v) in seen:
            return count
        seen.add(id(v))
        if id(v) in inputs or v.node is None or not _cheap(v.node):
            acc.append(v)
            return count
        count += 1
        if _transcendental(v.node):
            heavy.append(v)
        if count > MAX_RECOMPUTE_OPS:
            return count
        for i in v.node.inputs:
            count = frontier(i, acc, seen, count)
        return count

    saved_ids = {id(v) for v in saved}
    returned = {id(v) for v in fwd.outputs[:first_saved]}
    users = {}
    for n in fwd.nodes:
        for i in n.inputs:
            users.setdefault(id(i), []).append(n)

    def only_summed(h):
        """The forward makes h only for sums, maybe through elementwise ops (a softmax's numerator
        divided by its sum, times g, summed: a loss), none of whose full-size values it returns."""
        stack, seen = [h], set()
        while stack:
            u = stack.pop()
            if id(u) in seen:
                continue
            seen.add(id(u))
            if id(u) in returned or u is not h and id(u) in saved_ids or not users.get(id(u)):
                return False
            for n in users[id(u)]:
                if n.op != "sum":
                    if not (_cheap(n) and PRIMS[n.op].kind == "elementwise") or not same_shape(n.out.shape, h.shape):
                        return False
                    stack.append(n.out)
        return True
    for v in saved:
        if id(v) in inputs or v.node is None or not _cheap(v.node) or v.node.op in ("const", "iota"):
            plan[id(v)] = None
            continue
        acc, heavy = [], []
        count = frontier(v, acc, set(), 0)
        read = sum(_nbytes(f) for f in acc if id(f) not in saved_ids)
        full = [h for h in heavy if 2 * _nbytes(h) // h.dtype.itemsize >= _nbytes(v) // v.dtype.itemsize  # per element
                and not (_online_exp(h) and only_summed(h))]
        cheap_enough = not full or _nbytes(v) <= HEAVY_RECOMPUTE_BYTES
        plan[id(v)] = acc if count <= MAX_RECOMPUTE_OPS and read <= 2 * _nbytes(v) and cheap_enough else None
    if all(p is None for p in plan.values()):
        return fwd, bwd
    # the new saved list: kept values, then frontier values, in first-seen order
    new_saved, seen = [], set()
    for v in saved:
        for f in ([v] if plan[id(v)] is None else plan[id(v)]):
            if id(f) not in seen:
                seen.add(id(f))
                new_saved.append(f)
    # backward: cotangents, new saved inputs, the other inputs; recomputation nodes first
    g = Graph(bwd.name)
    env = {}
    for v in bwd.inputs[:n_cotangents]:
        env[id(v)] = g.add_input(v.name, v.shape, v.dtype)
    fenv = {}
    for k, f in enumerate(new_saved):
        fenv[id(f)] = g.add_input(f"s{k}", f.shape, f.dtype)
    for v in bwd.inputs[n_cotangents + n_saved:]:
        env[id(v)] = g.add_input(v.name, v.shape, v.dtype)

    def recompute(v):
        if id(v) in fenv:
            return fenv[id(v)]
        n = v.node
        out = g.add(n.op, [recompute(i) for i in n.inputs], n.attrs, v.shape, v.dtype, n.loc)
        fenv[id(v)] = out
        return out

    for old_in, v in zip(bwd.inputs[n_cotangents:n_cotangents + n_saved], saved):
        env[id(old_in)] = recompute(v)
    for n in bwd.nodes:
        env[id(n.out)] = g.add(n.op, [env[id(i)] for i in n.inputs], n.attrs, n.out.shape, n.out.dtype, n.loc)
    g.outputs = [env[id(v)] for v in bwd.outputs]
    f2 = fwd.copy()
    fmap = {id(a): b for a, b in zip(_all_values(fwd), _all_values(f2))}
    f2.outputs = f2.outputs[:first_saved] + [fmap[id(v)] for v in new_saved]
    return f2, g


def _all_values(graph):
    return list(graph.inputs) + [n.out for n in graph.nodes]
