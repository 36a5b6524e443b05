"""Compile the fused graphs of one compiled signature (forward and backward) into programs
sharing one LLVM module: assign buffer slots, emit LLVM (kernels, matrix products, the driver's
segments), optimize and JIT once."""
from ..ir.kernels import contiguous_strides, loads
from .driver import body_call, entry_function, gemm_call, gemm_plan, gemm_slots, segment_function, step_function
from .engine import compile_module
from .llvm import ModuleBuilder
from .runtime import Program, splits


def build_programs(graphs, fused, inplace_pairs=None):
    """[Program or None] for each graph (None passes through), the module's LLVM text and its
    engine. fused[g]: graph g's (kernels, aliases) as ir/passes/fusion.py's `fuse` returns them.
    inplace_pairs[g]: (output index, input index) pairs of graph g that may share memory (see
    inplace_slots)."""
    mb = ModuleBuilder()
    plans = []
    for gi, g in enumerate(graphs):
        if g is None:
            plans.append(None)
            continue
        kernels, aliases = fused[gi]
        slots = buffer_slots(g, kernels)
        label = "forward" if len(plans) == 0 else "backward" if len(plans) == 1 else f"graph{len(plans)}"
        gemm, calls, names = gemm_slots(len(slots)), {}, {}
        inplace = inplace_slots(g, kernels, aliases, slots, inplace_pairs[gi] if inplace_pairs else ())
        # a body addresses memory: an output written into an input is the input's pointer (never a
        # second `noalias` pointer to the same memory, which lets LLVM reorder the loads and stores)
        in_memory = {vid: inplace.get(slot, slot) for vid, slot in slots.items()}
        for j, k in enumerate(kernels):
            c = f"c{j}"
            if k.kind in ("loop", "reduce_acc"):
                body, args = mb.kernel(k, in_memory, f"{label}_k{j}")
                calls[j] = body_call(c, body, args, hi=str(k.parallel_extent()))
                if splits(k):           # an entry for the threads' chunks
                    names[j] = f"{label}_k{j}"
                    mb.function(entry_function(names[j], body, args))
            elif (plan := gemm_plan(k)) is not None:
                calls[j] = gemm_call(c, k, plan, slots, gemm[plan["dtype"]])
        steps = segments(kernels, calls, names, label)
        for step in steps:
            if step[0] == "native":
                mb.function(segment_function(step[1], [calls[j] for j in step[2]]))
        native = sorted((j, c) for j, c in calls.items() if j not in names)
        step_text = step_function(f"{label}_step", native) if native else None
        plans.append((g, kernels, aliases, slots, names, inplace, steps,
                      step_text, f"{label}_step"))
    text = mb.text()
    engine = compile_module(text)
    progs = [None if p is None else Program(*p[:7], (text, *p[7:]), engine) for p in plans]
    return progs, text, engine


def segments(kernels, calls, names, label):
    """The program's steps: ("native", segment name, [kernel indices]) for each run of kernels with
    native code (`calls`) that runs on the calling thread (see driver.py), ("chunks", j) for a
    kernel split over the thread pool (entry function `names[j]`), ("host", j) for a kernel run by
    NumPy."""
    steps = []
    for j, k in enumerate(kernels):
        if j in names:
            steps.append(("chunks", j))
        elif j not in calls:
            steps.append(("host", j))
        elif steps and steps[-1][0] == "native":
            steps[-1][2].append(j)
        else:
            steps.append(("native", f"{label}_s{sum(s[0] == 'native' for s in steps)}", [j]))
    return steps


def buffer_slots(graph, kernels):
    """{id(Value): slot}: the graph's inputs, then each kernel's outputs, numbered in that order."""
    slots = {}
    for v in graph.inputs:
        slots.setdefault(id(v), len(slots))
    for k in kernels:
        for v in k.outputs:
            slots.setdefault(id(v), len(slots))
    return slots


def inplace_slots(graph, kernels, aliases, slots, pairs):
    """{slot of output: slot of input} for the (output index, input index) pairs — an updated
    parameter and the parameter — whose output a kernel can write straight into the input's
    memory. Safe when: a loop kernel computes the output in a map phase; every kernel that reads the
    input runs no later; inside that kernel the input is read only at the element being written,
    by phases up to the writing one; the input is not itself an output (saved or returned); the
    output is returned once."""
    out = {}
    producer = {id(v): j for j, k in enumerate(kernels) for v in k.outputs}
    last_read = {}
    for j, k in enumerate(kernels):
        for ld in k.reads:
            last_read[id(ld.buf)] = j
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
        if last_read.get(id(u), -1) > j:
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
