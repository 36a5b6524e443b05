"""Run under numba's simulator (NUMBA_ENABLE_CUDASIM=1), kernel launches made no-ops: compile the kernels of the GPU goals' shapes
(G1's tanh gelu, G2's softmax, G3's layer norm forward and backward, a float32 row sum) and write each
generated launch as a ptxcheck recipe line (JSON) to the file named by argv[1]: {"kind": ..., "fn":
recipe, "args": argument types}. tests/test_cuda_ptx_kernels.py compiles them to PTX and reads it."""
import json
import sys

import numpy as np

import tracegrad as tg

ROWS, COLS = 64, 1024          # every size a multiple of 4: vector loads allowed


def gelu(x):
    return 0.5 * x * (1 + (0.7978845608028654 * (x + 0.044715 * x * x * x)).tanh())


def softmax(x):
    e = (x - x.amax(dim=1, keepdim=True)).exp()
    return e / e.sum(dim=1, keepdim=True)


def layernorm_loss(x, w, b, g):
    mu = x.mean(dim=1, keepdim=True)
    xc = x - mu
    y = xc / ((xc * xc).mean(dim=1, keepdim=True) + 1e-5).sqrt() * w + b
    return (y * g).sum()


def row_sum(x):
    return x.sum(dim=1)


def kinds():
    r = np.random.default_rng(0)

    def t(*shape, grad=False):
        return tg.tensor(r.standard_normal(shape).astype(np.float32), device="cuda", requires_grad=grad)
    x = t(ROWS, COLS)
    yield "gelu", tg.compile(gelu), (t(ROWS * COLS),), False
    yield "softmax", tg.compile(softmax), (x,), False
    yield "row_sum", tg.compile(row_sum), (x,), False
    yield "layernorm", tg.compile(layernorm_loss), (t(ROWS, COLS, grad=True), t(COLS, grad=True),
                                                     t(COLS, grad=True), x), True


def recipes(kind, f):
    for entry in f.cache.values():
        for prog in filter(None, entry.programs or ()):
            for cks in (prog.launchers.get(id(k)) for k in prog.kernels):
                for ck in cks or ():
                    fn = {"module": f"tracegrad_cuda_{ck.name}", "qualname": ck.name, "line": 1, "cells": [],
                          "source": ck.source}
                    args = [["array", b.dtype.name, 1, "C"] for b in ck.buffers]
                    args += [["array", np.dtype(d).name, 1, "C"] for _, d in (ck.scratch.specs if ck.scratch else ())]
                    yield {"kind": kind, "name": ck.name, "fn": fn, "args": args, "block": ck.block}


def main(path):
    from numba.cuda.simulator import kernel as sim
    sim.FakeCUDAKernel.__call__ = lambda self, *args: None      # the kernels' text is wanted, not their values
    with open(path, "w") as fh:
        for kind, f, args, backward in kinds():
            out = f(*args)
            if backward:
                out.backward()
            for rec in recipes(kind, f):
                fh.write(json.dumps(rec) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
