"""Reductions of views by memory layout (backends/cpu/plan/order.py, ir/layout.py): one whose reduced axes are the
innermost in memory (x.T.sum(0): row sums of x) runs as a row kernel over a permuted space
(rows_first, applied by fusion), not as an accumulation over rows; an accumulation whose large reads
disagree on the unit-stride axis ((x.T * z).sum(0)) is tiled; a row reduction whose reads disagree
((x.T * z).sum(1)) reduces across the kept axis in tiles of MIXED_TILE (ir/layout.py's mixed). Read from
`stage="kernels"`, and
compiled == NumPy (float64 oracle) == interpret, with gradients, on permuted and strided views of
odd sizes."""
import re
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import tracegrad as tg
from tracegrad.backends.cpu.plan import limits
from tracegrad.backends.cpu.machine import FIELDS
from tracegrad.backends.cpu.plan.limits import MIXED_TILE

TILE = FIELDS["tile"].default        # TRACEGRAD_CALIBRATION=off (conftest.py)

RNG = np.random.default_rng(5)


def kernel_lines(fn, *arrays):
    text = tg.compile(fn).ir(*[tg.tensor(a) for a in arrays], stage="kernels")
    return [line for line in text.splitlines() if re.match(r"\s+k\d+ ", line)]


@pytest.mark.parametrize("fn, shape, space", [
    (lambda x: x.T.sum(0), (37, 53), "37x53 split=1 ops=sum"),
    (lambda x: x.permute(1, 2, 0).mean((0, 1)), (5, 7, 9), "5x7x9 split=1 ops=sum"),
    (lambda x: x.permute(1, 2, 0).amax(dim=(0, 1)), (6, 4, 3), "6x4x3 split=1 ops=max"),
    (lambda x: x.transpose(0, 2).sum((0, 1)), (4, 5, 6), "4x5x6 split=1 ops=sum"),
    (lambda x: x.T.sum(0, keepdim=True), (37, 53), "37x53 split=1 ops=sum"),        # keepdims too: a batch
    (lambda x: x.permute(1, 0, 2, 3).mean((0, 2, 3), keepdim=True), (3, 4, 5, 6),   # norm's statistics of a
     "3x4x5x6 split=1 ops=sum"),                                                     # channel-major conv output
])
def test_reductions_over_memory_rows_are_row_kernels(fn, shape, space):
    lines = kernel_lines(fn, RNG.standard_normal(shape).astype(np.float32))
    assert any("[loop]" in line and f"space={space}" in line for line in lines), lines
    assert not any("reduce_acc" in line for line in lines), lines


@pytest.mark.parametrize("fn, shape", [
    (lambda x: x.sum((0, 2, 3)), (4, 3, 5, 6)),            # a kept axis between reduced ones in memory
    (lambda x: x.sum(0), (37, 53)),                        # a column sum: across the kept axis
])
def test_other_leading_reductions_stay_accumulations_or_across(fn, shape):
    (line,) = kernel_lines(fn, RNG.standard_normal(shape).astype(np.float32))
    assert "[reduce_acc]" in line or "reduce=across" in line, line


def test_reads_that_disagree_accumulate_over_tiles_beyond_the_cache():
    x, y = RNG.standard_normal((4, 300, 400)).astype(np.float32), RNG.standard_normal((4, 400, 300)).astype(np.float32)
    fn = lambda x, y: (x * y.transpose(1, 2)).sum(0)        # noqa: E731  both unit-stride axes kept
    (line,) = kernel_lines(fn, x, y)
    assert "[reduce_acc]" in line and line.endswith(f"loops=d0,d1/{TILE},d2/{TILE},d1,d2"), line
    (line,) = kernel_lines(fn, x[:, :40, :33], y[:, :33, :40])   # in cache: not tiled
    assert "[reduce_acc]" in line and f"/{TILE}" not in line, line


def test_a_leading_reduction_one_read_lays_innermost_is_a_mixed_row_reduction():
    """(x.T * z).sum(0) is (x * z.T).sum(1): x's rows are its rows, z is read across them."""
    x, z = RNG.standard_normal((700, 800)).astype(np.float32), RNG.standard_normal((800, 700)).astype(np.float32)
    (line,) = kernel_lines(lambda x, z: (x.T * z).sum(0), x, z)
    assert "[loop] space=700x800 split=1" in line and line.endswith(
        f"loops=d0/{MIXED_TILE},d1,d0 reduce=across d0 transpose=1"), line


@pytest.mark.parametrize("fn, shapes, loops", [
    (lambda x, z: (x.T * z).sum(1), [(37, 45), (45, 37)], f"loops=d0/{MIXED_TILE},d1,d0 reduce=across d0"),
    (lambda x, z: (z * x.T).amax(dim=1), [(37, 45), (45, 37)], f"loops=d0/{MIXED_TILE},d1,d0 reduce=across d0"),
    (lambda x, z: (x.permute(0, 2, 1) * z).sum(-1), [(3, 40, 50), (3, 50, 40)],
     f"loops=d0,d1/{MIXED_TILE},d2,d1 reduce=across d1"),
])
def test_row_reductions_whose_reads_disagree_reduce_across_narrow_tiles(fn, shapes, loops):
    (line,) = kernel_lines(fn, *[RNG.standard_normal(s).astype(np.float32) for s in shapes])
    assert "[loop]" in line and line.endswith(loops), line


def test_row_reductions_whose_reads_agree_keep_their_schedule():
    x = RNG.standard_normal((45, 37)).astype(np.float32)
    (line,) = kernel_lines(lambda x, z: (x.T * z.T).sum(1), x, x)          # both across d0: by rows
    assert line.endswith("loops=d1,d0 reduce=across d0 threads=d1"), line
    (line,) = kernel_lines(lambda x, z: (x * z).sum(1), x, x)              # both along the rows
    assert "loops=" not in line, line


@st.composite
def mixed(draw):
    """A row reduction of x's transpose (maybe strided) times a row-major z, of odd sizes about MIXED_TILE."""
    n, m = (draw(st.sampled_from([1, 2, 5, 31, 32, 33, 70, 97])) for _ in range(2))
    step = draw(st.sampled_from([1, 2]))
    return n, m, step, draw(st.sampled_from(["sum", "mean", "amax"])), draw(st.sampled_from([np.float32, np.float64]))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mixed())
def test_row_reductions_whose_reads_disagree_match_numpy_and_interpret(case):
    n, m, step, op, dtype = case
    x = RNG.standard_normal((m, n * step)).astype(dtype)
    z = RNG.standard_normal((n, m)).astype(dtype)

    def fn(x, z):
        return OPS[op](x[:, ::step].T * z + z, 1)

    xv = x[:, ::step].T.astype(np.float64)
    expect = NP[op](xv * z + z, axis=1)
    results = []
    for backend in ("llvm", "interpret"):
        xs, zs = tg.tensor(x, requires_grad=True), tg.tensor(z, requires_grad=True)
        out = tg.compile(fn, backend=backend)(xs, zs)
        (out * out).sum().backward()
        results.append((out.detach().numpy(), xs.grad.numpy(), zs.grad.numpy()))
    if op == "amax":       # the gradient of a maximum: to the element that holds it
        rows = np.arange(n)
        gx, gz = np.zeros(xv.shape), np.zeros(z.shape)
        k = np.argmax(xv * z + z, axis=1)
        gx[rows, k], gz[rows, k] = 2 * expect * z[rows, k], 2 * expect * (xv[rows, k] + 1)
    else:
        w = 2 * expect[:, None] / (m if op == "mean" else 1)
        gx, gz = w * z, w * (xv + 1)
    full = np.zeros((m, n * step))
    full[:, ::step] = gx.T
    tol = (1e-4 if dtype == np.float32 else 1e-11) * max(1, m) ** 0.5
    for got, ref in zip(results[0], (expect, full, gz)):
        s = max(1.0, float(np.max(np.abs(ref))))
        np.testing.assert_allclose(got, ref, rtol=0, atol=tol * s, err_msg=str(case))
    for got, ref in zip(results[0], results[1]):
        s = max(1.0, float(np.max(np.abs(ref))))
        np.testing.assert_allclose(got, ref, rtol=0, atol=tol * s, err_msg=str(case))


SIZES = [1, 2, 3, 7, 31, 33, 65, 130]
OPS = {"sum": lambda z, ax, k=False: z.sum(ax, keepdim=k), "mean": lambda z, ax, k=False: z.mean(ax, keepdim=k),
       "amax": lambda z, ax, k=False: z.amax(dim=ax, keepdim=k), "amin": lambda z, ax, k=False: z.amin(dim=ax, keepdim=k)}
NP = {"sum": np.sum, "mean": np.mean, "amax": np.max, "amin": np.min}


def _space(draw, most_axes, keep_one):
    """(shape of 2..most_axes odd sizes, at most 40,000 elements; sorted reduced axes: at least one,
    all but one at most if keep_one, else all at most)."""
    nd = draw(st.integers(2, most_axes))
    shape = [draw(st.sampled_from(SIZES)) for _ in range(nd)]
    while np.prod(shape) > 40_000:
        shape[int(np.argmax(shape))] //= 2
    k = draw(st.integers(1, nd - 1 if keep_one else nd))
    return shape, tuple(sorted(draw(st.sets(st.integers(0, nd - 1), min_size=k, max_size=k))))


@st.composite
def cases(draw):
    shape, axes = _space(draw, 4, keep_one=True)
    perm = tuple(draw(st.permutations(range(len(shape)))))
    step = draw(st.sampled_from([None] + list(range(len(shape)))))
    return (tuple(shape), perm, axes, step, draw(st.sampled_from(sorted(OPS))),
            draw(st.sampled_from([np.float32, np.float64])), draw(st.booleans()))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_reductions_of_permuted_views_match_numpy_and_interpret(case):
    shape, perm, axes, step, op, dtype, keep = case
    x = (RNG.standard_normal(shape) + 0.5).astype(dtype)
    idx = tuple(slice(None, None, 2) if d == step else slice(None) for d in range(len(shape)))
    view = x[idx].transpose(perm)
    assume(all(view.shape[d] > 0 for d in axes) or op == "sum")

    def fn(x):
        return OPS[op](x[idx].permute(*perm) * 1.5, axes, keep)

    expect = NP[op](view.astype(np.float64) * 1.5, axis=axes, keepdims=keep)
    results = []
    for backend in ("llvm", "interpret"):
        xs = tg.tensor(x, requires_grad=True)
        out = tg.compile(fn, backend=backend)(xs)
        (out * out).sum().backward()
        results.append((out.detach().numpy(), xs.grad.numpy()))
    tol = 1e-4 if dtype == np.float32 else 1e-11
    scale = max(1.0, float(np.max(np.abs(expect)))) if expect.size else 1.0
    np.testing.assert_allclose(results[0][0], expect, rtol=0, atol=tol * scale * max(1, view.size) ** 0.5,
                               err_msg=str(case))
    for got, ref in zip(results[0], results[1]):
        s = max(1.0, float(np.max(np.abs(ref)))) if ref.size else 1.0
        np.testing.assert_allclose(got, ref, rtol=0, atol=tol * s * max(1, view.size) ** 0.5, err_msg=str(case))


@st.composite
def pairs(draw):
    shape, axes = _space(draw, 3, keep_one=False)
    perms = [tuple(draw(st.permutations(range(len(shape))))) for _ in range(2)]
    return tuple(shape), perms, axes, draw(st.sampled_from(["sum", "amax"])), draw(st.sampled_from([np.float32, np.float64]))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pairs())
def test_reductions_of_two_views_in_different_layouts_match_numpy_and_interpret(case):
    """Two full-size operands, each a permuted view of its own array: the reads may disagree on every
    axis, the reduction keeps any axes (or none). Accumulations are tiled at any size here."""
    shape, (p, q), axes, op, dtype = case
    inv = [tuple(np.argsort(perm)) for perm in (p, q)]
    x, y = (RNG.standard_normal(tuple(shape[d] for d in inv_)).astype(dtype) for inv_ in inv)
    xv, yv = x.transpose(p), y.transpose(q)          # both of `shape`, laid out differently

    def fn(x, y):
        return OPS[op](x.permute(*p) * y.permute(*q) + x.permute(*p), axes)

    expect = NP[op](xv.astype(np.float64) * yv + xv, axis=axes)
    results = []
    for backend in ("llvm", "interpret"):
        xs, ys = tg.tensor(x, requires_grad=True), tg.tensor(y, requires_grad=True)
        with mock.patch.object(limits, "TILED_ACC_BYTES", 0):
            out = tg.compile(fn, backend=backend)(xs, ys)
            (out * out).sum().backward()
        results.append((out.detach().numpy(), xs.grad.numpy(), ys.grad.numpy()))
    tol = (1e-4 if dtype == np.float32 else 1e-11) * max(1, xv.size) ** 0.5
    scale = max(1.0, float(np.max(np.abs(expect)))) if expect.size else 1.0
    np.testing.assert_allclose(results[0][0], expect, rtol=0, atol=tol * scale, err_msg=str(case))
    for got, ref in zip(results[0], results[1]):
        s = max(1.0, float(np.max(np.abs(ref)))) if ref.size else 1.0
        np.testing.assert_allclose(got, ref, rtol=0, atol=tol * s, err_msg=str(case))


def test_mixed_reductions_transpose_the_operand_along_the_reduced_axis_in_registers():
    """Above REGS_MIN bytes moved, the operand that walks the innermost reduced axis with unit stride
    (z) is read a tile at a time and transposed in registers (backends/cpu/transpose.py)."""
    x, z = RNG.standard_normal((45, 37)).astype(np.float32), RNG.standard_normal((37, 45)).astype(np.float32)
    (line,) = kernel_lines(lambda x, z: (x.T * z).sum(1), x, z)
    assert "transpose=" not in line, line                                       # in cache: gathers
    with mock.patch.object(limits, "REGS_MIN", 0):
        (line,) = kernel_lines(lambda x, z: (x.T * z + z).sum(1), x, z)        # one tile for both reads of z
        assert line.endswith(f"loops=d0/{MIXED_TILE},d1,d0 reduce=across d0 transpose=1"), line
        (line,) = kernel_lines(lambda x, z: (x.T * z.T.T).amax(dim=1), x, z)
        assert line.endswith("transpose=1"), line
        (line,) = kernel_lines(lambda x, z: (x.T * z[:, ::2]).sum(1), RNG.standard_normal((23, 37)).astype(np.float32), z)
        assert "transpose=" not in line, line                                   # z strided along d1: gathers


@st.composite
def mixed_transposed(draw):
    """(x's shape, x's permutation, z's shape, reduced axes, op, dtype): x.permute(perm) * z of one
    space whose reads disagree (one walks a reduced axis with unit stride, the other a kept one);
    sizes around the vector's lanes, the tile and the float sums' blocks (reductions.BLOCK)."""
    sizes = st.sampled_from([1, 3, 8, 15, 16, 17, 33, 64, 131, 260])
    if draw(st.booleans()):                                      # (n, m): x.T * z, summed over d1 or d0
        n, m = draw(sizes), draw(sizes)
        return (m, n), (1, 0), (n, m), (draw(st.sampled_from([0, 1])),), draw(st.sampled_from(["sum", "amax"])), \
            draw(st.sampled_from([np.float32, np.float64, np.int32]))
    a, b, c = draw(st.sampled_from([1, 2, 5])), draw(sizes), draw(st.sampled_from([2, 7, 17, 40]))
    if draw(st.booleans()):                                      # (a, c, b): a batch of them, over the last axis
        return (a, b, c), (0, 2, 1), (a, c, b), (2,), "sum", draw(st.sampled_from([np.float32, np.float64]))
    return (a, b, c), (2, 0, 1), (c, a, b), (1, 2), "sum", draw(st.sampled_from([np.float32, np.float64]))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mixed_transposed())
def test_mixed_reductions_through_register_tiles_match_numpy_and_interpret(case):
    xshape, perm, zshape, axes, op, dtype = case
    x = (RNG.standard_normal(xshape) * 4).astype(dtype)
    z = (RNG.standard_normal(zshape) * 4).astype(dtype)

    def fn(x, z):
        return OPS[op](x.permute(*perm) * z + z, axes)

    expect = NP[op](x.transpose(perm).astype(np.float64) * z + z, axis=axes)
    got = []
    with mock.patch.object(limits, "REGS_MIN", 0):
        for backend in ("llvm", "interpret"):
            got.append(tg.compile(fn, backend=backend)(tg.tensor(x), tg.tensor(z)).numpy())
            if backend == "llvm" and min(zshape[0], zshape[-1]) > 1:       # the reads disagree
                line = [ln for ln in tg.compile(fn).ir(tg.tensor(x), tg.tensor(z), stage="kernels").splitlines()
                        if "reduce=across" in ln]
                assert line and line[0].endswith("transpose=1"), (line, case)
    if dtype == np.int32:
        np.testing.assert_array_equal(got[0], expect.astype(got[0].dtype), err_msg=str(case))
    tol = (1e-4 if dtype == np.float32 else 1e-11) * max(1, x.size) ** 0.5 * max(1.0, float(np.max(np.abs(expect))))
    np.testing.assert_allclose(got[0], expect, rtol=0, atol=tol, err_msg=str(case))
    np.testing.assert_allclose(got[0], got[1], rtol=0, atol=tol, err_msg=str(case))
