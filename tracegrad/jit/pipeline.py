"""The stage list of one compiled signature, top to bottom."""
import copy

import numpy as np

from ..ir.interpret import run as interpret_run
from ..ir.passes import optimize
from ..ir.passes.autodiff import reverse_mode
from ..ir.passes.remat import rematerialize
from .. import logs
from ..autograd import FREED_MESSAGE, is_grad_enabled
from ..ops import PRIMS
from ..symint import LateGuard, using
from ..tensor import TraceError
from .capture import Capture
from ..backends.cuda.run import choose_backend
from .writeback import protect_reads


# the errors of a backward through the traced graph that eager raises only at backward()
REFUSED = ("one of the variables needed for gradient computation has been modified by an inplace", FREED_MESSAGE)


class Stages:
    """What the pipeline produced: the capture, each stage's graphs, the executables; `sizes`: the
    symbol values its graphs were instantiated with (empty: traced with plain sizes); `finished`:
    lowered already (a symbolic trace's programs, shared by every set of sizes: dynamic.py)."""
    sizes = {}
    finished = False
    shape_env = None    # a symbolic trace's ShapeEnv: later compiles (joined, partial backward) record guards there
    shared = None       # a symbolic trace's dict of those later compiles, shared by its entries per sizes


def compile_call(fn, name, backend, fuse, args, kwargs, leaves, paths, runs=None):
    """The stages of fn's signature; the trace calls `runs` in fn's place where given."""
    return finish(trace_call(fn, name, backend, args, kwargs, leaves, paths, runs), fuse)


def trace_call(fn, name, backend, args, kwargs, leaves, paths, runs=None, shapes=None):
    """The stages up to the traced forward graph and its backward graph (reverse mode); `shapes`:
    the symbolic shapes of some tensor arguments (under the active symint.ShapeEnv)."""
    s = Stages()
    s.capture = cap = Capture(fn, name, args, kwargs, leaves, paths, runs, shapes)      # trace
    s.backend, s.device = choose_backend(backend, name, cap.tracer.order)     # where it runs
    s.traced, s.saved_at = cap.graph, len(cap.graph.outputs)
    s.backward = s.refused = None
    logs.lap("trace")
    if is_grad_enabled():           # reverse mode (also after a backward inside: a gradient penalty's
        tensor_outs = [(i, st) for kind, i, st in cap.out_plan if kind == "tensor"]    # create_graph)
        try:
            s.backward = reverse_mode(cap.tracer, tensor_outs, name)
        except RuntimeError as e:   # a saved value was updated in place, or a backward inside freed the
            if not str(e).startswith(REFUSED):      # graph: eager raises at backward()
                raise
            s.refused = str(e)
        if s.backward is None and s.refused is None:    # outputs need grad, but no input gets any:
            s.refused = False                           # they still require grad, as eagerly
    if s.backward is not None:
        s.refused = _reads_updated_memory(cap, s.backward.saved)
        if s.refused:
            s.backward = None
        else:
            cap.graph.outputs.extend(s.backward.saved)
    s.traced.n_saved = len(s.traced.outputs) - s.saved_at
    logs.lap("autodiff")
    return s


def finish(s, fuse):
    """The stages after reverse mode: optimize, remat, fuse and lower the traced graphs of `s`."""
    cap = s.capture
    fwd = optimize(s.traced)                                                   # optimize
    if fwd is s.traced:             # a graph no pass changed comes back as it is: the stages stay apart
        fwd = fwd.copy()
    bwd = optimize(s.backward.graph) if s.backward is not None else None
    logs.lap("optimize")
    if bwd is not None:                                                        # remat, optimize
        new_fwd, new_bwd = rematerialize(fwd, bwd, s.saved_at, len(s.backward.diff_outputs))
        if new_bwd is not bwd:
            fwd, bwd = optimize(new_fwd), optimize(new_bwd)
        logs.lap("remat")
    fwd = protect_reads(fwd, cap.n_user, s.saved_at, cap.written)             # before write-back
    logs.lap("protect reads")
    if bwd is not None:             # its return line names the input each gradient belongs to
        bwd.grads_of = [e.value.name for e in s.backward.targets]
    s.fwd, s.bwd = fwd, bwd
    for g in (s.traced, fwd):       # printed apart: `return results; saved values`
        g.n_saved = len(g.outputs) - s.saved_at
    s.programs, s.llvm_text, s.disk_hit, (s.run_fwd, s.run_bwd) = lower([fwd, bwd], s.backend, s.device, fuse,
                                                                     [cap.inplace, ()])
    s.finished = True
    return s


def instantiate(s, sizes):
    """A copy of traced stages `s` (symbolic shapes) with every symbol bound by `sizes` {name: int}:
    the graphs' shapes and attributes plain ints, each checked against its primitive's shape rule
    (a size concretized without a guard shows there as a disagreement, not as a wrong result)."""
    from ..ir.verify import verify
    out = Stages()
    out.__dict__.update(s.__dict__)
    out.sizes = dict(sizes)
    out.traced = verify(s.traced.substitute(sizes))
    if s.backward is not None:
        out.backward = copy.copy(s.backward)
        out.backward.graph = verify(s.backward.graph.substitute(sizes))
    return out


def lower(graphs, backend, device, fuse, inplace):
    """(programs, LLVM text, disk hit, runs) of `graphs` (None passes through) on `backend`: fused,
    then scheduled and built for llvm, planned and built for cuda (programs: one per graph), run by the interpreter
    otherwise (programs None). runs: each graph's callable on a list of arrays (for cuda: device
    arrays, and host arrays it copies to the device: device.DeviceInputs)."""
    if backend not in ("llvm", "cuda"):
        return None, None, False, [None if g is None else executable(g, backend, device) for g in graphs]
    from ..ir.passes.fusion import fuse as fuse_graph
    fused = [None if g is None else fuse_graph(g, fuse, half=backend == "cuda") for g in graphs]
    logs.lap("fuse")
    text, disk_hit = None, False
    if backend == "llvm":           # the CPU's schedule pass; the cuda target plans its own (backends/cuda/plan.py)
        from ..backends.cpu.plan import schedule
        for kernels_aliases in filter(None, fused):
            schedule(kernels_aliases[0])
        logs.lap("schedule")
        from ..backends.cpu import build_programs
        programs, text, engine = build_programs(graphs, fused, inplace)
        disk_hit = engine.disk_hit
    else:
        from ..backends.cuda.program import build_device_programs
        from ..backends.cuda.run import cuda_ops, device_run
        programs = build_device_programs(graphs, fused, inplace, cuda_ops())
        logs.lap("cuda kernels")
        if logs.enabled("kernels"):
            for label, p in zip(("forward", "backward"), programs):
                for j, k in enumerate(p.kernels if p is not None else ()):
                    logs.say("kernels", f"{label} k{j} {k.kind} ops={'+'.join(k.ops()) or 'copy'} on cuda")
        return programs, text, disk_hit, [None if p is None else device_run(p) for p in programs]
    return programs, text, disk_hit, [None if p is None else p.run for p in programs]


def partial_backward(bwd, present, backend, device, fuse):
    """(programs, graph, run, absent) of backward graph `bwd` for the cotangents `present[i]` True
    only (ir/passes/cotangents.py): programs as `lower` gives them ([None, program] for llvm and
    cuda: the backward's place), `absent` the positions of the gradients that are None."""
    from ..ir.passes.cotangents import drop_cotangents
    with logs.compiling(bwd.name, f"backward for gradients {[i for i, p in enumerate(present) if p]} only"):
        graph, absent = drop_cotangents(bwd, present)
        graph = optimize(graph)
        graph.grads_of = bwd.grads_of
        logs.lap("optimize")
        programs, _, _, runs = lower([None, graph], backend, device, fuse, [(), ()])
    return programs, graph, runs[1], absent


JOIN_GAIN = 0.1     # the fraction of the bytes moved apart that joining must save


def forward_with_gradient(entry):
    """(program, run, keeps_saved) computing entry's forward and the gradients of its one one-element
    result (ir/passes/join.py), or None where joining saves under JOIN_GAIN of the bytes the forward
    and backward programs move apart (nothing to share: matrix products, no common input), or where
    a gradient would not be a fresh array of its own (an input passed through, a forward value).
    Whether it pays is decided with the saved values written (their kernels as fused), as the apart
    forward writes them; the program then writes none (`keeps_saved` False: the node recomputes them
    from the inputs in the rare use that needs them, jit/node.py) unless the forward draws random
    numbers, which a second run would draw anew: an activation's loss (tanh gelu's, fwd+bwd,
    (1000, 999) float32) then moves 12 MB per call, not 28. Decided without them, W6's broadcast
    loss joined into one accumulation of four sums over different axes, 2.7x slower than apart.
    None too where joining would decide on a symbolic size (LateGuard: a guard no other size checks)."""
    with logs.compiling(entry.name, "forward with gradient"), using(entry.shape_env):
        try:
            return _forward_with_gradient(entry)
        except LateGuard:
            return None


def _forward_with_gradient(entry):
    from ..ir.passes.fusion import fuse
    from ..ir.passes.join import forward_with_gradient as join
    apart = sum(k.bytes_moved() for p in entry.programs for k in p.kernels)
    graph = optimize(join(entry.fwd, entry.bwd, entry.n_diff, entry.saved_at))
    if sum(k.bytes_moved() for k in fuse(graph, entry.cf.fuse)[0]) > (1 - JOIN_GAIN) * apart:
        return None
    keep = any(PRIMS[n.op].effect for n in entry.fwd.nodes if n.op in PRIMS)
    if not keep:
        graph = optimize(join(entry.fwd, entry.bwd, entry.n_diff, entry.saved_at, keep_saved=False))
    programs, _, _, runs = lower([graph], entry.backend, entry.device, entry.cf.fuse, [()])
    program, n = programs[0], len(entry.fwd.outputs) if keep else entry.saved_at
    grads = list(range(n, len(graph.outputs)))
    slots = [slot for slot, _ in program.outputs]
    if not set(grads) <= program.fresh_outputs or any(slots.count(slots[j]) > 1 for j in grads):
        return None
    return program, runs[0], keep


def _reads_updated_memory(cap, saved):
    """Eager's error, when the backward would read an input whose memory the call updated through
    another input sharing its version counter (a view of it), else None. Through one that does not
    (two tensors over overlapping arrays), eager's backward reads that memory as it is at backward
    time, which the graph cannot express (it knows neither how the arrays overlap nor later
    writes): refused at the call, naming both."""
    from .writeback import views_of
    order = cap.tracer.order
    updated = [order[ii] for _, ii in cap.updates]
    for i in sorted(cap.shared - {ii for _, ii in cap.updates}):
        e = order[i]
        if not any(views_of(v, {id(e.value)}) for v in saved):
            continue
        writers = [u for u in updated if np.may_share_memory(u.real._data, e.real._data)]
        if not any(u.real._ver is e.real._ver and u.standin._ver[0] for u in writers):
            raise TraceError(f"compiled function {cap.graph.name}: its backward reads {e.value.name}, whose memory "
                             f"the call updates in place through {' and '.join(u.value.name for u in writers)} "
                             f"(another tensor over overlapping memory, with its own version counter); eagerly the "
                             f"backward would read that memory as it is when backward() runs, which a compiled "
                             f"function cannot follow. Pass {e.value.name}.clone(), or a view of the updated "
                             f"tensor taken inside the function")
            return (f"one of the variables needed for gradient computation has been modified by an inplace "
                    f"operation: [{e.real.dtype} {list(e.real.shape)}], input {e.value.name} of compiled "
                    f"{cap.graph.name}, shares memory with an input the call updated in place")
    return None


def executable(graph, backend, device=None):
    """The callable running `graph` on a list of arrays with the chosen backend (interpret on cuda
    arrays: the oracle runs on host copies, its results go back to the device)."""
    if backend == "interpret" and device is not None and device.type == "cuda":
        from ..backends.cuda.run import interpret_on_host
        return lambda arrays: interpret_on_host(graph, arrays)
    if backend == "interpret":
        return lambda arrays: interpret_run(graph, *arrays)
    raise ValueError(f"backend {backend!r} is not available")
