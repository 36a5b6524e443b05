"""A row kernel's phases that read no result of each other share one walk over the row
(Schedule.walks, ir/walks.py): one loop computes them all, each element's common
subexpressions once. Read from `stage="kernels"` (every phase in exactly one walk, each walk after
the walks of the phases it reads) and checked on values: compiled == interpret == NumPy (float64)
on odd sizes, float32 and float64, transposed and sliced inputs, one chunk or many.

TRACEGRAD_WALK_EXAMPLES raises the hypothesis example count (default 15, for CI)."""
import os
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tracegrad as tg
from tracegrad import scalar as S
from tracegrad.ir.kernels import Kernel, Load, Op, Phase, contiguous_strides
from tracegrad.ir.walks import walks

EXAMPLES = int(os.environ.get("TRACEGRAD_WALK_EXAMPLES", "15"))


def layernorm_loss(x, w, b, g):
    mean = x.mean(axis=1, keepdims=True)
    d = x - mean
    var = (d * d).mean(axis=1, keepdims=True)
    return ((d / (var + 1e-5).sqrt() * w + b) * g).sum()


def _walks(line):
    m = re.search(r"walks=(\S+)", line)
    return None if m is None else [[int(p) for p in re.findall(r"p(\d+)", w)] for w in m.group(1).split(",")]


def test_layernorm_backward_row_sums_and_parameter_sums_share_walks():
    """Its phases (the row sums, the dx map, the w and b gradient sums over the rows) are two walks:
    the parameter sums read nothing the kernel makes, and the row sum that read another row sum
    through dvar reads only the saved statistics once dvar is factored out (ir/passes/factor.py),
    so all sums share the first walk and the dx map is the second."""
    rng = np.random.default_rng(0)
    x = tg.tensor(rng.standard_normal((37, 301)).astype(np.float32), requires_grad=True)
    w, b = (tg.tensor(rng.standard_normal(301).astype(np.float32), requires_grad=True) for _ in "wb")
    g = tg.tensor(rng.standard_normal((37, 301)).astype(np.float32))
    backward = tg.compile(layernorm_loss).ir(x, w, b, g, stage="kernels").split("kernels ")[2]
    (line,) = [ln for ln in backward.splitlines() if re.match(r"\s+k\d+ ", ln)]
    assert _walks(line) == [[0, 1, 2, 3, 5, 6], [4]], line


def _row_kernel(shape, reads):
    """A row kernel over `shape` whose phase j reduces (or, kind "map", writes) the sum of x and the
    outputs of the phases listed in reads[j]."""
    from tracegrad.ir.graph import Graph
    from tracegrad.dtypes import float32
    g = Graph("t")
    x = g.add_input("x", shape, float32)
    rows = shape[:1] + (1,) * (len(shape) - 1)
    phases, outs = [], []
    for j, (kind, deps) in enumerate(reads):
        tree = Load(x, contiguous_strides(shape))
        for d in deps:
            v = outs[d]
            st_ = contiguous_strides(shape) if phases[d].kind == "map" else (1,) + (0,) * (len(shape) - 1)
            tree = Op("add", [tree, Load(v, st_)], float32, S.a + S.b, "cheap")
        out = g.add_input(f"o{j}", shape if kind == "map" else rows, float32)
        outs.append(out)
        phases.append(Phase("map", [(out, tree)]) if kind == "map" else
                      Phase("reduce", [(out, tree)], "sum", tuple(range(1, len(shape))), S.a + S.b, "cheap"))
    return Kernel("loop", shape, 1, phases)


@settings(max_examples=4 * EXAMPLES, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["reduce", "map"]), st.sets(st.integers(0, 7), max_size=3)),
                min_size=1, max_size=8))
def test_walks_partition_phases_and_follow_their_reads(spec):
    """Each phase's walk is the one right after the last walk of the phases it reads (its level in
    the read graph); no walk of two phases: () (one walk per phase)."""
    reads = [(kind, sorted(d for d in deps if d < j)) for j, (kind, deps) in enumerate(spec)]
    level = []
    for _, deps in reads:
        level.append(max((level[d] for d in deps), default=-1) + 1)
    want = [[j for j in range(len(reads)) if level[j] == n] for n in range(max(level) + 1)]
    got = walks(_row_kernel((5, 7), reads))
    assert got == (want if any(len(w) > 1 for w in want) else []), (reads, got)


PROGRAMS = {
    # (fn, numpy oracle) of row kernels whose phases do not all read each other
    "two_sums_and_map": (lambda x, w: x * x.sum(-1, keepdims=True) + (x * w).sum(-1, keepdims=True) * w,
                         lambda x, w: x * x.sum(-1, keepdims=True) + (x * w).sum(-1, keepdims=True) * w),
    "max_and_sum_beside": (lambda x, w: (x.amax(-1, keepdims=True) - x) * (x * w).sum(-1, keepdims=True),
                           lambda x, w: (x.max(-1, keepdims=True) - x) * (x * w).sum(-1, keepdims=True)),
    "row_and_column_sums": (lambda x, w: ((x - x.mean(-1, keepdims=True)) * w).sum(0) + (x * w).sum(0),
                            lambda x, w: ((x - x.mean(-1, keepdims=True)) * w).sum(0) + (x * w).sum(0)),
}


def _layout(a, how):
    """The same values as array a, held transposed or as a slice of a larger array."""
    if how == "transposed":
        return np.ascontiguousarray(a.T).T
    if how == "sliced":
        big = np.zeros((a.shape[0] + 2, a.shape[1] * 2), a.dtype)
        big[1:-1, ::2] = a
        return big[1:-1, ::2]
    return a


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=st.sampled_from([1, 3, 17, 130, 1100]), cols=st.sampled_from([1, 5, 33, 301]),
       name=st.sampled_from(sorted(PROGRAMS)), dtype=st.sampled_from([np.float32, np.float64]),
       layout=st.sampled_from(["contiguous", "transposed", "sliced"]), seed=st.integers(0, 2 ** 16))
def test_compiled_matches_interpret_and_numpy(rows, cols, name, dtype, layout, seed):
    fn, oracle = PROGRAMS[name]
    rng = np.random.default_rng(seed)
    x0 = _layout(rng.standard_normal((rows, cols)).astype(dtype), layout)
    w0 = rng.standard_normal(cols).astype(dtype)
    want = oracle(x0.astype(np.float64), w0.astype(np.float64))
    got = tg.compile(fn)(tg.tensor(x0), tg.tensor(w0)).numpy()
    ref = tg.compile(fn, backend="interpret")(tg.tensor(x0), tg.tensor(w0)).numpy()
    tol = dict(rtol=2e-4, atol=2e-4 * np.abs(want).max()) if dtype == np.float32 else dict(rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(got, want, **tol)
    np.testing.assert_allclose(got, ref, **tol)


@pytest.mark.parametrize("shape", [(3, 5), (37, 301), (1500, 33)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_layernorm_gradients_match_float64_numpy(shape, dtype):
    """Values and the gradients of x, w and b (three walks in one backward kernel, threads' partial
    sums on the larger shape) against NumPy's hand-written layer norm backward in float64."""
    rng = np.random.default_rng(sum(shape))
    x0, g0 = (rng.standard_normal(shape).astype(dtype) for _ in "xg")
    w0, b0 = (rng.standard_normal(shape[1]).astype(dtype) for _ in "wb")
    x, w, b = (tg.tensor(a, requires_grad=True) for a in (x0, w0, b0))
    loss = tg.compile(layernorm_loss)(x, w, b, tg.tensor(g0))
    loss.backward()
    X, G, Wt, B = (a.astype(np.float64) for a in (x0, g0, w0, b0))
    mu = X.mean(1, keepdims=True)
    rstd = 1 / np.sqrt(((X - mu) ** 2).mean(1, keepdims=True) + 1e-5)
    xhat = (X - mu) * rstd
    dxhat = G * Wt
    dx = rstd * (dxhat - dxhat.mean(1, keepdims=True) - xhat * (dxhat * xhat).mean(1, keepdims=True))
    tol = dict(rtol=1e-3, atol=1e-3) if dtype == np.float32 else dict(rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(loss.item(), ((xhat * Wt + B) * G).sum(), **tol)
    np.testing.assert_allclose(x.grad.numpy(), dx, **tol)
    np.testing.assert_allclose(w.grad.numpy(), (G * xhat).sum(0), **tol)
    np.testing.assert_allclose(b.grad.numpy(), G.sum(0), **tol)
