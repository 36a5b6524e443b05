"""The CPU planner's walk orders (backends/cpu/plan/order.py): loop orders read from `stage="kernels"`, and
compiled == interpret == eager on permuted, strided and broadcast views of odd sizes, with
gradients (the backward programs are full of transposes and reductions over broadcast axes).

TRACEGRAD_SCHEDULE_EXAMPLES raises the hypothesis example count (default 25, for CI)."""
import os
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import tracegrad as tg
from tracegrad import scalar as S
from tracegrad.backends.cpu.plan import limits
from tracegrad.ir.kernels import Kernel, Load, Phase, Schedule
from tracegrad.backends.cpu.machine import FIELDS
from tracegrad.backends.cpu.plan.limits import ROWS_LIMIT
from tracegrad.backends.cpu.plan.order import choose

TILE, ACROSS_TILE = FIELDS["tile"].default, FIELDS["across_tile"].default     # calibration off (conftest.py)

EXAMPLES = int(os.environ.get("TRACEGRAD_SCHEDULE_EXAMPLES", "25"))
RNG = np.random.default_rng(0)


@pytest.fixture(autouse=True)
def _register_tiles_at_test_sizes(monkeypatch):
    """Register transposes start above REGS_MIN bytes moved; these tests exercise them on small arrays."""
    monkeypatch.setattr(limits, "REGS_MIN", 0)


def kernel_lines(fn, *arrays, stage="kernels"):
    ts = [tg.tensor(a) for a in arrays]
    return [line for line in tg.compile(fn).ir(*ts, stage=stage).splitlines() if re.match(r"\s+k\d+ ", line)]


def test_transposed_map_is_tiled_with_the_output_unit_stride_innermost():
    x = RNG.standard_normal((67, 45)).astype(np.float32)
    (line,) = kernel_lines(lambda x: x.T * 2.0, x)
    assert "space=45x67" in line and line.endswith(f"loops=d1/{TILE},d0/{TILE},d0,d1 transpose=1"), line
    (line,) = kernel_lines(lambda x: x.T * 2.0, RNG.standard_normal((1500, 1001)).astype(np.float32))
    assert line.endswith(f"loops=d0/{TILE},d1/{TILE},d0,d1"), line     # rows not whole lines, 6 MB: in place


def test_batched_transpose_keeps_the_batch_outermost():
    x = RNG.standard_normal((3, 37, 41)).astype(np.float32)
    (line,) = kernel_lines(lambda x: x.permute(0, 2, 1).exp(), x)
    assert line.endswith(f"loops=d0,d2/{TILE},d1/{TILE},d1,d2 transpose=1"), line


def test_column_reduction_accumulates_across_the_kept_axis():
    """Whole rows of memory, threads splitting the rows (Schedule.rows); a kept axis too long for
    the vectors of partial results: tiles of it."""
    x = RNG.standard_normal((300, 70)).astype(np.float32)
    (line,) = kernel_lines(lambda x: x.T.sum(axis=1), x)
    assert "[loop] space=70x300 split=1 ops=sum" in line
    assert line.endswith("loops=d1,d0 reduce=across d0 threads=d1"), line
    x = RNG.standard_normal((3, ROWS_LIMIT + 1)).astype(np.float32)
    (line,) = kernel_lines(lambda x: x.T.sum(axis=1), x)
    assert line.endswith(f"loops=d0/{ACROSS_TILE},d1,d0 reduce=across d0"), line


def test_softmax_over_a_transposed_view_is_a_column_walk_then_a_tiled_map():
    """Its max and sum of exp are one online walk over x's memory (ir/layout.py's columns_first), as
    softmax(x, 0); the output, transposed from x, is written in tiles. One thread, CPU time, (2048,
    1000) float32: 2.4-2.6 ms against 3.3-4.7 for the one kernel of tiles across the kept axis before
    ((512, 4096): 3.3-3.6 against 3.6-5.6; a loaded machine)."""
    x = RNG.standard_normal((300, 70)).astype(np.float32)

    def softmax_rows_of_transpose(x):
        z = x.T
        e = (z - z.amax(axis=1, keepdims=True)).exp()
        return e / e.sum(axis=1, keepdims=True)
    walk, out = kernel_lines(softmax_rows_of_transpose, x)
    assert "[reduce_acc] space=300x70 " in walk and walk.endswith("threads=d0 online=p0+p1"), walk
    assert "space=70x300 " in out and f"loops=d1/{TILE},d0/{TILE},d0,d1" in out, out
    got = tg.compile(softmax_rows_of_transpose)(tg.tensor(x)).numpy()
    e = np.exp(x.T - x.T.max(axis=1, keepdims=True))
    np.testing.assert_allclose(got, e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-7)


def test_permuted_full_reduction_iterates_in_storage_order():
    x = RNG.standard_normal((30, 20)).astype(np.float32)
    (line,) = kernel_lines(lambda x: x.T.exp().sum(), x)
    assert "[reduce_acc]" in line and line.endswith("loops=d1,d0"), line


def test_kernels_in_memory_order_keep_natural_order_and_text():
    x = RNG.standard_normal((30, 20)).astype(np.float32)
    for fn in (lambda x: x * 2.0, lambda x: x.sum(axis=1), lambda x: x.sum(axis=0), lambda x: x.T.T + 1.0):
        (line,) = kernel_lines(fn, x)
        assert "loops=" not in line, line


def test_the_largest_operand_decides_not_a_small_broadcast_one():
    x = RNG.standard_normal((64, 48)).astype(np.float32)
    w = RNG.standard_normal((48, 1)).astype(np.float32)      # read along d1 of the space... broadcast
    (line,) = kernel_lines(lambda x, w: x * w.T, x, w)
    assert "loops=" not in line, line


def test_w7_kernels_follow_memory_order():
    x = RNG.standard_normal((40, 24)).astype(np.float32)
    w = RNG.standard_normal(24).astype(np.float32)

    def center(x, w):
        z = x.T
        y = (z - z.mean(axis=1, keepdims=True)) * w[:, None]
        return (y * y).sum()
    xs, ws = tg.tensor(x, requires_grad=True), tg.tensor(w, requires_grad=True)
    text = tg.compile(center).ir(xs, ws, stage="kernels")
    assert text.count("reduce=across d0") == 2, text          # forward means, backward's two sums
    assert "[reduce_acc] space=24x40 split=0 ops=" in text and "loops=d1,d0" in text, text


def test_schedule_is_data_for_every_target():
    """The pass reads only the kernel IR: a hand-made kernel gets a schedule without compiling."""
    class V:                                                   # a stand-in graph value
        def __init__(self, shape):
            self.shape, self.dtype = shape, tg.float32
    src, out = V((8, 512)), V((512, 1))
    k = Kernel("loop", (512, 8), 1, [Phase("reduce", [(out, Load(src, (1, 512)))], "sum", (1,), S.a + S.b)])
    sch = choose(k)
    assert isinstance(sch, Schedule) and sch.across == 0 and k.parallel_extent() == 512
    k.schedule = sch
    assert k.parallel_extent() == 8 and sch.text() == "loops=d1,d0 reduce=across d0 threads=d1"
    assert k.partials() == k.phases and k.accumulated() == []


# ------------------------------------------------------------------ compiled == interpret == eager

SIZES = [0, 1, 2, 3, 7, 31, 33, 65, 129, 257, 300]
PROGRAMS = {
    "map": lambda z, b: (z * b + 1.0).tanh(),
    "center": lambda z, b: (z - z.mean(axis=-1, keepdims=True)) * b,
    "sum_last": lambda z, b: (z * b).sum(axis=-1, keepdims=True),
    "sum_first": lambda z, b: (z.exp() * 0.1 + b).sum(axis=0),
    "max_last": lambda z, b: (z + b).amax(axis=-1),
    "softmax": lambda z, b: ((z - z.amax(axis=-1, keepdims=True)).exp() * b.abs()).sum(axis=-1, keepdims=True),
    "sum_all": lambda z, b: (z * z * b).sum(),
    "sum_last2": lambda z, b: (z * b).sum(axis=(-2, -1), keepdims=True),
    "sum_mid": lambda z, b: (z - b).square().sum(axis=1),
    "two_sums": lambda z, b: (z * b).sum(axis=-1, keepdims=True) * (z + b).sum(axis=-1, keepdims=True),
}


@st.composite
def views(draw):
    nd = draw(st.integers(2, 3))
    shape = [draw(st.sampled_from(SIZES)) for _ in range(nd)]
    while np.prod(shape) > 60_000:
        shape[int(np.argmax(shape))] //= 2
    perm = draw(st.permutations(range(nd)))
    step_axis = draw(st.sampled_from([None] + list(range(nd))))
    program = draw(st.sampled_from(sorted(PROGRAMS)))
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    bcast = draw(st.integers(0, nd - 1))                       # the view axis the partner varies along
    return tuple(shape), tuple(perm), step_axis, program, dtype, bcast


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(views())
def test_compiled_matches_interpret_and_eager_on_views(case):
    shape, perm, step_axis, program, dtype, bcast = case
    x = RNG.standard_normal(shape).astype(dtype)
    idx = tuple(slice(None, None, 2) if d == step_axis else slice(None) for d in range(len(shape)))
    vshape = tuple(x[idx].transpose(perm).shape)
    assume(vshape[-1] > 0 or program not in ("max_last", "softmax"))   # max over nothing is an error
    bshape = tuple(n if d == bcast else 1 for d, n in enumerate(vshape))
    b = (RNG.standard_normal(bshape) + 2.0).astype(dtype)

    def fn(x, b):
        z = x[idx].permute(*perm)
        return PROGRAMS[program](z, b)

    results = []
    for run in ("llvm", "interpret", "eager"):
        xs, bs = tg.tensor(x, requires_grad=True), tg.tensor(b, requires_grad=True)
        f = fn if run == "eager" else tg.compile(fn, backend=run)
        out = f(xs, bs)
        (out * out).sum().backward()
        results.append([out.detach().numpy(), xs.grad.numpy(), bs.grad.numpy()])
    tol = 2e-4 if dtype == np.float32 else 1e-10
    for other in results[1:]:
        for a, e in zip(results[0], other):
            scale = max(1.0, float(np.max(np.abs(e)))) if e.size else 1.0
            np.testing.assert_allclose(a, e, rtol=0, atol=tol * scale, err_msg=f"{case}")


@pytest.mark.parametrize("n", [255, 257, 513])
def test_column_sums_over_many_rows_stay_accurate(n):
    """A column sum over 20,000 rows (blocks of partial sums) against float64: no worse than NumPy's
    float32 sum of the same columns."""
    x = (RNG.standard_normal((20_000, n)) + 3.0).astype(np.float32)
    got = tg.compile(lambda x: x.T.sum(axis=1))(tg.tensor(x)).numpy()
    exact = x.astype(np.float64).sum(axis=0)
    ours = np.max(np.abs(got - exact) / np.abs(exact))
    numpy_err = np.max(np.abs(x.sum(axis=0) - exact) / np.abs(exact))
    assert ours <= max(numpy_err, 1e-6), (ours, numpy_err)
