"""check=True: run a compiled program beside the interpret backend and name the first kernel whose
output differs.

Like is compared with like: the compiled program runs first, on the caller's arrays, as a normal
call would; the interpreter then runs on copies of the inputs taken before (the program may update
them in place) and takes each random draw (rand, randn, dropout's mask) from the compiled run, so
the generator advances once, as one eager call would move it.

A program of a symbolic trace (jit/dynamic.py) is checked at the call's sizes: it runs with them,
and the interpreter runs the graph with its symbols bound to them (never deciding on a symbol
outside the trace's ShapeEnv)."""
import numpy as np

from ..core import RNG, PRIMS
from ..errors import CheckError
from ..ir.interpret import evaluate


def checked_run(programs, which, graph, arrays, sizes=None):
    """Outputs of graph `which` run on `arrays`; CheckError names the first differing kernel with the
    ops fused into it. sizes: {symbol: int} of the call where `graph` has symbolic sizes."""
    prog = programs[which] if programs is not None else None
    if prog is None:
        return prog_free_run(graph, arrays, sizes)
    to_host = getattr(getattr(prog, "ops", None), "to_host", None)     # a device program: compare on the host
    host = [np.array(a) if isinstance(a, np.ndarray) or to_host is None else to_host(a) for a in arrays]
    gen, before = RNG[0], RNG[0].bit_generator.state
    got = {}
    outs = prog.run(arrays, capture=got, sizes=sizes)
    after = RNG[0], RNG[0].bit_generator.state
    RNG[0] = gen                       # a draw the run did not capture is drawn again from where it began
    gen.bit_generator.state = before
    try:
        ref = _values(graph, host, got, sizes)
    finally:
        RNG[0] = after[0]
        RNG[0].bit_generator.state = after[1]
    for j, k in enumerate(prog.kernels):
        for v in k.outputs:
            a, b = got[id(v)], ref[id(v)]
            if a.shape != b.shape or not _close(a, b):
                diff = np.max(np.abs(a.astype(np.float64) - b)) if a.shape == b.shape and a.size else "shape"
                raise CheckError(f"{graph.name}: kernel k{j} [{k.kind}] output {v.type} differs from the interpret "
                                 f"backend (max abs diff {diff}); ops fused into it: {', '.join(k.ops()) or 'copy'}")
    return outs


def prog_free_run(graph, arrays, sizes=None):
    """backend='interpret': the interpreter is the program."""
    ref = _values(graph, arrays, {}, sizes)
    return tuple(ref[id(v)] for v in graph.outputs)


def _values(graph, arrays, drawn, sizes=None):
    """Every value of graph on arrays ({id(Value): array}), random draws taken from `drawn` where it
    has them; a graph with symbolic sizes is evaluated as instantiated at `sizes` (its nodes' ids
    still key the result)."""
    if len(arrays) != len(graph.inputs):
        raise ValueError(f"graph {graph.name} takes {len(graph.inputs)} inputs, got {len(arrays)}")
    bound = graph
    if graph.symbols():
        if not sizes:
            raise ValueError(f"graph {graph.name} has symbolic sizes {sorted(graph.symbols())}: evaluating it "
                             f"needs the call's sizes")
        bound = graph.substitute(sizes)
    env = {id(v): np.asarray(a) for v, a in zip(graph.inputs, arrays)}
    with np.errstate(all="ignore"):         # IEEE results without warnings, as eager ops run
        for n, b in zip(graph.nodes, bound.nodes):
            p = PRIMS.get(n.op)
            if p is not None and p.effect and id(n.out) in drawn:
                env[id(n.out)] = drawn[id(n.out)]
            else:
                env[id(n.out)] = evaluate(b, [env[id(i)] for i in n.inputs])
    return env


TOLERANCE = {2: 1e-2, 4: 1e-3, 8: 1e-9}   # by a float's itemsize (float16 rounds each op to 2^-11)


def _close(a, b):
    if a.dtype.kind == "f":
        tol = TOLERANCE[a.dtype.itemsize]
        return np.allclose(a, b, rtol=tol, atol=tol, equal_nan=True)
    return np.array_equal(a, b)
