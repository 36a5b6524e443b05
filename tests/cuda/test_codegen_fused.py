"""The numba.cuda code generator on kernels built by the real fusion and scheduling passes from
traced functions, against the `interpret` backend (NumPy): row reductions (softmax, layernorm),
reductions over inner, outer, middle and all axes, transposed and broadcast operands, every
dtype the reductions lower, and float32 sums against float64 NumPy. Runs under numba's simulator."""
import os

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from numba import cuda

import tracegrad as tg
from tracegrad.backends.cuda.lower import compile_kernels
from tracegrad.ir.interpret import run as interpret
from tracegrad.ir.passes.fusion import fuse
from tracegrad.backends.cpu.plan import schedule

EXAMPLES = int(os.environ.get("TRACEGRAD_HYPOTHESIS_EXAMPLES", "6"))


def graphs(fn, *arrays):
    """The optimized forward (and backward, when some input requires grad) graphs of fn."""
    f = tg.compile(fn, backend="interpret")
    ts = [tg.from_numpy(a) if not isinstance(a, tg.Tensor) else a for a in arrays]
    entry = f._entry_for(tuple(ts), {})[0]
    return entry.fwd, entry.bwd


def run_on_device(graph, arrays, name="forward"):
    """The outputs of `graph` computed by the generated CUDA kernels (every kernel lowered: no host
    or extern kernel), and the kernels' launches."""
    kernels, aliases = fuse(graph)
    schedule(kernels)
    lowered = compile_kernels(kernels, name)
    assert None not in lowered, "a kernel of the test's graph is not a loop or reduce_acc kernel"
    bufs = {id(v): cuda.to_device(np.ascontiguousarray(a)) for v, a in zip(graph.inputs, arrays)}
    for k, launches in zip(kernels, lowered):
        for v in k.outputs:
            bufs.setdefault(id(v), cuda.device_array(v.shape, v.dtype.np))
        for launch in launches:
            launch(*[bufs[id(b)] for b in launch.buffers])
    outs = []
    for v in graph.outputs:
        src = aliases.get(id(v), v)
        outs.append(bufs[id(src)].copy_to_host().reshape(v.shape))
    return outs, [launch for ls in lowered for launch in ls], kernels


def check(graph, arrays, rtol=2e-6, atol=1e-6):
    got, launches, kernels = run_on_device(graph, arrays)
    want = interpret(graph, *arrays)
    for v, g, w in zip(graph.outputs, got, want):
        assert g.dtype == np.asarray(w).dtype, v
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=str(v))
    return launches, kernels


def rng_array(shape, dtype="float32", seed=0):
    rng = np.random.default_rng(seed)
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if dtype.startswith("int"):
        return rng.integers(-50, 50, shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def softmax(x):
    e = (x - x.amax(-1, keepdim=True)).exp()
    return e / e.sum(-1, keepdim=True)


def layernorm(x, w, b):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / (var + 1e-5).sqrt() * w + b


@pytest.mark.parametrize("shape, block", [((5, 37), 5 * 32), ((3, 300), 64)])
def test_softmax_rows_are_one_kernel_a_warp_or_a_block_per_row(shape, block):
    """Short rows take a warp each (several per block), long rows a block each (warp shuffles, then
    one shared slot per warp); x, which the three phases read, is read from memory once (the
    first phase keeps it in shared memory), and exp(x - max), which two compute, is computed once."""
    fwd, _ = graphs(softmax, rng_array(shape))
    launches, kernels = check(fwd, [rng_array(shape, seed=2)])
    assert len(kernels) == 1 and len(launches) == 1
    assert launches[0].block == block and "shfl_xor_sync(" in launches[0].source
    assert ("cuda.syncthreads()" in launches[0].source) == (block == 64)
    src = launches[0].source               # exp(x - max): computed once, kept for the last phase (rc0)
    assert src.count("b0[") == 1 and src.count("rc1[") == 2 and src.count("math.exp(") == 1
    assert src.count("rc0[") == 2


def test_softmax_over_columns_of_memory_reads_across_the_kept_axis():
    """softmax over dim 0 of a contiguous matrix: the schedule reduces across the unit-stride axis;
    the kernel takes a thread per column (consecutive threads, consecutive addresses)."""
    fwd, _ = graphs(lambda x: softmax(x.t()), rng_array((9, 6)))
    launches, kernels = check(fwd, [rng_array((9, 6), seed=1)])
    assert kernels[0].schedule is not None and kernels[0].schedule.across is not None
    assert "shfl_xor_sync(" not in launches[0].source


def test_layernorm_forward_and_backward():
    x, w, b = rng_array((3, 40)), rng_array((40,), seed=1), rng_array((40,), seed=2)
    ts = [tg.from_numpy(a).requires_grad_() for a in (x, w, b)]
    fwd, bwd = graphs(lambda x, w, b: layernorm(x, w, b).sum(), *ts)
    check(fwd, [x, w, b], rtol=1e-5, atol=1e-5)
    rng = np.random.default_rng(3)
    ins = [rng.standard_normal(v.shape).astype(v.dtype.np) for v in bwd.inputs]
    # the backward's gradient sums over the batch axis (dw, db) are column reductions (accumulated in
    # the row kernel: Kernel.accumulated; a launch of their own here)
    # (random cotangents and saved values: dx cancels terms ~100x its size, so the roundings of the
    # compensated float32 sums and of the row divisions by reciprocals show at 1e-5 of the terms)
    launches, kernels = check(bwd, ins, rtol=1e-5, atol=5e-5)
    assert any(k.kind == "reduce_acc" or k.accumulated() for k in kernels)


@pytest.mark.parametrize("axes", [(2,), (1, 2), (0,), (1,), (0, 2), (0, 1, 2)])
def test_sum_max_min_mean_over_axes(axes):
    """Inner (row), outer (column), middle and all axes; each of the lowered dtypes."""
    xs = [rng_array((2, 3, 5), d, seed=j) for j, d in enumerate(["float32", "float64", "int32", "int64"])]

    def f(*xs):
        out = []
        for x in xs:
            out += [x.sum(axes), x.amax(axes), x.amin(axes)] + ([x.mean(axes)] if x.dtype.is_floating_point else [])
        return tuple(out)
    fwd, _ = graphs(f, *xs)
    check(fwd, xs, rtol=2e-6, atol=1e-6)


def test_transposed_and_broadcast_operands_of_a_map():
    """A map over a transposed view and a broadcast row: the schedule walks memory order."""
    a, b = rng_array((7, 5)), rng_array((5,), seed=1)
    fwd, _ = graphs(lambda a, b: ((a.t() + b[:, None]) * 2.0).tanh(), a, b)
    check(fwd, [a, b])


def test_strided_slice_and_offset_loads():
    x = rng_array((9, 8))
    fwd, _ = graphs(lambda x: (x[1::2, 3:] * x[:4, :5]).relu(), x)
    check(fwd, [x])


def test_float32_sums_are_as_accurate_as_float64_rounded():
    """float32 sums accumulate in float64: within one rounding of the float64 sum, at least as
    close as NumPy's pairwise float32 sum (over rows, columns and all axes)."""
    rng = np.random.default_rng(7)
    x = (1.0 + rng.random((1500, 2)) * 1e-3).astype(np.float32)
    fwd, _ = graphs(lambda x, y: (x.sum(0), x.sum(), y.sum(-1)), x, np.ascontiguousarray(x.T))
    got, _, _ = run_on_device(fwd, [x, np.ascontiguousarray(x.T)])
    x64 = x.astype(np.float64)
    for g, exact, pairwise in [(got[0], x64.sum(0), x.sum(0)), (got[1], x64.sum(), x.sum()),
                               (got[2], x64.T.sum(-1), np.ascontiguousarray(x.T).sum(-1))]:
        err = np.abs(g.astype(np.float64) - exact)
        assert np.all(err <= np.abs(pairwise.astype(np.float64) - exact) + 1e-12)
        assert np.all(err <= np.spacing(np.abs(exact).astype(np.float32)))


@settings(max_examples=EXAMPLES, deadline=None)
@given(shape=st.lists(st.integers(1, 6), min_size=1, max_size=3), data=st.data())
def test_generated_reductions_of_permuted_inputs(shape, data):
    """Reductions over any axes of a permuted (transposed) view, any op, float32 or int64."""
    nd = len(shape)
    perm = data.draw(st.permutations(range(nd)))
    axes = tuple(sorted(data.draw(st.sets(st.integers(0, nd - 1), min_size=1))))
    op = data.draw(st.sampled_from(["sum", "amax", "amin"]))
    dtype = data.draw(st.sampled_from(["float32", "int64"]))
    x = rng_array(tuple(shape), dtype, seed=len(shape))
    fwd, _ = graphs(lambda x: getattr((x * 3).permute(*perm), op)(axes), x)
    check(fwd, [x])


def test_reductions_split_across_blocks_join_their_partials(monkeypatch):
    """Too few tiles to fill the GPU: the reduced elements split over the grid's y blocks, a second
    launch joins the partial results (here forced on small shapes)."""
    from tracegrad.backends.cuda import plan
    monkeypatch.setattr(plan, "MIN_SLICE", 1)
    monkeypatch.setattr(plan, "FILL_BLOCKS", 4)
    monkeypatch.setattr(plan, "TILE_THREADS", 32)
    x, y = rng_array((70, 3)), rng_array((70, 3), "int64")
    fwd, _ = graphs(lambda x, y: (x.sum(), x.sum(0), (x * 2).amax(0), y.sum(0), y.amin()), x, y)
    launches, _ = check(fwd, [x, y])
    assert any(isinstance(ck.grid, tuple) and ck.grid[1] > 1 for ck in launches)
    assert any(ck.name.endswith("_join") for ck in launches)


def test_fused_maps_of_every_dtype():
    """bool, int32 (wrapping as NumPy's), int64 and float64 values through one fused program."""
    a = rng_array((4, 6), "int32") * 40000000
    b, c = rng_array((4, 6), "int64"), rng_array((4, 6), "float64")

    def f(a, b, c):
        mask = (a > 0) & (c < 0.5) | (b == 3)
        return mask, a * 7 + 1, tg.where(mask, b * b - 2, b.abs()), tg.where(mask, c.exp(), -c) * 2.5
    fwd, _ = graphs(f, a, b, c)
    check(fwd, [a, b, c], rtol=1e-12, atol=1e-12)


def test_reductions_over_no_elements_write_their_identity():
    x = np.zeros((3, 0, 2), np.float32)
    fwd, _ = graphs(lambda x: (x.sum(1), x.sum((0, 1)), (x + 1).sum(-1), x.sum()), x)
    check(fwd, [x])


def test_a_row_kernel_accumulating_sums_over_its_rows_keeps_them_per_block():
    """Fusion keeps a layer norm's sums over the rows inside its row kernel (Kernel.accumulated);
    the GPU's row kernel adds them up per block as its blocks take the rows (a column sum and a
    total), a join launch adds the blocks' partials; a maximum over the rows is a launch of its
    own after the rows."""
    x, w = rng_array((5, 12)), rng_array((12,), seed=1)

    def f(x, w):
        mu = x.mean(-1, keepdim=True)
        return ((x - mu) * w).sum(0), mu.sum()
    fwd, _ = graphs(f, x, w)
    launches, kernels = check(fwd, [x, w])
    assert any(k.kind == "loop" and k.accumulated() for k in kernels)
    assert any(ck.name.endswith("_join") for ck in launches) and not any("_sums" in ck.name for ck in launches)

    def g(x, w):
        mu = x.mean(-1, keepdim=True)
        return ((x - mu) * w).amax(0), mu.sum()
    fwd, _ = graphs(g, x, w)
    launches, kernels = check(fwd, [x, w])
    assert any(ck.name.endswith("_sums") for ck in launches)




@pytest.mark.parametrize("shape", [(7, 40), (9, 3), (4, 300)])
def test_persistent_row_kernels_join_the_partials_of_blocks_taking_several_rows(monkeypatch, shape):
    """Fewer blocks than rows (FILL_BLOCKS forced small): each block adds several rows into its
    accumulators; the layer norm's loss and its dW, db still equal the interpreter's."""
    from tracegrad.backends.cuda import plan
    monkeypatch.setattr(plan, "FILL_BLOCKS", 2)
    x, w, b = rng_array(shape), rng_array(shape[1:], seed=1), rng_array(shape[1:], seed=2)
    ts = [tg.from_numpy(a).requires_grad_() for a in (x, w, b)]
    fwd, bwd = graphs(lambda x, w, b: layernorm(x, w, b).sum(), *ts)
    launches, _ = check(fwd, [x, w, b], rtol=1e-5, atol=1e-5)
    assert any(ck.name.endswith("_join") and ck.grid == 1 for ck in launches)
    assert any(ck.grid == 2 and "cuda.local.array" not in ck.source and "p0[cuda.blockIdx.x]" in ck.source
               for ck in launches)
    rng = np.random.default_rng(3)
    ins = [rng.standard_normal(v.shape).astype(v.dtype.np) for v in bwd.inputs]
    launches, _ = check(bwd, ins, rtol=1e-5, atol=5e-5)
    assert any(ck.grid == 2 and "cuda.local.array" in ck.source for ck in launches)
