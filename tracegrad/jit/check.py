"""check=True: run a compiled program beside the interpret backend and name the first kernel whose
output differs."""
import numpy as np

from ..errors import CheckError
from ..ir.interpret import values


def checked_run(programs, which, graph, arrays):
    """Outputs of graph `which` run on `arrays`; CheckError names the first differing kernel with the
    ops fused into it."""
    prog = programs[which] if programs is not None else None
    to_host = getattr(getattr(prog, "ops", None), "to_host", None)     # a device program: compare on the host
    ref = values(graph, *(arrays if to_host is None else
                          [a if isinstance(a, np.ndarray) else to_host(a) for a in arrays]))
    if prog is None:
        return tuple(ref[id(v)] for v in graph.outputs)
    got = {}
    outs = prog.run(arrays, capture=got)
    for j, k in enumerate(prog.kernels):
        for v in k.outputs:
            a, b = got[id(v)], ref[id(v)]
            if a.shape != b.shape or not _close(a, b):
                diff = np.max(np.abs(a.astype(np.float64) - b)) if a.shape == b.shape and a.size else "shape"
                raise CheckError(f"{graph.name}: kernel k{j} [{k.kind}] output {v.type} differs from the interpret "
                                 f"backend (max abs diff {diff}); ops fused into it: {', '.join(k.ops()) or 'copy'}")
    return outs


def _close(a, b):
    if a.dtype.kind == "f":
        tol = 1e-3 if a.dtype == np.float32 else 1e-9
        return np.allclose(a, b, rtol=tol, atol=tol, equal_nan=True)
    return np.array_equal(a, b)
