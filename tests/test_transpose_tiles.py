"""Transposing maps read through register-transposed tiles (Schedule.transposed, backends/cpu/transpose.py):
which operands the schedule transposes (read from `stage="kernels"`), the fallbacks, and compiled ==
interpret == eager on transposed, permuted, strided and broadcast operands of odd sizes (whole
tiles and the cut edge), both float dtypes, with gradients.

TRACEGRAD_TRANSPOSE_EXAMPLES raises the hypothesis example count (default 20, for CI)."""
import os
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tracegrad as tg
from tracegrad.backends.cpu import machine
from tracegrad.backends.cpu.plan import limits
from tracegrad.backends.cpu.plan.limits import TRANSPOSED

EXAMPLES = int(os.environ.get("TRACEGRAD_TRANSPOSE_EXAMPLES", "20"))
RNG = np.random.default_rng(0)


@pytest.fixture(autouse=True)
def _register_tiles_at_test_sizes(monkeypatch):
    """Register transposes start above REGS_MIN bytes moved; these tests exercise them on small arrays."""
    monkeypatch.setattr(limits, "REGS_MIN", 0)


def kernel_lines(fn, *arrays):
    ts = [tg.tensor(a) for a in arrays]
    return [line for line in tg.compile(fn).ir(*ts, stage="kernels").splitlines() if re.match(r"\s+k\d+ ", line)]


def transposed(line):
    """The number of operands a kernel line says it transposes in registers (0: none)."""
    m = re.search(r" transpose=(\d+)$", line)
    return int(m.group(1)) if m else 0


def data(shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
def test_a_transposed_map_reads_its_operand_through_register_tiles(dtype):
    x = data((70, 45)).astype(dtype)
    (line,) = kernel_lines(lambda x: x.T * 2, x)
    assert re.search(r"loops=d1/\d+,d0/\d+,d0,d1 transpose=1$", line), line
    for copy in (lambda x: x.T + 0, lambda x: x.T.contiguous(), lambda x: x.mT.reshape(-1)):   # copies
        (line,) = kernel_lines(copy, x)
        assert transposed(line) == 1, line


def test_batched_and_other_permutes_transpose_their_two_unit_axes():
    x = data((3, 37, 41))
    (line,) = kernel_lines(lambda x: x.permute(0, 2, 1).exp(), x)
    assert re.search(r"loops=d0,d2/\d+,d1/\d+,d1,d2 transpose=1$", line), line
    (line,) = kernel_lines(lambda x: x.permute(2, 1, 0) * 3.0, x)     # space (41, 37, 3): d0 and d2 tiled
    assert re.search(r"loops=d1,d2/\d+,d0/\d+,d0,d2 transpose=1$", line), line


def test_channels_last_permute_of_4d_values():
    """NCHW -> NHWC (permute(0, 2, 3, 1)): W and C tiled, each C row read from a tile of W x C."""
    x = data((2, 40, 3, 35))
    fn = lambda x: x.permute(0, 2, 3, 1) + 1.0               # noqa: E731
    (line,) = kernel_lines(fn, x)
    assert re.search(r"loops=d0,d1,d3/\d+,d2/\d+,d2,d3 transpose=1$", line), line
    np.testing.assert_array_equal(tg.compile(fn)(tg.tensor(x)).numpy(), x.transpose(0, 2, 3, 1) + np.float32(1))


def test_each_operand_by_its_own_layout():
    x, y, w = data((50, 40)), data((40, 50)), data((50, 1))
    (line,) = kernel_lines(lambda x, y: x.T * y, x, y)                # y is read along the output rows
    assert transposed(line) == 1, line
    (line,) = kernel_lines(lambda x, y: x.T * y.T.T + x.T.exp(), x, y)  # one tile serves both reads of x.T
    assert transposed(line) == 1, line
    (line,) = kernel_lines(lambda x, z: x.T - z.T, x, data((50, 40)))
    assert transposed(line) == 2, line
    (line,) = kernel_lines(lambda x, w: x.T * w.T, x, w)              # w.T: broadcast along the columns
    assert transposed(line) == 1, line
    xs = [data((50, 40)) for _ in range(TRANSPOSED + 1)]
    (line,) = kernel_lines(lambda *xs: sum(x.T for x in xs), *xs)      # at most TRANSPOSED stack tiles
    assert transposed(line) == TRANSPOSED, line


def test_fallbacks_keep_the_tiled_element_loops():
    x = data((70, 45))
    (line,) = kernel_lines(lambda x: x.T.to(tg.float16) * 1, x.astype(np.float16))   # 2-byte elements
    assert "loops=d0/" in line and transposed(line) == 0, line
    (line,) = kernel_lines(lambda x: x.T, (x > 0))                     # bool: 1-byte elements
    assert transposed(line) == 0, line
    (line,) = kernel_lines(lambda x: x.T.sum(axis=1), x)               # reductions: not a map
    assert transposed(line) == 0, line


def test_operands_weigh_the_bytes_they_read_not_their_buffers():
    """x[:, :n] reads n columns of x's rows (x[::3] every third row): as many bytes as the output,
    so the transpose is tiled (the output's unit axis innermost), not walked in x's memory order with
    every store strided; an operand wider than the output (float64 into float32) still leaves the
    outputs' unit axis innermost when its tile transposes in registers."""
    for fn, x in ((lambda x: x[:, :40].T * 2.0, data((50, 160))), (lambda x: x[::3].T * 2.0, data((210, 45))),
                  (lambda x: x.T.to(tg.float32), data((70, 45), np.float64))):
        (line,) = kernel_lines(fn, x)
        assert re.search(r"loops=d1/\d+,d0/\d+,d0,d1 transpose=1$", line), line
        np.testing.assert_array_equal(tg.compile(fn)(tg.tensor(x)).numpy(), fn(tg.tensor(x)).numpy())


def test_large_outputs_transpose_in_registers_only_with_rows_of_whole_lines():
    """Beyond REGS_CACHED bytes of output, rows of whole 64-byte lines take the register tiles (b's
    tiles outermost where the output streams, else a's); others keep the element loops
    (plan/order.py's transposed and settle: their measurements)."""
    (line,) = kernel_lines(lambda x: x.T * 2.0, data((1040, 1024)))    # rows of 1040 float32: 65 lines
    assert transposed(line) == 1, line
    (line,) = kernel_lines(lambda x: x.T * 2.0, data((1030, 1024)))    # 1030 float32: not whole lines
    assert line.endswith("loops=d0/32,d1/32,d0,d1"), line
    # the same whole lines read by a later kernel (a matrix product): not streamed, a's tiles outermost
    x, v = data((1040, 1024)), data((1040, 3))
    fn = lambda x, v: (x.T * 2.0) @ v                       # noqa: E731
    lines = kernel_lines(fn, x, v)
    assert lines[0].endswith("loops=d0/32,d1/32,d0,d1 transpose=1"), lines
    exact, scale = (x.T.astype(np.float64) * 2) @ v, (np.abs(x.T.astype(np.float64)) * 2) @ np.abs(v)
    got = tg.compile(fn)(tg.tensor(x), tg.tensor(v)).numpy()        # float32 sums of 1040 terms: error ~ eps * scale
    assert np.all(np.abs(got - exact) <= 1e-5 * scale), np.max(np.abs(got - exact) / scale)
    # written straight into an existing array (an in-place update): not streamed either
    x, y = data((4, 256, 300)), tg.tensor(np.zeros((4, 300, 256), np.float32))
    f = tg.compile(lambda x, y: y.copy_(x.permute(0, 2, 1) * 2.0))
    f(tg.tensor(x), y)
    np.testing.assert_array_equal(y.numpy(), x.transpose(0, 2, 1) * np.float32(2))
    assert f.ir(tg.tensor(x), y, stage="kernels").endswith("loops=d0,d1/32,d2/32,d1,d2 transpose=1")


def test_a_transposed_update_of_its_own_input():
    """x.copy_(x.T * 2) reads what it overwrites: as eager does, the values of x before the update."""
    x = data((70, 70))
    xs = tg.tensor(x.copy())
    tg.compile(lambda x: x.copy_(x.T * 2.0))(xs)
    np.testing.assert_array_equal(xs.numpy(), x.T * np.float32(2.0))


def test_operands_of_two_widths_in_one_kernel():
    x, y = data((70, 40)), data((70, 40), np.float64)
    f = lambda x, y: x.T * y.T + x.T.to(tg.float64)          # noqa: E731
    (line,) = kernel_lines(f, x, y)
    assert transposed(line) == 2, line
    np.testing.assert_allclose(tg.compile(f)(tg.tensor(x), tg.tensor(y)).numpy(),
                               x.T.astype(np.float64) * y.T + x.T, rtol=1e-12)


@pytest.mark.parametrize("shape", [(2, 2), (37, 41), (300, 70)])
def test_row_kernel_over_a_transposed_view_with_a_sum_over_its_rows(shape):
    """The backward of z * y + r - c, z a transposed view: one row kernel sums over its rows (r's
    gradient) beside row sums (c's) and maps; it keeps natural order (the across lowerings keep no
    sums over the rows: they wrote r's gradient out of place, found by the generated cases below)."""
    m, n = shape
    x, y, r, c = data((n, m)), data((m, n)), data((1, n)), data((m, 1))
    fn = lambda x, y, r, c: x.T * y + r - c                  # noqa: E731
    grads = []
    for f in (fn, tg.compile(fn)):
        ts = [tg.tensor(a, requires_grad=True) for a in (x, y, r, c)]
        (f(*ts) ** 2).sum().backward()
        grads.append([t.grad.numpy() for t in ts])
    for a, e in zip(*grads):
        np.testing.assert_allclose(a, e, rtol=1e-4, atol=1e-4)


# ------------------------------------------------------------------ compiled == interpret == eager

SIZES = [1, 2, 5, 16, 31, 32, 33, 47, 64, 65, 97]
PROGRAMS = {                     # z: the transposed view (m, n); y: (m, n) contiguous; r: (1, n); c: (m, 1)
    "scale": lambda z, y, r, c: z * 2.0,
    "copy": lambda z, y, r, c: z + 0.0,
    "exp": lambda z, y, r, c: (z * 0.5).exp(),
    "mixed": lambda z, y, r, c: z * y + r - c,
    "twice": lambda z, y, r, c: z * z.tanh() + y.T.T,
    "where": lambda z, y, r, c: tg.where(z > 0, z, y * c),
    "shifted": lambda z, y, r, c: z[1:] - z[:-1] if z.shape[0] > 1 else z * 1.0,
}


@st.composite
def cases(draw):
    batch = draw(st.sampled_from([(), (1,), (3,)]))
    m, n = draw(st.sampled_from(SIZES)), draw(st.sampled_from(SIZES))
    stride = draw(st.sampled_from([1, 1, 2]))                # x[..., ::2, :]: rows of x skipped
    return batch, m, n, stride, draw(st.sampled_from(sorted(PROGRAMS))), draw(st.sampled_from([np.float32, np.float64]))


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_transposed_maps_match_interpret_and_eager(case):
    batch, m, n, stride, program, dtype = case
    x = data(batch + (n * stride, m), dtype)
    y, r, c = data(batch + (m, n), dtype), data((1, n), dtype), data((m, 1), dtype)

    def fn(x, y, r, c):
        z = x[..., ::stride, :].transpose(-1, -2)
        return PROGRAMS[program](z, y, r, c)

    results = []
    for run in ("llvm", "interpret", "eager"):
        ts = [tg.tensor(a, requires_grad=True) for a in (x, y, r, c)]
        f = fn if run == "eager" else tg.compile(fn, backend=run)
        out = f(*ts)
        (out * out).sum().backward()
        results.append([out.detach().numpy()] + [t.grad.numpy() if t.grad is not None else None for t in ts])
    tol = 1e-5 if dtype == np.float32 else 1e-12
    for other in results[1:]:
        for a, e in zip(results[0], other):
            assert (a is None) == (e is None), case
            if a is not None:
                scale = max(1.0, float(np.max(np.abs(e)))) if e.size else 1.0
                np.testing.assert_allclose(a, e, rtol=0, atol=tol * scale, err_msg=f"{case}")


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
@pytest.mark.parametrize("shape", [(64, 96), (65, 97), (2, 33, 130)])
def test_transposing_copies_are_exact(dtype, shape):
    x = (RNG.standard_normal(shape) * 100).astype(dtype)
    f = tg.compile(lambda x: x.transpose(-1, -2) + 0)
    np.testing.assert_array_equal(f(tg.tensor(x)).numpy(), np.swapaxes(x, -1, -2))
    g = tg.compile(lambda x, y: y.copy_(x.transpose(-1, -2)))         # written into an existing array
    y = tg.tensor(np.zeros(np.swapaxes(x, -1, -2).shape, dtype))
    g(tg.tensor(x), y)
    np.testing.assert_array_equal(y.numpy(), np.swapaxes(x, -1, -2))


def test_small_maps_keep_scalar_tiles(monkeypatch):
    """At most REGS_MIN bytes moved: tiled without register transposes (in cache, as fast, half the
    compile time), and the same values."""
    monkeypatch.setattr(limits, "REGS_MIN", 256 << 10)
    x, g = data((32, 128)), data((128, 32))
    fn = lambda x, g: tg.where(x.T > 0.5, g, 0.0)       # a relu backward's mask, transposed
    (line,) = kernel_lines(fn, x, g)
    assert transposed(line) == 0 and f"/{machine.value('tile')}," in line, line
    np.testing.assert_array_equal(tg.compile(fn)(tg.tensor(x), tg.tensor(g)).numpy(), np.where(x.T > 0.5, g, 0.0))
    (line,) = kernel_lines(fn, data((160, 256)), data((256, 160)))       # 480 KiB moved
    assert transposed(line) == 1, line
