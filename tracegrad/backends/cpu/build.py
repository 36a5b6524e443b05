"""Compile the fused graphs of one compiled signature (forward and backward) into programs
sharing one LLVM module: assign buffer slots, emit LLVM (kernels, parallel regions, matrix
products, the driver's segments), optimize and JIT once."""
from functools import partial

from ... import logs
from .driver import (blas, body_call, entry_function, gemm_call, gemm_plan, gemm_slots, pool_slots, region_slot,
                     segment_function, sized_plan, sizes_slot, step_function, table_size)
from .gemm import one_thread, operand_slots, per_call, region_entry, solo
from .gemm import split as gemm_split, varies as gemm_varies
from .gemm_sized import sized_size
from .engine import compile_module
from .llvm import ModuleBuilder
from .plan import plan_program
from .regions import Chunks, group_function, groups, region_call, region_functions, split_at_hints, splits
from .runtime import Program
from .scatter import scatter_call, scatter_function, scatter_plan
from .sizes import Symbols, driver_operand
from ...lowering.slots import per_graph


def build_programs(graphs, fused, inplace_pairs=None):
    """[Program or None] for each graph (None passes through), the module's LLVM text and its
    engine. fused[g]: graph g's (kernels, aliases) as ir/passes/fusion.py's `fuse` returns them.
    inplace_pairs[g]: (output index, input index) pairs of graph g that may share memory (see
    slots.inplace_slots)."""
    mb = ModuleBuilder(Symbols(graphs))
    plans = per_graph(partial(_add_graph, mb), graphs, fused, inplace_pairs)
    text = mb.text()
    logs.lap("emit LLVM")
    engine = compile_module(text)
    logs.lap("LLVM", "object code from the disk cache" if engine.disk_hit else "optimized and compiled")
    progs = [None if p is None else Program(*p[:7], (text, *p[7:]), engine, mb.symbols.names) for p in plans]
    return progs, text, engine


def _add_graph(mb, g, kernels, aliases, slots, inplace, label):
    """Add graph g's kernels, thread entries, regions and segments to module `mb`; returns the plan
    its Program is made from once the module is compiled."""
    gemm, pool, calls, seg, regions, gemms = gemm_slots(len(slots)), pool_slots(len(slots)), {}, {}, {}, {}
    # a body addresses memory: an output written into an input is the input's pointer (never a
    # second `noalias` pointer to the same memory, which lets LLVM reorder the loads and stores)
    in_memory = {vid: inplace.get(slot, slot) for vid, slot in slots.items()}
    strategies = plan_program(g, kernels, aliases, slots, inplace)     # plan/: how each kernel runs
    loops = [j for j, k in enumerate(kernels) if k.kind in ("loop", "reduce_acc")]
    # small kernels sharing a region at the traced sizes (as a static compile there) stay in it; the others
    # of sizes known only at the call split per call (regions.py)
    shared = {run[0]: run for run in groups(kernels, [j for j in loops if split_at_hints(kernels[j], in_memory)],
                                            in_memory)}
    grouped = {m for run in shared.values() for m in run}
    cut = {j: Chunks(kernels[j], in_memory) for j in loops if j not in grouped and splits(kernels[j])}
    plans = {j: p for j, k in enumerate(kernels) if (p := gemm_plan(k)) is not None}
    cut.update({j: ch for j, p in plans.items() if (ch := gemm_split(p, blas()[1])) is not None})   # gemm.py
    split = [j for j, c in cut.items() if c.n > 1]
    first = sorted(split + list(shared))            # each region's first kernel, in order
    size = table_size(len(slots), len(first))
    sizes = sizes_slot(len(slots))
    for j, k in enumerate(kernels):
        c = f"c{j}"
        if k.kind in ("loop", "reduce_acc"):
            body, args, sized = mb.kernel(k, in_memory, f"{label}_k{j}", strategies[j])
            moved = mb.moved[f"{label}_k{j}"]
            lines = []
            hi = driver_operand(lines, c, k.parallel_extent(), mb.symbols.index, sizes)
            calls[j] = body_call(c, body, args, hi=hi, sizes=sizes if sized else None, lines=lines, moved=moved)
            if j in split:          # a parallel region: an entry for the threads' chunks
                name, regions[j] = f"{label}_k{j}", cut[j]
                regions[j].entry = name
                mb.function(entry_function(name, body, args, sizes if sized else None, moved))
                mb.function(region_functions(mb, name, regions[j]))
                seg[j] = region_call(c, name, regions[j], region_slot(len(slots), first.index(j)), pool, size)
        elif (plan := plans.get(j)) is not None:
            whole = partial(gemm_call, kernel=k, plan=plan, slots=slots, gemm_slot=gemm[plan["dtype"]],
                            park_slot=pool[0], symbol_index=mb.symbols.index, sizes=sizes)
            calls[j], gemms[j] = whole(c), plan
            sized = sized_plan(plan)
            if sized and blas()[1].get("set_threads"):
                # sizes known at the call, and too small to split at this call: BLAS on one thread too
                # (OpenBLAS's own threads spin after each threaded call: W4 dynamic=True took 6x the
                # step's CPU time, against the fused kernels and the pool)
                calls[j] = one_thread(c, gemm, calls[j])
            elif j not in split and solo(plan) and blas()[1].get("set_threads"):
                calls[j] = one_thread(c, gemm, calls[j])      # small and whole: no OpenBLAS threads either
            if j in split:          # chunks of batches, rows or columns: BLAS on one thread each
                name, regions[j] = f"{label}_k{j}", cut[j]
                regions[j].entry = name
                entry = mb.shared(name, partial(region_entry, plan=plan, chunks=cut[j], itype=blas()[0],
                                                reg_slots=operand_slots(k, slots, gemm[plan["dtype"]]),
                                                size=sized_size("c", mb.symbols.index, sizes) if sized else None))
                mb.function(region_functions(mb, name, regions[j]))
                seg[j] = region_call(c, name, regions[j], region_slot(len(slots), first.index(j)), pool, size, entry)
                if gemm_varies(plan):   # split or not, and the chunks, by the call's sizes
                    seg[j] = per_call(c, plan, cut[j], sized_size(c, mb.symbols.index, sizes), seg[j], whole(f"{c}u"))
                seg[j] = one_thread(c, gemm, seg[j])
        elif (sp := scatter_plan(k, in_memory)) is not None:     # an embedding's gradient: scatter.py
            name = f"{label}_k{j}"
            mb.function(scatter_function(name, sp))
            mb.index_error, mb.lowerings[name] = True, f"native scatter-add of {sp['count']} rows of {sp['width']}"
            calls[j] = scatter_call(c, name, sp, mb.symbols.index, sizes)
    for j, run in shared.items():   # small independent kernels: one region, a chunk each
        name, regions[j] = f"{label}_g{j}", Chunks(None, in_memory, run)
        mb.function(group_function(name, [calls[m] for m in run]))
        mb.function(region_functions(mb, name, regions[j]))
        seg.update({m: [] for m in run})
        seg[j] = region_call(f"c{j}", name, regions[j], region_slot(len(slots), first.index(j)), pool, size)
    seg = {j: seg.get(j, lines) for j, lines in calls.items()}
    steps = segments(kernels, seg, label)
    for step in steps:
        if step[0] == "native":
            mb.function(segment_function(step[1], [seg[j] for j in step[2]]))
    native = sorted((j, lines) if j not in split else (j, seg[j]) for j, lines in calls.items())
    step_text = step_function(f"{label}_step", native) if native else None
    if logs.enabled("kernels"):
        _say_kernels(mb, kernels, label, gemms, cut, split, shared)
    return g, kernels, aliases, slots, regions, inplace, steps, step_text, f"{label}_step"


def _say_kernels(mb, kernels, label, gemms, cut, split, shared):
    """TRACEGRAD_LOG=kernels: each kernel's kind, ops and how it runs."""
    grouped = {m: run for run in shared.values() for m in run}
    for j, k in enumerate(kernels):
        how = mb.lowerings.get(f"{label}_k{j}")
        if how is None:
            p = gemms.get(j)
            how = "host step (NumPy)" if p is None else \
                (f"BLAS {dict(float32='s', float64='d')[p['dtype']]}gemm {p['m']}x{p['n']}x{p['k']}"
                 + (f", batch {'x'.join(map(str, p['batch']))}" if p["batch"] else ""))
        if j in split:
            how += f"; {'up to ' if cut[j].symbolic() else ''}{cut[j].n} chunks over threads"
        elif j in grouped:
            how += f"; one region with {len(grouped[j]) - 1} other small kernel(s), a chunk each"
        logs.say("kernels", f"{label} k{j} {k.kind} ops={'+'.join(k.ops()) or 'copy'}: {how}")


def segments(kernels, calls, label):
    """The program's steps: ("native", segment name, [kernel indices]) for each run of kernels with
    native code (`calls`: loops, parallel regions, BLAS products; see driver.py), ("host", j) for a
    kernel run by NumPy."""
    steps = []
    for j, k in enumerate(kernels):
        if j not in calls:
            steps.append(("host", j))
        elif steps and steps[-1][0] == "native":
            steps[-1][2].append(j)
        else:
            steps.append(("native", f"{label}_s{sum(s[0] == 'native' for s in steps)}", [j]))
    return steps
