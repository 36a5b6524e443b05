"""The block-level scans of long rows (tracegrad/backends/cuda/eager/blockscan.py) against NumPy under the simulator:
cumsum forward and reverse and prod_others, with tiles shrunk to 4 threads x 2 elements so that tiny
rows span many tiles (lengths that are not multiples of a tile, rows of more tiles than a tile of
carries holds), contiguous and transposed inputs, one and two scanned axes, every dtype. The values
are dyadic (sums and products exact in every dtype), so results must be equal, NaN and inf included."""
import contextlib
import os

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

import tracegrad as tg
from tracegrad.core import bind
from tracegrad.backends.cuda.eager import blockscan

EXAMPLES = int(os.environ.get("TRACEGRAD_HYPOTHESIS_EXAMPLES", "10"))
DTYPES = ["float32", "float64", "float16", "int32", "int64", "bool"]
SUMMANDS = [-1.5, -1.0, -0.25, 0.0, 0.5, 1.25, 2.0, np.nan, np.inf, -np.inf]
FACTORS = [-2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0, np.nan, np.inf, -np.inf]


@contextlib.contextmanager
def small_tiles():
    """Tiles of 4 threads x 2 elements, rows of 8 elements or more by blocks; yields the modes of
    the block scans run meanwhile."""
    saved, real, calls = (blockscan.THREADS, blockscan.ITEMS, blockscan.LONG_ROW), blockscan.scan, []
    blockscan.THREADS, blockscan.ITEMS, blockscan.LONG_ROW = 4, 2, 8
    blockscan.scan = lambda *a: calls.append(a[-1]) or real(*a)
    try:
        yield calls
    finally:
        (blockscan.THREADS, blockscan.ITEMS, blockscan.LONG_ROW), blockscan.scan = saved, real


def _reference(a, op, axes):
    """NumPy in float64 (exact for these values), in the result's dtype."""
    w = a.astype(np.float64)
    if op == "cumsum":
        r = np.cumsum(w, axes[0])
    elif op == "cumsum_rev":
        r = np.flip(np.cumsum(np.flip(w, axes[0]), axes[0]), axes[0])
    else:
        moved = np.moveaxis(w, axes, range(-len(axes), 0))
        flat = moved.reshape(moved.shape[:moved.ndim - len(axes)] + (-1,))
        n = flat.shape[-1]
        with np.errstate(invalid="ignore", over="ignore"):
            others = np.stack([np.prod(np.delete(flat, j, -1), -1) for j in range(n)], -1)
        r = np.moveaxis(others.reshape(moved.shape), range(-len(axes), 0), axes)
    return r


@st.composite
def cases(draw):
    op = draw(st.sampled_from(["cumsum", "cumsum_rev", "prod_others"]))
    dtype = draw(st.sampled_from(DTYPES))
    two_axes = op == "prod_others" and draw(st.booleans())
    n = draw(st.integers(8, 75))
    rows = draw(st.integers(1, 2))
    transposed = not two_axes and draw(st.booleans())
    shape = (rows, 3, -(-n // 3)) if two_axes else (rows, n)      # transposed: x.mT, scanned along axis 0
    size = int(np.prod(shape))
    if dtype == "bool":
        a = np.array(draw(st.lists(st.booleans(), min_size=size, max_size=size))).reshape(shape)
    else:
        pool = FACTORS if op == "prod_others" else SUMMANDS
        if dtype.startswith("int"):
            pool = [-2, -1, 0, 1, 2]
        a = np.array(draw(st.lists(st.sampled_from(pool), min_size=size, max_size=size))).reshape(shape).astype(dtype)
    return a, op, transposed, two_axes


def _run(x, op, axes):
    if op == "cumsum":
        return x.cumsum(axes[0])
    if op == "cumsum_rev":
        return bind("cumsum", x, axis=axes[0], reverse=True)
    return bind("prod_others", x, axis=axes)


@settings(max_examples=EXAMPLES, deadline=None)
@given(cases())
@example((np.arange(150, dtype=np.float32).reshape(2, 75) % 5 - 2, "cumsum", False, False))      # 10 tiles a row
@example((np.full((1, 3, 23), 2.0, np.float64), "prod_others", False, True))
@example((np.arange(16, dtype=np.int64).reshape(2, 8) % 3 - 1, "cumsum_rev", False, False))      # one tile a row
def test_long_rows_scanned_by_blocks_equal_numpy(case):
    a, op, transposed, two_axes = case
    x = tg.tensor(a, device="cuda")
    if transposed:
        x = x.mT                     # scanned along axis 0, contiguous in memory
    axes = (1, 2) if two_axes else (0,) if transposed else (1,)
    with small_tiles() as calls:
        got = _run(x, op, axes)
    cpu = tg.tensor(a).mT if transposed else tg.tensor(a)
    want_dtype = _run(cpu, op, axes).dtype           # the type rule's, from the cpu
    assert calls, "the block path was not taken"
    assert got.dtype is want_dtype and got.shape == x.shape
    ref = _reference(a.T if transposed else a, op, axes)
    with np.errstate(invalid="ignore", over="ignore"):
        np.testing.assert_array_equal(got.cpu().numpy(), ref.astype(want_dtype.np))


def test_short_rows_and_strided_scans_keep_the_chunked_path():
    a, b = np.arange(24, dtype=np.float32).reshape(4, 6), np.arange(40, dtype=np.float32).reshape(20, 2)
    with small_tiles() as calls:
        short = tg.tensor(a, device="cuda").cumsum(1)            # rows of 6 < 8
        strided = tg.tensor(b, device="cuda").cumsum(0)          # along a stride of 2
    np.testing.assert_array_equal(short.cpu().numpy(), np.cumsum(a, 1))
    np.testing.assert_array_equal(strided.cpu().numpy(), np.cumsum(b, 0))
    assert not calls


def test_gradient_of_prod_over_a_long_row():
    a = np.array([[0.5, 2.0, -1.0, 0.0, 1.0, 2.0, -0.5, 1.0, 2.0, 0.5, 1.0]], np.float64)
    x = tg.tensor(a, device="cuda", requires_grad=True)
    with small_tiles() as calls:
        tg.compile(lambda t: t.prod(1).sum())(x).backward()
    want = np.array([[np.prod(np.delete(a[0], j)) for j in range(a.shape[1])]])
    np.testing.assert_array_equal(x.grad.cpu().numpy(), want)
    assert calls and set(calls) == {2}        # prod_others (EXCLUSIVE_PRODUCT)
