"""What a compiled signature looks like inside: IR text of each stage, kernels, DOT, profiles, dumps."""
import os
import sys

import numpy as np

from ..ir import print_graph
from ..symint import evaluate

STAGES = "traced, forward, backward, kernels, llvm, cuda"
SYMBOLIC_STAGES = ("traced", "forward", "backward")     # a symbolic entry's own; the others: a program's


def stage_text(entry, stage, source=False, optimized=False):
    """The text of one stage of `entry` (see SPEC §5)."""
    if stage == "traced":
        return print_graph(entry.traced, source=source)
    if stage == "forward":
        return print_graph(entry.fwd, source=source)
    if stage == "backward":
        if entry.bwd is None:
            raise ValueError(f"{entry.name} has no backward graph for these arguments: no output needs a "
                             f"gradient (pass tensors with requires_grad=True)")
        return print_graph(entry.bwd, source=source)
    if stage == "kernels":
        return kernels_text(entry)
    if stage == "llvm":
        if entry.llvm_text is None:
            raise ValueError(f"stage 'llvm' needs backend='llvm'; {entry.name} uses {entry.backend!r}")
        if optimized:
            from ..backends.cpu.engine import optimize
            return str(optimize(entry.llvm_text))
        return entry.llvm_text
    if stage == "cuda":
        if entry.backend != "cuda":
            raise ValueError(f"stage 'cuda' needs backend='cuda' (cuda tensors); {entry.name} uses {entry.backend!r}")
        return cuda_text(entry)
    raise ValueError(f"unknown stage {stage!r}; expected one of {STAGES}")


def cuda_text(entry):
    """The generated numba.cuda kernels of the forward and backward programs, each under a header
    naming its kernel, kind and fused ops (library kernels: the call they make)."""
    out = []
    for label, prog in zip(("forward", "backward"), entry.programs):
        if prog is None:
            continue
        for j, kind, text in prog.sources():
            k = prog.kernels[j]
            out.append(f"# {entry.name} ({label}) k{j} [{kind}] ops={'+'.join(k.ops()) or 'copy'}\n{text.rstrip()}")
    return "\n\n".join(out)


def fused_kernels(entry):
    """[(label, graph, kernels)] of the forward and backward graphs: the programs' own kernels; for
    the interpret backend, fused once on first request."""
    if entry._kernels is None:
        graphs = [("forward", entry.fwd), ("backward", entry.bwd)]
        if entry.programs is not None:
            entry._kernels = [(label, g, p.kernels) for (label, g), p in zip(graphs, entry.programs) if g is not None]
        else:
            from ..ir.passes.fusion import fuse
            from ..backends.cpu.plan import schedule
            entry._kernels = [(label, g, schedule(fuse(g, entry.cf.fuse)[0])) for label, g in graphs if g is not None]
    return entry._kernels


def kernels_text(entry):
    """The fusion groups of the forward and backward graphs: ops, spaces and bytes moved; then the
    joined program's, once the entry's calls compute the gradient with the forward (jit/joined.py)."""
    from ..ir.kernels import kernels_text as text
    blocks = [text(f"{g.name} ({label})", kernels) for label, g, kernels in fused_kernels(entry)]
    if getattr(entry, "joined", None):
        program = entry.joined_program
        blocks.append(text(f"{program.graph.name} (forward with gradient, run while calls are followed by "
                           f"backward())", program.kernels))
    return "\n".join(blocks)


def profile_rows(entry, leaves, repeat, plot=None):
    """Per kernel of the forward program: kernel, kind, ops, median time, bytes moved, GB/s, and the
    roofline figures (tg.viz.roofline); `plot` is a path for the roofline SVG."""
    if entry.programs is None:
        raise ValueError(f"profile() needs backend='llvm' or 'cuda'; {entry.name} uses {entry.backend!r}")
    arrays = [t._data for t in entry.input_tensors(leaves)]
    if entry.on_device:
        arrays = entry.device_inputs(arrays)
    prog = entry.programs[0]
    runs = []
    for _ in range(repeat):
        t = []
        prog.run(arrays, timings=t, sizes=entry.sizes)
        runs.append(t)
    rows = []
    env = prog.env if getattr(prog, "symbolic", False) else {}     # symbolic sizes: the profiled call's
    for j, k in enumerate(prog.kernels):
        sec = float(np.median([r[j] for r in runs]))
        moved = evaluate(k.bytes_moved(), env)
        rows.append({"kernel": f"k{j}", "kind": k.kind, "ops": k.ops(), "time": sec, "bytes": moved,
                     "GB/s": moved / sec / 1e9 if sec > 0 else float("inf")})
    if entry.on_device:             # this machine's roofline is the cpu's
        if plot:
            raise ValueError("profile(plot=...) draws the cpu's roofline; for backend='cuda' use the rows' GB/s")
        return rows
    from ..viz import roofline
    for row, k in zip(rows, prog.kernels):
        row["flops"] = evaluate(roofline.kernel_flops(k), env)
    roofline.annotate(rows, prog.kernels)
    if plot:
        roofline.write_roofline(rows, plot, f"{entry.name}: forward kernels on the roofline")
    return rows


def to_dot(graph):
    """Graphviz DOT text of a graph; edges labelled with value types."""
    from ..ir.printer import names
    nm = names(graph)
    lines = [f'digraph "{graph.name}" {{', "  rankdir=TB;"]
    for v in graph.inputs:
        lines.append(f'  "v{id(v)}" [shape=box, label="%{nm[id(v)]}: {v.type}"];')
    for n in graph.nodes:
        lines.append(f'  "v{id(n.out)}" [label="%{nm[id(n.out)]} = {n.op}\\n{n.out.type}"];')
        for i in n.inputs:
            lines.append(f'  "v{id(i)}" -> "v{id(n.out)}" [label="{i.type}"];')
    for k, v in enumerate(graph.outputs):
        lines.append(f'  "out{k}" [shape=doublecircle, label="out {k}"];')
        lines.append(f'  "v{id(v)}" -> "out{k}";')
    lines.append("}")
    return "\n".join(lines)


def drawing(entry, stage):
    """The tg.viz.Drawing of a stage (the IR graph; for "kernels", both graphs with kernel boxes)."""
    from ..viz import draw_ir
    if stage == "kernels":
        return draw_ir(fused_kernels(entry), f"{entry.name} (kernels)")
    if stage not in ("traced", "forward", "backward"):
        raise ValueError(f"draw: unknown stage {stage!r}; expected traced, forward, backward or kernels")
    stage_text(entry, stage)            # the same error as ir() for a missing backward graph
    graph = {"traced": entry.traced, "forward": entry.fwd, "backward": entry.bwd}[stage]
    return draw_ir([(stage, graph, None)], f"{entry.name} ({stage})")


def dump(entry, n):
    """TRACEGRAD_DUMP=stage,...: print each stage of a new entry to stderr, or write it under
    TRACEGRAD_DUMP_DIR as NAME.N.STAGE.txt (N: the trace count)."""
    want = os.environ.get("TRACEGRAD_DUMP", "")
    if not want:
        return
    out_dir = os.environ.get("TRACEGRAD_DUMP_DIR")
    for stage in [s.strip() for s in want.split(",") if s.strip()]:
        if stage == "backward" and entry.bwd is None:
            continue
        shown = entry.latest() if hasattr(entry, "latest") and stage not in SYMBOLIC_STAGES else entry
        try:
            text = stage_text(shown, stage)
        except ValueError as e:
            text = f"# {e}"
        if out_dir:
            os.makedirs(out_dir, exist_ok=True)
            with open(os.path.join(out_dir, f"{entry.name}.{n}.{stage}.txt"), "w") as fh:
                fh.write(text + "\n")
        else:
            print(f"# ---- {entry.name}: {stage}\n{text}", file=sys.stderr)
