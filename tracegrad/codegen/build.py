"""Compile the fused graphs of one compiled signature (forward and backward) into programs
sharing one LLVM module: assign buffer slots, emit LLVM (kernels, matrix products, the driver's
segments), optimize and JIT once."""
from functools import partial

from ..ir.passes.schedule import settle
from .driver import body_call, entry_function, gemm_call, gemm_plan, gemm_slots, segment_function, step_function
from .engine import compile_module
from .llvm import ModuleBuilder
from .runtime import Program, splits
from .slots import per_graph
from .stream import streamed


def build_programs(graphs, fused, inplace_pairs=None):
    """[Program or None] for each graph (None passes through), the module's LLVM text and its
    engine. fused[g]: graph g's (kernels, aliases) as ir/passes/fusion.py's `fuse` returns them.
    inplace_pairs[g]: (output index, input index) pairs of graph g that may share memory (see
    slots.inplace_slots)."""
    mb = ModuleBuilder()
    plans = per_graph(partial(_add_graph, mb), graphs, fused, inplace_pairs)
    text = mb.text()
    engine = compile_module(text)
    progs = [None if p is None else Program(*p[:7], (text, *p[7:]), engine) for p in plans]
    return progs, text, engine


def _add_graph(mb, g, kernels, aliases, slots, inplace, label):
    """Add graph g's kernels, thread entries and segments to module `mb`; returns the plan its
    Program is made from once the module is compiled."""
    gemm, calls, names = gemm_slots(len(slots)), {}, {}
    # a body addresses memory: an output written into an input is the input's pointer (never a
    # second `noalias` pointer to the same memory, which lets LLVM reorder the loads and stores)
    in_memory = {vid: inplace.get(slot, slot) for vid, slot in slots.items()}
    stream = streamed(g, kernels, aliases, slots, inplace)
    settle(kernels, stream)         # register transposes where the outputs stream (ir/passes/schedule.py)
    for j, k in enumerate(kernels):
        c = f"c{j}"
        if k.kind in ("loop", "reduce_acc"):
            body, args = mb.kernel(k, in_memory, f"{label}_k{j}", stream)
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
    return g, kernels, aliases, slots, names, inplace, steps, step_text, f"{label}_step"


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
