"""Matrix products at BLAS's rate (backends/cpu/gemm.py, ops/matmul.py): batch axes folded into one large
call where memory allows, a linear layer's weight gradient as one product over the folded batch;
compiled == NumPy for every layout, gradients == central differences in float64."""
import ctypes
import math
import os
import re

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tracegrad as tg
from tracegrad.backends.cpu import driver, gemm
from tracegrad.backends.cpu.sizes import value
from tracegrad.backends.cpu.gemm import NO_TRANS, TRANS, fold_rows
from tracegrad.symint import hint, is_sym


def close(got, want, dtype):
    rtol = 1e-4 if dtype == np.float32 else 1e-10
    want = np.asarray(want, np.float64)
    scale = max(1.0, float(np.abs(want).max())) if want.size else 1.0
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=rtol, atol=rtol * scale)


def blas_calls(f, *args):
    """(transA, transB, m, n, k) of each BLAS call in the forward program's LLVM text."""
    text = f.ir(*args, stage="llvm")
    return [tuple(int(v) for v in c) for c in
            re.findall(r"fn\(i32 101, i32 (\d+), i32 (\d+), i\d+ (\d+), i\d+ (\d+), i\d+ (\d+),", text)]


def batched(rng, batch, shape, dtype, layout):
    """(a contiguous array, the view of it a product reads as batch + shape, laid out as asked):
    "c" contiguous, "t" each matrix transposed, "rows" every other row, "perm" the batch axes
    reversed in memory, "bcast" one matrix for every batch (stride 0). The view (a function of
    NumPy arrays and of tensors alike) is taken inside the compiled function: a compiled function's
    inputs arrive contiguous."""
    full, nb = tuple(batch) + tuple(shape), len(batch)
    if layout == "t":
        return rng.standard_normal(full[:-2] + shape[::-1]).astype(dtype), lambda x: x.swapaxes(-1, -2)
    if layout == "rows":
        return rng.standard_normal(full[:-2] + (2 * shape[0], shape[1])).astype(dtype), lambda x: x[..., ::2, :]
    if layout == "perm":
        order = tuple(range(nb))[::-1] + (nb, nb + 1)
        return rng.standard_normal(tuple(batch[::-1]) + tuple(shape)).astype(dtype), lambda x: x.permute(*order) \
            if hasattr(x, "permute") else x.transpose(order)
    if layout == "bcast":
        return rng.standard_normal(shape).astype(dtype), lambda x: x.expand(*full) if hasattr(x, "expand") \
            else np.broadcast_to(x, full)
    return rng.standard_normal(full).astype(dtype), lambda x: x


def test_linear_layer_is_one_call():
    """x [B, T, K] @ w [K, N]: one (B*T) x N x K call, no loop over B; the backward's weight
    gradient is one K x N x (B*T) call (x transposed, no copy) and the input gradient one too."""
    rng = np.random.default_rng(0)
    x = tg.tensor(rng.standard_normal((4, 6, 5)).astype(np.float32), requires_grad=True)
    w = tg.tensor(rng.standard_normal((5, 3)).astype(np.float32), requires_grad=True)

    def step(x, w):
        loss = ((x @ w) ** 2).sum()
        loss.backward()
        return loss
    f = tg.compile(step)
    calls = blas_calls(f, x, w)
    assert (NO_TRANS, NO_TRANS, 24, 3, 5) in calls                 # forward
    assert (TRANS, NO_TRANS, 5, 3, 24) in calls                    # dL/dw = x^T g over the folded batch
    assert (NO_TRANS, TRANS, 24, 5, 3) in calls                    # dL/dx = g w^T
    assert "phi i64" not in re.search(r"define void @forward_s0\(.*?\n}", f.ir(x, w, stage="llvm"), re.S).group(0)
    loss = f(x, w)
    xn, wn = x.detach().numpy().astype(np.float64), w.detach().numpy().astype(np.float64)
    close(loss.detach().numpy(), ((xn @ wn) ** 2).sum(), np.float32)
    close(w.grad.numpy(), np.einsum("btk,btn->kn", xn, 2 * (xn @ wn)), np.float32)
    close(x.grad.numpy(), 2 * (xn @ wn) @ wn.T, np.float32)


def test_fold_rows_cases():
    """Which batch axes fold: b the same matrix (stride 0), a's blocks continuing its rows."""
    # a [2, 3, 4, 5] contiguous, b broadcast: both batch axes fold, 24 rows at stride 5
    assert fold_rows(4, 5, (5, 1), (2, 3), [60, 20], [0, 0]) == (24, (NO_TRANS, 5), (), [], [])
    # b differs per outer batch: only the inner axis folds
    assert fold_rows(4, 5, (5, 1), (2, 3), [60, 20], [7, 0]) == (12, (NO_TRANS, 5), (2,), [60], [7])
    # b differs per inner batch: nothing folds
    assert fold_rows(4, 5, (5, 1), (2, 3), [60, 20], [0, 9]) is None
    # a's rows every other one (row stride 10), blocks at 40: they continue the rows
    assert fold_rows(4, 5, (10, 1), (3,), [40], [0]) == (12, (NO_TRANS, 10), (), [], [])
    # a's blocks with a gap (stride 25 after 4 rows of 5): no fold
    assert fold_rows(4, 5, (5, 1), (3,), [25], [0]) is None
    # a transposed in memory (rows at unit stride): blocks do not continue the rows
    assert fold_rows(4, 5, (1, 4), (3,), [20], [0]) is None
    # one row per batch: the batch stride becomes the row stride; a broadcast a never folds
    assert fold_rows(1, 5, (5, 1), (6,), [8], [0]) == (6, (NO_TRANS, 8), (), [], [])
    assert fold_rows(1, 5, (5, 1), (6,), [0], [0]) is None
    # extent-1 batch axes drop whatever their strides
    assert fold_rows(4, 5, (5, 1), (1, 3), [0, 20], [5, 0]) == (12, (NO_TRANS, 5), (), [], [])


LAYOUTS = ["c", "t", "rows", "perm"]


@settings(max_examples=40, deadline=None)
@given(m=st.integers(0, 9), k=st.integers(0, 9), n=st.integers(0, 9),
       batch=st.sampled_from([(), (1,), (3,), (2, 3), (3, 1), (1, 2, 2)]),
       la=st.sampled_from(LAYOUTS), lb=st.sampled_from(LAYOUTS + ["bcast", "2d"]),
       dtype=st.sampled_from([np.float32, np.float64]), seed=st.integers(0, 99))
def test_generated_layouts_match_numpy(m, k, n, batch, la, lb, dtype, seed):
    """Every transpose combination, strided and permuted batches, broadcast and 2-D second
    operands, empty and size-1 axes: compiled == NumPy."""
    rng = np.random.default_rng(seed)
    a, va = batched(rng, batch, (m, k), dtype, la)
    b, vb = batched(rng, () if lb == "2d" else batch, (k, n), dtype, "c" if lb == "2d" else lb)
    f = tg.compile(lambda x, y: va(x) @ vb(y))
    close(f(tg.from_numpy(a), tg.from_numpy(b)).numpy(), va(a).astype(np.float64) @ vb(b), dtype)


@pytest.mark.parametrize("view", ["plain", "transposed", "rows"])
@pytest.mark.parametrize("compiled", [False, True])
def test_folded_weight_gradient_gradcheck(view, compiled):
    """The folded weight gradient (and the input's) against central differences in float64, eager
    and compiled, with x contiguous, a transposed view (its reshape copies) and every other row."""
    rng = np.random.default_rng(4)
    x = tg.tensor(rng.standard_normal((2, 3, 4, 5)), requires_grad=True)
    w = tg.tensor(rng.standard_normal((5, 3)), requires_grad=True)
    b = tg.tensor(rng.standard_normal((1, 5, 3)), requires_grad=True)      # batch axes of extent 1 fold too

    def f(x, w, b):
        v = {"plain": x, "transposed": x.transpose(1, 2).transpose(1, 2).mT.mT,
             "rows": x.transpose(-1, -2)}[view]
        if view == "rows":
            v = v.mT
        return ((v @ w).tanh() + v @ b).sum(1)
    assert tg.gradcheck(tg.compile(f) if compiled else f, (x, w, b))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_attention_shaped_products(dtype):
    """Attention's products on a permuted qkv (batch strides that do not fold), fwd+bwd compiled ==
    eager."""
    rng = np.random.default_rng(2)
    qkv = rng.standard_normal((2, 5, 3, 2, 4)).astype(dtype)

    def f(t):
        q, k, v = t.permute(2, 0, 3, 1, 4)
        att = (q @ k.transpose(-1, -2)).softmax(-1)
        return ((att @ v) ** 2).sum()
    results = []
    for g in (f, tg.compile(f)):
        t = tg.tensor(qkv, requires_grad=True)
        loss = g(t)
        loss.backward()
        results.append((loss.detach().numpy(), t.grad.numpy()))
    for got, want in zip(*results):
        close(got, want, dtype)


def test_bad_operands_are_refused_clearly():
    """Mismatched shapes fail at trace time with PyTorch's message; a BLAS call that would reach
    outside its buffers is refused before any native code exists (a compiler bug, named as one)."""
    f = tg.compile(lambda x, y: x @ y)
    with pytest.raises(RuntimeError, match="cannot be multiplied"):
        f(tg.randn(2, 3, 4), tg.randn(5, 6))
    x, y = tg.randn(2, 3, 4), tg.randn(4, 6)
    f(x, y)
    entry = f._entry_for((x, y), {})[0]
    kernel = next(k for k in entry.programs[0].kernels if k.kind == "extern")
    plan = driver.gemm_plan(kernel)
    assert plan["m"] == 6 and plan["batch"] == ()
    with pytest.raises(RuntimeError, match="would reach a elements"):
        driver._check_extents(kernel, dict(plan, m=7))


def blas_threads():
    fn = driver.blas()[1]["get_threads"]
    return ctypes.CFUNCTYPE(ctypes.c_int)(fn)() if fn else None


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", ["rows", "rows_t", "cols", "cols_t", "wide", "batch", "batch_perm"])
def test_split_products_match_numpy(dtype, case):
    """Products large enough to split over the pool (row blocks of an unbatched product, a's rows
    plain or transposed, 257 rows: an uneven last chunk; column blocks of b plain or transposed
    where a has few rows, or fewer rows than b has columns; batch entries, contiguous or permuted) ==
    NumPy, on the pool or the calling thread alone, and the BLAS's thread count is restored."""
    rng = np.random.default_rng(8)
    if case == "wide":                 # 130 rows, 555 columns: the columns are cut (an uneven last chunk)
        a, va = batched(rng, (), (130, 40), dtype, "c")
        b, vb = batched(rng, (), (40, 555), dtype, "t")
        assert gemm.Chunks({"m": 130, "n": 555, "k": 40, "batch": ()}).axis == "cols"
        assert gemm.Chunks({"m": 555, "n": 130, "k": 40, "batch": ()}).axis == "rows"
    elif case.startswith("rows"):
        a, va = batched(rng, (), (257, 40), dtype, "t" if case == "rows_t" else "c")
        b, vb = batched(rng, (), (40, 30), dtype, "t")
    elif case.startswith("cols"):        # too few rows to split: columns of b
        a, va = batched(rng, (), (40, 40), dtype, "rows")
        b, vb = batched(rng, (), (40, 301), dtype, "t" if case == "cols_t" else "c")
    else:
        a, va = batched(rng, (3, 6), (20, 24), dtype, "perm" if case == "batch_perm" else "c")
        b, vb = batched(rng, (3, 6), (24, 40), dtype, "c")
    f = tg.compile(lambda x, y: va(x) @ vb(y) * 2.0)
    x, y = tg.from_numpy(a), tg.from_numpy(b)
    a, b = va(a), vb(b)
    assert re.search(r"_bounds = private unnamed_addr constant \[\d+ x i64\]", f.ir(x, y, stage="llvm"))
    before = blas_threads()
    for _ in range(4):                 # the Judge tries the pool and the calling thread alone
        close(f(x, y).numpy(), a.astype(np.float64) @ b * 2.0, dtype)
    assert blas_threads() == before


def _sym_fold(*shapes):
    """The BLAS plan of `x @ w` compiled with dynamic=True at input shapes `shapes`."""
    f = tg.compile(lambda x, w: x @ w, dynamic=True)
    x, w = (tg.randn(*s) for s in shapes)
    f(x, w)
    return driver.gemm_plan(next(k for k in _program(f, x, w).kernels if k.kind == "extern"))


def _program(f, *args):
    """The forward Program of a function compiled with dynamic=True (shared by every size)."""
    return f._entry_for(args, {})[0].latest().programs[0]


def test_symbolic_batch_folds_into_rows():
    """x [B, T, K] @ w [K, N] with B and T symbolic: one call of B*T rows (a's blocks continue its rows
    for every size), as with known sizes; a batched b keeps the loop."""
    plan = _sym_fold((4, 6, 5), (5, 3))
    assert plan["batch"] == () and is_sym(plan["m"]) and hint(plan["m"]) == 24 and plan["ta"][0] == NO_TRANS, plan
    plan = _sym_fold((4, 6, 5), (4, 5, 3))
    assert len(plan["batch"]) == 1 and hint(plan["m"]) == 6, plan


SPLIT_CASES = {   # name: (shapes of x and w per call, the view of x, of w): sizes across the split threshold
    "rows": ([((b, 96), (96, 80)) for b in (300, 1, 0, 7, 2000, 129)], lambda x: x, lambda w: w),
    "rows_t": ([((96, b), (80, 96)) for b in (2000, 3, 300)], lambda x: x.mT, lambda w: w.mT),
    "cols": ([((40, 96), (96, n)) for n in (3000, 2, 500, 0)], lambda x: x, lambda w: w),
    "batch": ([((b, 4, t, 32), (b, 4, 32, t)) for b, t in ((8, 64), (1, 1), (3, 100), (2, 5))],
              lambda x: x, lambda w: w),
    "weight_grad": ([((b, 300), (b, 200)) for b in (1000, 2, 513)], lambda x: x.mT, lambda w: w),
}


@pytest.mark.parametrize("case", sorted(SPLIT_CASES))
def test_symbolic_products_split_per_call(case):
    """A product whose sizes are known only at the call splits over the pool where the call's sizes make
    it worth it (the region runs: its Judge has learnt from it), runs whole where they do not (the
    region does not run), with its chunks cut for the call's extent; values as NumPy's over the size
    sequence (empty, 1 and uneven chunks among them); the BLAS's thread count restored."""
    sizes, va, vb = SPLIT_CASES[case]
    rng = np.random.default_rng(5)
    f = tg.compile(lambda x, w: va(x) @ vb(w), dynamic=True)
    before = blas_threads()
    for sx, sw in sizes:
        x, w = rng.standard_normal(sx).astype(np.float32), rng.standard_normal(sw).astype(np.float32)
        close(f(tg.from_numpy(x), tg.from_numpy(w)).numpy(), va(x).astype(np.float64) @ vb(w), np.float32)
        if blas_threads() is None:
            continue
        prog = _program(f, tg.from_numpy(x), tg.from_numpy(w))
        region, = prog.regions
        extent = value(region.chunks.extent, prog.env)
        work = math.prod(np.broadcast_shapes(va(x).shape[:-2], vb(w).shape[:-2])) * math.prod(va(x).shape[-2:]) \
            * vb(w).shape[-1]
        worth = work >= gemm.SPLIT_WORK and extent >= region.chunks.least
        assert region.live == worth                 # (bounds cut where it splits; else only the extent set)
        assert list(region.bounds) == region.chunks.cut(extent) if worth else region.bounds[-1] == extent
        warm = region.judge.warm
        f(tg.from_numpy(x), tg.from_numpy(w))
        assert region.judge.warm == (warm or worth), (sx, sw, worth)
    assert blas_threads() == before


def test_split_products_after_a_numpy_product_leave_blas_threads_alone():
    """After a NumPy product on OpenBLAS's threads, compiled split products (each region with the BLAS on
    one thread, its count restored after) create no thread and leave the BLAS's thread count as it was."""
    if blas_threads() is None or not os.path.isdir("/proc/self/task"):
        pytest.skip("needs OpenBLAS's thread control and /proc")
    rng = np.random.default_rng(3)
    a, w = rng.standard_normal((512, 512)).astype(np.float32), rng.standard_normal((512, 384)).astype(np.float32)
    f = tg.compile(lambda x, y: (x @ y).relu() @ y.T)
    x, y = tg.from_numpy(a), tg.from_numpy(w)
    f(x, y)
    before = blas_threads(), sorted(os.listdir("/proc/self/task"))
    for _ in range(3):
        a @ a
        close(f(x, y).numpy(), np.maximum(a.astype(np.float64) @ w, 0) @ w.T, np.float32)
    assert (blas_threads(), sorted(os.listdir("/proc/self/task"))) == before


@pytest.mark.parametrize("m,n,k,solo", [(64, 120, 400, True), (100, 100, 2000, False), (1, 7, 3, True)])
def test_small_whole_products_run_blas_on_one_thread(m, n, k, solo):
    """A product of known sizes too small to split (no batch, under 2 * MIN_ROWS rows and columns) runs
    with the BLAS on one thread below gemm.SOLO_WORK multiply-adds (a Linear layer of a small model: its
    OpenBLAS worker, busy elsewhere, stalled each call), keeps OpenBLAS's threads above it; values as
    NumPy's, and the BLAS's thread count is as before."""
    if not driver.blas()[1].get("set_threads"):
        pytest.skip("no OpenBLAS thread control here")
    assert gemm.solo({"m": m, "n": n, "k": k, "batch": ()}) is solo
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
    f = tg.compile(lambda x, y: (x @ y).relu())
    x, y = tg.from_numpy(a), tg.from_numpy(b)
    before = blas_threads()
    close(f(x, y).numpy(), np.maximum(a.astype(np.float64) @ b, 0), np.float32)
    assert blas_threads() == before
    text = f.ir(x, y, stage="llvm")
    assert bool(re.search(r"call void %c\d+bts\w*\(i32 1\)", text)) is solo


def _alike_products(n, dynamic, check=False):
    """(LLVM text, its split products' region entries) of a loss over n products alike but for their
    buffers, x @ w_i (backward: g_i @ w_i.T, x.T @ g_i), after checking its loss and gradients against
    NumPy, four calls: on the pool and on the calling thread alone (the Judge tries both); `check`:
    compiled with check=True (kernel by kernel, each against eager)."""
    rng = np.random.default_rng(n)
    xa = rng.standard_normal((256, 48)).astype(np.float32)
    was = [rng.standard_normal((48, 40)).astype(np.float32) for _ in range(n)]
    x = tg.tensor(xa, requires_grad=True)
    ws = [tg.tensor(w, requires_grad=True) for w in was]

    def loss(x, *ws):
        return sum(((x @ w).tanh() * (i + 1.0)).sum() for i, w in enumerate(ws))
    f = tg.compile(loss, dynamic=dynamic, check=check)
    hs = [np.tanh(xa.astype(np.float64) @ w) for w in was]
    gs = [(1 - h * h) * (i + 1.0) for i, h in enumerate(hs)]
    for _ in range(4):
        for t in (x, *ws):
            t.grad = None
        out = f(x, *ws)
        out.backward()
        close(out.detach().numpy(), sum(h.sum() * (i + 1.0) for i, h in enumerate(hs)), np.float32)
        close(x.grad.numpy(), sum(g @ w.T for g, w in zip(gs, was)), np.float32)
        for w, g in zip(ws, gs):
            close(w.grad.numpy(), xa.T.astype(np.float64) @ g, np.float32)
    text = f.ir(x, *ws, stage="llvm")
    return text, [name for name, body in re.findall(r"(?ms)^define void @(\w+)\(ptr nocapture readonly %\w+, i64 %lo, "
                                                    r"i64 %hi\) #1 \{\n(.*?)^\}", text) if "call void %cfn(" in body]


@pytest.mark.parametrize("dynamic", [False, True])
def test_alike_split_products_share_one_entry(dynamic):
    """Products alike but for their buffers, each split over the pool, share one compiled region entry
    (its table slots read from the region's record: gemm.region_entry): 1 or 5 such products compile
    the same entries, while the regions (one per product) follow the count."""
    if not driver.blas() or not driver.blas()[1].get("set_threads"):
        pytest.skip("this BLAS's thread count cannot be set: products do not split")
    (one, entries1), (five, entries5) = _alike_products(1, dynamic), _alike_products(5, dynamic)
    _alike_products(3, dynamic, check=True)
    regions = [len(re.findall(r"call void %c\d+run\(", t)) for t in (one, five)]
    assert regions[1] >= regions[0] + 4 and len(re.findall(r"call void %c\w*fn\(", five)) >= 5, regions
    assert entries1 and len(entries5) == len(entries1), (entries1, entries5)
