"""Axes every operand walks as one merge into one loop before lowering (backends/cpu/coalesce.py): the
loop bounds in `stage="llvm"`, the kernels' text unchanged, and compiled == interpret == eager on
generated maps, reductions and row kernels over broadcast, sliced and permuted operands of
several ranks, with gradients.

TRACEGRAD_COALESCE_EXAMPLES raises the hypothesis example count (default 25, for CI)."""
import os
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tracegrad as tg
from tracegrad.backends.cpu.coalesce import coalesce, scale

EXAMPLES = int(os.environ.get("TRACEGRAD_COALESCE_EXAMPLES", "25"))
RNG = np.random.default_rng(0)


def data(shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def bounds(fn, *arrays):
    """The constant trip counts of the loops of the module's kernel bodies."""
    text = tg.compile(fn).ir(*[tg.tensor(a) for a in arrays], stage="llvm")
    return {int(n) for n in re.findall(r"icmp slt i64 %v\d+, (\d+)\n", text)}


def kernels(fn, *arrays):
    f = tg.compile(fn)
    ts = [tg.tensor(a) for a in arrays]
    f(*ts)
    entry = f._entry_for(tuple(ts), {})[0]
    return entry.programs[0].kernels, f.ir(*ts, stage="kernels")


def test_a_contiguous_nchw_map_runs_one_inner_loop():
    x, g = data((3, 4, 5, 7)), data((3, 4, 5, 7))
    assert bounds(lambda x, g: x * 2 + g, x, g) == set()          # one loop over [lo * 140, hi * 140)
    (k,), text = kernels(lambda x, g: x * 2 + g, x, g)
    assert "space=3x4x5x7" in text                                 # the kernels' text keeps the space
    c = coalesce(k)
    assert c.shape == (420,) and c.split == 1 and scale(k, c) == 140


def test_a_channel_broadcast_keeps_the_channel_axis_and_merges_the_rest():
    x, w = data((3, 4, 5, 7)), data((4,))
    assert bounds(lambda x, w: x * w[:, None, None], x, w) == {4, 35}
    (k,), _ = kernels(lambda x, w: x * w[:, None, None], x, w)
    assert coalesce(k).shape == (3, 4, 35) and scale(k, coalesce(k)) == 1


def test_a_batch_norm_sum_over_axes_0_2_3_walks_rows_of_h_times_w():
    x = data((6, 4, 5, 7))
    (k,), text = kernels(lambda x: x.sum(axis=(0, 2, 3)), x)
    assert "[reduce_acc]" in text
    c = coalesce(k)
    assert c.shape == (6, 4, 35) and c.phases[0].axes == (0, 2)    # kept channels between reduced axes
    np.testing.assert_allclose(tg.compile(lambda x: x.sum(axis=(0, 2, 3)))(tg.tensor(x)).numpy(),
                               x.astype(np.float64).sum(axis=(0, 2, 3)), rtol=1e-6)


def test_a_row_kernel_merges_its_inner_axes_and_keeps_its_split():
    x = data((6, 4, 5, 7))
    fn = lambda x: (x - x.mean(axis=(2, 3), keepdim=True)).exp()        # noqa: E731
    ks, _ = kernels(fn, x)
    (row,) = [k for k in ks if k.split == 2]
    c = coalesce(row)
    assert c.shape == (24, 35) and c.split == 1 and scale(row, c) == 4    # rows over (6, 4): one axis


def test_a_permuted_or_sliced_operand_keeps_its_axes():
    x, y = data((3, 4, 7, 5)), data((3, 4, 5, 7))
    (k,), _ = kernels(lambda x, y: x.permute(0, 1, 3, 2) + y, x, y)
    assert coalesce(k).shape in (k.shape, (3, 4, 5, 7))          # reordered: never merged across the transpose
    z = data((3, 4, 5, 9))
    (k,), _ = kernels(lambda z, y: z[..., :7] + y, z, y)
    assert coalesce(k).shape == (60, 7)                           # z's rows of 7 lie 9 apart: not one axis
    assert bounds(lambda z, y: z[..., :7] + y, z, y) == {7}
    z = data((3, 4, 5, 14))
    (k,), _ = kernels(lambda z, y: z[..., ::2] + y, z, y)
    assert coalesce(k).shape == (420,)                            # every other element: one axis of stride 2


@pytest.mark.parametrize("shape", [(40000, 7), (401, 100, 7), (3, 50000)])
def test_merged_axis_0_splits_over_threads_in_its_own_units(shape):
    """Kernels large enough for the runtime's chunks: each chunk's [lo, hi) of the original axis 0
    scaled by the merged sizes (maps, a sum over every axis, row sums over the last axis)."""
    x, y = data(shape), data(shape)
    xd, yd = x.astype(np.float64), y.astype(np.float64)
    f = tg.compile(lambda x, y: (x * 2 + y, (x * y).sum(), (x - y).sum(axis=-1), (x * y).sum(axis=0)))
    outs = [o.numpy() for o in f(tg.tensor(x), tg.tensor(y))]
    refs = [xd * 2 + yd, (xd * yd).sum(), (xd - yd).sum(axis=-1), (xd * yd).sum(axis=0)]
    for o, r in zip(outs, refs):
        np.testing.assert_allclose(o, r, rtol=1e-5, atol=1e-3)


# ------------------------------------------------------------------ compiled == interpret == eager

SIZES = [1, 2, 3, 5, 8, 17]
PROGRAMS = {
    "map": lambda x, b, v: x * b + v.tanh(),
    "sum_leading": lambda x, b, v: (x * b + v).sum(axis=0),
    "sum_chosen": None,                                   # over the drawn axes (keepdim), then a map
    "row_norm": lambda x, b, v: (x - x.mean(axis=-1, keepdim=True)) * b + v,
    "row_softmax": lambda x, b, v: (x * b + v).softmax(dim=-1),
    "sum_all": lambda x, b, v: (x * b * v).sum(),
}


@st.composite
def cases(draw):
    rank = draw(st.integers(2, 5))
    shape = tuple(draw(st.sampled_from(SIZES)) for _ in range(rank))
    bmask = tuple(draw(st.booleans()) for _ in range(rank))          # b: broadcast along these axes
    view = draw(st.sampled_from(["plain", "slice", "permute"]))       # how v is read
    axes = tuple(sorted(draw(st.sets(st.integers(0, rank - 1), min_size=1))))
    return shape, bmask, view, axes, draw(st.sampled_from(sorted(PROGRAMS))), draw(st.sampled_from([np.float32,
                                                                                                     np.float64]))


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_coalesced_kernels_match_interpret_and_eager(case):
    shape, bmask, view, axes, program, dtype = case
    x = data(shape, dtype)
    b = data(tuple(1 if m else n for m, n in zip(bmask, shape)), dtype)
    if view == "slice":
        v = data(shape[:-1] + (2 * shape[-1],), dtype)
    elif view == "permute":
        v = data(shape[::-1], dtype)
    else:
        v = data(shape, dtype)

    def fn(x, b, v):
        if view == "slice":
            v = v[..., ::2]
        elif view == "permute":
            v = v.permute(*range(len(shape) - 1, -1, -1))
        if program == "sum_chosen":
            return (x * b + v).sum(axis=axes, keepdim=True) * x
        return PROGRAMS[program](x, b, v)

    results = []
    for run in ("llvm", "interpret", "eager"):
        ts = [tg.tensor(a, requires_grad=True) for a in (x, b, v)]
        f = fn if run == "eager" else tg.compile(fn, backend=run)
        out = f(*ts)
        (out * out).sum().backward()
        results.append([out.detach().numpy()] + [t.grad.numpy() for t in ts])
    # float32: eager's sums round in float32 (NumPy's pairwise), compiled ones accumulate in float64;
    # their gradients differed by 1.07e-5 of the largest value at rank 3 (a hypothesis draw)
    tol = 4e-5 if dtype == np.float32 else 1e-12
    for other in results[1:]:
        for a, e in zip(results[0], other):
            scale = max(1.0, float(np.max(np.abs(e)))) if e.size else 1.0
            np.testing.assert_allclose(a, e, rtol=0, atol=tol * scale, err_msg=f"{case}")
