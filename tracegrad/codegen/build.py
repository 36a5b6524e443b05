"""Compile the graphs of one compiled signature (forward and backward) into programs sharing
one LLVM module: fuse, assign buffer slots, emit LLVM, optimize and JIT once."""
from ..ir.passes.fusion import fuse
from .engine import compile_module
from .llvm import ModuleBuilder
from .runtime import Program


def build_programs(graphs, fuse_kernels=True):
    """[Program or None] for each graph (None passes through), and the module's LLVM text."""
    mb = ModuleBuilder()
    plans = []
    for g in graphs:
        if g is None:
            plans.append(None)
            continue
        kernels, aliases = fuse(g, fuse_kernels)
        slots = {}
        for v in g.inputs:
            slots.setdefault(id(v), len(slots))
        for k in kernels:
            for v in k.outputs:
                slots.setdefault(id(v), len(slots))
        label = "forward" if len(plans) == 0 else "backward" if len(plans) == 1 else f"graph{len(plans)}"
        names = {id(k): mb.kernel(k, slots, f"{label}_k{j}") for j, k in enumerate(kernels)
                 if k.kind in ("loop", "reduce_acc")}
        plans.append((g, kernels, aliases, slots, names))
    text = mb.text()
    engine = compile_module(text)
    progs = [None if p is None else Program(*p, engine) for p in plans]
    return progs, text, engine
