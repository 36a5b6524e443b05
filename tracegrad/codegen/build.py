"""Compile the fused graphs of one compiled signature (forward and backward) into programs
sharing one LLVM module: assign buffer slots, emit LLVM, optimize and JIT once."""
from ..ir.kernels import contiguous_strides, loads
from .engine import compile_module
from .llvm import ModuleBuilder
from .runtime import Program


def build_programs(graphs, fused, inplace=None):
    """[Program or None] for each graph (None passes through), the module's LLVM text and its
    engine. fused[g]: graph g's (kernels, aliases) as ir/passes/fusion.py's `fuse` returns them.
    inplace[g]: (output index, input index) pairs of graph g that may share memory (see
    inplace_slots)."""
    mb = ModuleBuilder()
    plans = []
    for gi, g in enumerate(graphs):
        if g is None:
            plans.append(None)
            continue
        kernels, aliases = fused[gi]
        slots = {}
        for v in g.inputs:
            slots.setdefault(id(v), len(slots))
        for k in kernels:
            for v in k.outputs:
                slots.setdefault(id(v), len(slots))
        label = "forward" if len(plans) == 0 else "backward" if len(plans) == 1 else f"graph{len(plans)}"
        names = {id(k): mb.kernel(k, slots, f"{label}_k{j}") for j, k in enumerate(kernels)
                 if k.kind in ("loop", "reduce_acc")}
        pairs = inplace[gi] if inplace else ()
        plans.append((g, kernels, aliases, slots, names, inplace_slots(g, kernels, aliases, slots, pairs)))
    text = mb.text()
    engine = compile_module(text)
    progs = [None if p is None else Program(*p, engine) for p in plans]
    return progs, text, engine


def inplace_slots(graph, kernels, aliases, slots, pairs):
    """{slot of output: slot of input} for the (output index, input index) pairs — an updated
    parameter and the parameter — whose output a kernel can write straight into the input's
    memory. Safe when: a loop kernel computes the output in a map phase; every kernel that reads the
    input runs no later; inside that kernel the input is read only at the element being written,
    by phases up to the writing one; the input is not itself an output (saved or returned); the
    output is returned once."""
    out = {}
    producer = {id(v): j for j, k in enumerate(kernels) for v in k.outputs}
    returned = {}
    for v in graph.outputs:
        returned[id(v)] = returned.get(id(v), 0) + 1
    for oi, ii in pairs:
        v, u = graph.outputs[oi], graph.inputs[ii]
        j = producer.get(id(v))
        if j is None or id(v) in aliases or returned[id(v)] != 1 or id(u) in returned or v.shape != u.shape \
                or v.dtype is not u.dtype:
            continue
        k = kernels[j]
        if k.kind != "loop" or k.shape != u.shape:
            continue
        if any(ld.buf is u for later in kernels[j + 1:] for ld in later.reads):
            continue
        writer = next(p for p, ph in enumerate(k.phases) for w, _ in ph.outputs if w is v)
        if k.phases[writer].kind != "map":
            continue
        ok = True
        for p, ph in enumerate(k.phases):
            for _, tree in ph.outputs:
                for ld in loads(tree):
                    if ld.buf is u and (p > writer or ld.offset or tuple(ld.strides) != contiguous_strides(u.shape)):
                        ok = False
        if ok:
            out[slots[id(v)]] = slots[id(u)]
    return out
