"""Results that are not new tensors, as eagerly: a result that is an input (or an input's .grad) is
that tensor object; a view of an input, or of another result, is a view over its memory (writes
through either are seen by the other; its gradient flows through the view); one tensor returned
twice is one object.

The compiled program computes every result's value; for these the call returns the caller's tensor,
or replays the view primitives eagerly on it, after the write-back (so the memory holds what the
function left there). The plan is made once per signature from the trace: a traced result knows
the storage it views (trace.Tracer._root) and the view primitives from that storage's value.
"""
from ..autograd import is_grad_enabled, set_grad_enabled
from ..ops import PRIMS
from ..tensor.dispatch import dispatch
from .writeback import CALLERS, resolve

INPUT, GRAD, SAME, OUTPUT = "input", "grad", "same", "output"


def plan_aliases(tracer, outputs, grad_changes):
    """[(k, kind, where, ops, how)] for the results (outputs: (k, traced result)) that alias an input
    or another result: kind INPUT (where: the input's source and real tensor: an argument, its .grad,
    a captured tensor), GRAD (where: the
    tensor whose .grad it is), SAME (where: the earlier result's position), OUTPUT (where: the
    result it views); ops: the view primitives to replay [(prim, attrs)]; how: None (the view
    itself, with autograd as the traced one), "detach" or "data" (an alias without history)."""
    first = {}
    for k, st in outputs:
        first.setdefault(id(st), k)
    lifted = {id(e.standin): e for e in tracer.order if e.source[0] in (*CALLERS, "captured")}
    grads = {id(after): t for t, _, after in grad_changes if after is not None}
    arg_of = {id(e.standin): e.source[1] for e in tracer.order if e.source[0] == "arg"}
    plan = []
    for k, st in outputs:
        if first[id(st)] != k:
            plan.append((k, SAME, first[id(st)], (), None))
            continue
        if id(st) in grads:
            t = grads[id(st)]
            plan.append((k, GRAD, ("arg", arg_of[id(t)]) if id(t) in arg_of else ("captured", t), (), None))
            continue
        root = tracer._root(st)
        ops = _view_ops(st._ir, root._ir) if root is not None else None
        if ops is None:
            continue
        # replayed eagerly, the view requires grad as its base does: else it is detached
        tracked = st is root or ops and st.requires_grad == (root.requires_grad and is_grad_enabled())
        how = None if tracked else "detach" if st._ver is root._ver else "data"
        e = lifted.get(id(root))
        if e is not None:
            # a stand-in updated with autograd history has none on the caller's tensor: keep the
            # compiled result (its gradient flows through the compiled backward)
            if root.grad_fn is not None or root.requires_grad != e.real.requires_grad:
                continue
            plan.append((k, INPUT, (e.source, None if e.source[0] in CALLERS else e.real), ops, how))
        elif id(root) in first and first[id(root)] != k:
            plan.append((k, OUTPUT, first[id(root)], ops, how))
    order = {INPUT: 0, GRAD: 0, SAME: 1, OUTPUT: 1}
    return sorted(plan, key=lambda p: (order[p[1]], p[0]))


def _view_ops(v, start):
    """The view primitives from value `start` to value `v`, first first; None when v is not a view
    of start."""
    ops = []
    while v is not start:
        n = v.node
        if n is None or len(n.inputs) != 1 or PRIMS.get(n.op) is None or PRIMS[n.op].kind != "view":
            return None
        ops.append((PRIMS[n.op], n.attrs))
        v = n.inputs[0]
    return ops[::-1]


def rebuild_aliases(plan, results, leaves, grad_enabled):
    """Replace the planned results (a list, in place) by the caller's tensors or views of them."""
    for k, kind, where, ops, how in plan:
        if kind == INPUT:
            t = resolve(*where, leaves)
        elif kind == GRAD:
            t = (leaves[where[1]] if where[0] == "arg" else where[1])._grad
        else:
            t = results[where]
        if ops:
            with set_grad_enabled(grad_enabled and how is None):
                for p, attrs in ops:
                    t = dispatch(p, (t,), attrs)
        if how == "detach":
            t = t.detach()
        elif how == "data":
            t = t.data
        results[k] = t
    return results
