"""The programs whose kernels tests/test_cuda_ptx.py compiles to PTX: run under numba's simulator with
TRACEGRAD_RECORD_KERNELS=<file> (tracegrad/backends/cuda/ptxcheck.py records each distinct launch), at tiny
sizes. They launch every kind of kernel tracegrad has:

- eager: every primitive with a scalar lowering, for every dtype it covers (elementwise; reductions
  over the unit-stride axis, over another axis, and split over blocks), casts from every dtype,
  argmax/argmin, floor/round/floordiv/remainder, random draws, arange, copies of views, cat,
  integer indexing and its gradient, index_put, matrix products (the tiled kernel), the block
  scans of long rows;
- compiled: examples/gpu_check.py's correctness checks and its workloads G1-G5 (gelu, softmax,
  layernorm forward+backward, an MLP training step, the 20-op chain) compiled, an Adam
  training step compiled, and float16 programs fused as float32 ones (maps, rows with a row
  cache, tiled and split reductions, gradients), and dynamic=True programs (kernels taking their sizes).
"""
import math
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "examples")]

import tracegrad as tg  # noqa: E402
from tracegrad import scalar  # noqa: E402
from tracegrad.backends.cuda import plan  # noqa: E402
from tracegrad.backends.cuda import memory  # noqa: E402
from tracegrad.backends.cuda.eager import pointwise  # noqa: E402
from tracegrad.ops import PRIMS  # noqa: E402

RNG = np.random.default_rng(0)


def sample(dtype, shape):
    if dtype == "bool":
        return RNG.random(shape) < 0.5
    if dtype.startswith("int"):
        return RNG.integers(1, 5, shape).astype(dtype)
    return RNG.uniform(0.25, 2.0, shape).astype(dtype)


def dev(a):
    return memory.copy(np.ascontiguousarray(a), "device")


def arity(p):
    return scalar.arity(p.lower)


def eager_primitives():
    shape = (3, 5)
    for name, p in sorted(PRIMS.items()):
        if p.lower is None or p.kind not in ("elementwise", "reduction"):
            continue
        for dtype in p.dtypes:
            ins = [sample(dtype, shape) for _ in range(arity(p) if p.kind == "elementwise" else 1)]
            if name == "where":
                ins[0] = ins[0] > ins[0].mean() if dtype != "bool" else ins[0]
            targets = [d for d in p.dtypes if d != dtype][:1] if name == "cast" else [None]
            for to in targets:
                attrs = {"dtype": getattr(tg, to)} if to else {}
                calls = [attrs] if p.kind == "elementwise" else \
                    [{"axis": ax, "keepdims": False} for ax in ((1,), (0,))]     # one tile per row, tiles of 32 columns
                for a in calls:
                    try:
                        out_shape, out = p.rule([x.shape for x in ins], [tg.dtypes.from_numpy(x.dtype) for x in ins],
                                                **a)
                    except TypeError:       # the type rule refuses these dtypes
                        continue
                    pointwise.run(p, [dev(x) for x in ins], a, out_shape, out)


def split_reductions():
    """Reductions with too few tiles to fill the GPU: split over blocks, then joined."""
    saved = plan.MIN_SLICE, plan.FILL_BLOCKS, plan.EAGER_THREADS
    plan.MIN_SLICE, plan.FILL_BLOCKS, plan.EAGER_THREADS = 1, 4, 32
    try:
        for dtype in ("float32", "float64", "int64"):
            x = tg.tensor(sample(dtype, (2, 70)), device="cuda")
            x.sum(1), x.sum(), x.amax(0)
    finally:
        plan.MIN_SLICE, plan.FILL_BLOCKS, plan.EAGER_THREADS = saved


def eager_library():
    """The hand-written kernels: argreduce, rounding, random, arange, copies, indexing, matmul."""
    for dtype in ("float32", "float64", "int32", "int64"):
        x = tg.tensor(sample(dtype, (3, 4)), device="cuda")
        x.argmax(), x.argmin(1), x.T.argmax(0)
        x.T.contiguous(), tg.cat([x, x], 1), x[tg.tensor([2, 0], device="cuda")]
        x // tg.tensor(sample(dtype, (3, 4)), device="cuda"), x % 3
        x @ x.T
    f = tg.tensor(sample("float32", (3, 4)) - 1, device="cuda")
    f.floor(), f.round()
    w = tg.tensor(sample("float32", (4, 3)), device="cuda", requires_grad=True)
    w[tg.tensor([1, 1, 3], device="cuda")].sum().backward()
    w2 = w.detach().clone()
    w2[tg.tensor([0, 2], device="cuda")] = tg.tensor(np.ones((2, 3), np.float32), device="cuda")
    for dtype in (tg.float32, tg.float64):
        tg.rand(3, 5, dtype=dtype, device="cuda"), tg.randn(7, dtype=dtype, device="cuda")
    tg.arange(5, device="cuda"), tg.arange(0.5, 3, 0.5, device="cuda")
    tg.zeros(3, device="cuda"), tg.full((2, 2), 3.0, device="cuda")
    for dtype in ("float32", "float64", "int32", "int64", "bool"):       # prod and the scans (scan.py)
        x = tg.tensor(sample(dtype, (3, 4)), device="cuda")
        x.prod(1), x.cumsum(0), x.T.cumsum(1)
    p = tg.tensor(sample("float32", (3, 40)), device="cuda", requires_grad=True)
    (p.prod(1).sum() + p.cumsum(1).sum()).backward()      # prod_others and a reverse cumsum, rows of chunks
    h = tg.tensor(sample("float16", (3, 4)), device="cuda")   # float16: computed in float32, stored rounded
    h * h + 1, h.exp(), h.sum(1), h.double().half(), h.float().half(), h @ h.T, h.cumsum(1), h.prod(0)


def gpu_check_functions():
    """examples/gpu_check.py's correctness checks and workloads at its --quick sizes."""
    import gpu_check as g
    failed = [c for c in g.correctness(g.QUICK["check"], math.inf) if not isinstance(c[1], float)]
    assert not failed, failed
    for wid in ("G1", "G2", "G3", "G4", "G5"):        # compiled (eager_primitives covers eager kernels)
        g.tg_column(wid, g.inputs(wid, g.QUICK[wid], int(wid[1])), True)()


def adam_step():
    model = tg.nn.Sequential(tg.nn.Linear(4, 6), tg.nn.ReLU(), tg.nn.Linear(6, 3)).cuda()
    opt = tg.optim.Adam(model.parameters(), lr=0.01)

    @tg.compile
    def step(x, y):
        loss = tg.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss
    x, y = tg.tensor(sample("float32", (5, 4)), device="cuda"), tg.tensor([0, 2, 1, 1, 0], device="cuda")
    step(x, y), step(x, y)


def long_scans():
    """The block scans of long rows (blockscan.py) at their real block and tile sizes, for each
    accumulator dtype (float64, float32, int64, int32): rows of two tiles (all three kernels) and
    rows of 20 let through as long (one tile: finish alone)."""
    from tracegrad.core import bind
    from tracegrad.backends.cuda.eager import blockscan
    saved, blockscan.LONG_ROW = blockscan.LONG_ROW, 10
    two_tiles = blockscan.THREADS * blockscan.ITEMS + 1
    try:
        tg.tensor(sample("float32", (1, two_tiles)), device="cuda").cumsum(1)
        bind("prod_others", tg.tensor(sample("int32", (1, two_tiles)), device="cuda"), axis=(1,))
        for dtype in ("float16", "int64", "bool"):       # float16 and bool: converted as they are loaded
            tg.tensor(sample(dtype, (1, 20)), device="cuda").cumsum(1)
    finally:
        blockscan.LONG_ROW = saved


def float16_compiled():
    """float16 fused kernels: loads of float16, float32 math, float16 stores (and row caches)."""
    import tracegrad.nn.functional as F
    x = tg.tensor(sample("float16", (3, 40)), device="cuda", requires_grad=True)
    w = tg.tensor(sample("float16", (40,)), device="cuda", requires_grad=True)
    b = tg.tensor(sample("float16", (40,)), device="cuda", requires_grad=True)

    def layer(x, w, b):
        return (F.layer_norm(x, (40,), w, b) * F.softmax(x, -1)).sum(0) + F.gelu(x * w).amax(0)
    tg.compile(layer)(x, w, b).sum().backward()
    tg.compile(lambda x, w: ((x.float() * w.float()).tanh().sum(0)).half() * w)(x.detach(), w.detach())
    saved = plan.MIN_SLICE, plan.FILL_BLOCKS
    plan.MIN_SLICE, plan.FILL_BLOCKS = 1, 4
    try:
        tg.compile(lambda x: (x * x).sum(0) + x.amin(1).sum())(tg.tensor(sample("float16", (70, 2)), device="cuda"))
    finally:
        plan.MIN_SLICE, plan.FILL_BLOCKS = saved


def symbolic_compiled():
    """dynamic=True programs: kernels taking their sizes as int64 arguments (maps with vector accesses,
    rows of symbolic length, a persistent layer norm backward, tiled and split reductions whose slices
    are counted at the call, a mean's count as a value), at two batch sizes."""
    import tracegrad.nn.functional as F

    def step(x, w, g):
        y = F.layer_norm(x @ w, (8,), g, None)
        return (y.softmax(1) * x.shape[0]).sum() + x.log_softmax(1).sum(0).square().sum() + (x.t() * 2).sum(1).sum() \
            + (x - x.mean(1, keepdim=True)).abs().sum()
    f = tg.compile(step, dynamic=True)
    saved = plan.MIN_SLICE, plan.FILL_BLOCKS
    plan.MIN_SLICE, plan.FILL_BLOCKS = 1, 4
    try:
        for b in (9, 3):
            x, w, g = (tg.tensor(sample("float32", s), device="cuda", requires_grad=True) for s in ((b, b + 2), (b + 2, 8), (8,)))
            f(x, w, g).backward()
    finally:
        plan.MIN_SLICE, plan.FILL_BLOCKS = saved


if __name__ == "__main__":
    assert tg.cuda.simulated(), "run under NUMBA_ENABLE_CUDASIM=1"
    for part in (eager_primitives, split_reductions, eager_library, long_scans, adam_step, float16_compiled,
                 symbolic_compiled, gpu_check_functions):
        t0 = time.perf_counter()
        part()
        print(f"{part.__name__}: {time.perf_counter() - t0:.1f} s", flush=True)
