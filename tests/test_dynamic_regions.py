"""Threads for programs compiled with symbolic sizes (dynamic=True): at the traced size, the split over
the thread pool and the regions (backends/cpu/regions.py) are those of the static compile, and the values
match NumPy over size sequences. A kernel whose chunks accumulate partial results of symbolic shape (a
layer norm's backward: the weight and bias gradients summed over the rows, of width T) splits too, its
partials sized per call (Region.resize)."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tracegrad as tg
from tracegrad.backends.cpu import regions

RNG = np.random.default_rng(26)
SPLIT_AT = 4096       # element-ops: the kernels of these tests' sizes split


@pytest.fixture
def split_small(monkeypatch):
    monkeypatch.setenv("TRACEGRAD_THRESHOLDS", f"parallel_min_work={SPLIT_AT}")


def _layernorm(x, w, b, g):
    mean = x.mean(axis=1, keepdims=True)
    d = x - mean
    var = (d * d).mean(axis=1, keepdims=True)
    return ((d / (var + 1e-5).sqrt() * w + b) * g).sum()


def _numpy_layernorm(x, w, b, g):
    """loss, dx, dw, db of _layernorm in float64."""
    x, w, b, g = (a.astype(np.float64) for a in (x, w, b, g))
    d = x - x.mean(axis=1, keepdims=True)
    rstd = 1 / np.sqrt((d * d).mean(axis=1, keepdims=True) + 1e-5)
    xhat = d * rstd
    dxhat = g * w
    dx = rstd * (dxhat - dxhat.mean(axis=1, keepdims=True) - xhat * (dxhat * xhat).mean(axis=1, keepdims=True))
    return ((xhat * w + b) * g).sum(), dx, (g * xhat).sum(axis=0), g.sum(axis=0)


def _center(x, w):
    z = x.t()
    y = (z - z.mean(axis=1, keepdims=True)) * w[:, None]
    return (y * y).sum()


def _arrays(b, t):
    return [RNG.standard_normal(s).astype(np.float32) for s in ((b, t), (t,), (t,), (b, t))]


def _step(f, arrays):
    ts = [tg.tensor(a, requires_grad=k < 3) for k, a in enumerate(arrays)]
    loss = f(*ts)
    loss.backward()
    return [loss.detach().numpy()] + [t.grad.numpy() for t in ts[:3]]


def _entry(f, ts):
    """f's entry (for these sizes) that a call on tensors like `ts` (their grads not yet set) runs."""
    like = [tg.tensor(t.detach().numpy(), requires_grad=t.requires_grad) for t in ts]
    return f._entry_for(tuple(like), {}, concrete=True)[0]


def _regions(f, ts):
    """Per program of f's entry for tensors `ts` (forward, the backward its calls used, the forward with
    gradient where joined): the kernels its last call ran split as (index, kind, chunks, accumulated outputs)."""
    entry = _entry(f, ts)
    progs = [*(entry.programs or ()), *(p for got in entry._partial.values() for p in got[0]),
             getattr(entry, "joined_program", None)]
    out = []
    for p in (p for p in progs if p is not None):
        kernels = {r.chunks.entry: r for r in p.regions if r.chunks.members is None and r.used > 1}
        out.append(sorted((j, k.kind, kernels[name].used, len(kernels[name].chunks.outs))
                          for j, k in enumerate(p.kernels) for name in kernels if name.endswith(f"_k{j}")))
    return out


@pytest.mark.parametrize("fn, shapes", [(_layernorm, ((64, 96), (96,), (96,), (64, 96))),
                                        (_center, ((256, 32), (32,)))])
def test_symbolic_programs_split_as_the_static_one(split_small, fn, shapes):
    """At the traced sizes, dynamic=True splits the same kernels into the same chunks, with the same
    accumulated partials, as the static compile: the layer norm's backward row kernel (its weight and
    bias gradients partials of symbolic width) and the centering's backward across rows included."""
    arrays = [RNG.standard_normal(s).astype(np.float32) for s in shapes]
    got = {}
    for dynamic in (False, True):
        f = tg.compile(fn, dynamic=dynamic)
        ts = [tg.tensor(a, requires_grad=k < 3) for k, a in enumerate(arrays)]
        f(*ts).backward()
        got[dynamic] = _regions(f, ts)
    assert got[True] == got[False], got
    assert sum(1 for prog in got[True] for *_, outs in prog if outs) >= 2, got     # regions joining partials


@settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck))
@given(sizes=st.lists(st.tuples(st.sampled_from([1, 3, 40, 200]), st.sampled_from([2, 17, 96, 300])),
                      min_size=3, max_size=6))
def test_partials_of_symbolic_width_follow_each_call(split_small, sizes):
    """A layer norm compiled once with dynamic=True over rows and widths that grow and shrink (the
    partials of its weight and bias gradients reallocated for a wider call, a narrower one joining only
    its own width; fewer rows than chunks): loss and gradients as NumPy's in float64."""
    f = tg.compile(_layernorm, dynamic=True)
    for b, t in [(64, 96)] + sizes:
        arrays = _arrays(b, t)
        for got, want in zip(_step(f, arrays), _numpy_layernorm(*arrays)):
            np.testing.assert_allclose(got, want, rtol=2e-3, atol=2e-3)
    assert f.stats()["traces"] == 1, f.stats()



def test_kernel_by_kernel_runs_split_symbolic_kernels_over_the_calls_chunks(split_small):
    """Profiles and check mode run a program kernel by kernel through its step module, a second copy of
    the code: there too a split kernel of symbolic extent takes its chunks' bounds from the call (they
    were a global of the first copy only, zeros in the second: nothing computed). The forward program's
    outputs kernel by kernel equal a normal run's, over several sizes; f.profile times every kernel."""
    f = tg.compile(_layernorm, dynamic=True)
    for b, t in [(64, 96), (40, 17), (200, 96)]:
        ts = [tg.tensor(a) for a in _arrays(b, t)]
        np.testing.assert_allclose(f(*ts).numpy(), _numpy_layernorm(*(x.numpy() for x in ts))[0], rtol=2e-3)
        entry, _ = f._entry_for(tuple(ts), {}, concrete=True)
        prog, arrays = entry.programs[0], [x.numpy() for x in ts]
        assert prog.regions and all(r.chunks.symbolic() for r in prog.regions)
        normal = [np.array(o) for o in prog.run(arrays)]
        timed = []
        for got, want in zip(prog.run(arrays, timings=timed), normal):
            np.testing.assert_array_equal(got, want)
        assert len(timed) == len(prog.kernels)
        assert len(f.profile(*ts)) == len(prog.kernels)



def test_the_judge_of_a_symbolic_region_compares_time_per_row(split_small):
    """A region whose extent is symbolic runs calls of many sizes: its Judge learns seconds per row of
    the call, so one-thread tries that happen to fall on short calls (10 rows: 20 us) never beat the
    pool's long ones (1000 rows: 1 ms) when the pool is faster per row (1 us against 2)."""
    f = tg.compile(_layernorm, dynamic=True)
    ts = [tg.tensor(a) for a in _arrays(64, 96)]
    f(*ts)
    prog = _entry(f, ts).programs[0]
    region, = prog.regions
    (symbol,) = region.chunks.extent.expr.symbols()
    modes = []
    for _ in range(200):
        pool = bool(region.desc[0])
        rows = 1000 if pool else 10
        region.resize({**prog.env, symbol: rows})
        region.desc[1], region.desc[2] = int(pool), rows * (1000 if pool else 2000)     # nanoseconds
        region.learn()
        modes.append(pool)
    assert region.judge.best and sum(not p for p in modes) <= 10, modes


def _heard(f, ts):
    """{(program, region): runs its Judge has heard of} of f's entry for tensors like `ts` (the joined
    forward with gradient once the calls run it)."""
    entry = _entry(f, ts)
    progs = [getattr(entry, "joined_program", None)]
    if progs[0] is None:
        progs = [*(entry.programs or ()), *(p for got in entry._partial.values() for p in got[0])]
    return {(p.graph.name, r.chunks.entry): r.judge.warm + sum(r.judge.runs.values())
            for p in progs if p is not None for r in p.regions}


def _numpy_center(x, w):
    """loss, dx, dw of _center in float64."""
    x, w = x.astype(np.float64), w.astype(np.float64)
    d = x.T - x.T.mean(axis=1, keepdims=True) if len(x) else x.T      # (no rows: nothing to center)
    y = d * w[:, None]
    g = 2 * y * w[:, None]
    return (y * y).sum(), (g - g.mean(axis=1, keepdims=True)).T if len(x) else g.T, (2 * y * d).sum(axis=1)


def test_rows_centered_across_traced_small_split_per_call(split_small):
    """The centering's backward across rows (partials of its weight gradient) traced at 3 rows: values as
    NumPy's at 1, few, many and 0 rows; at many rows (the program traced at 3) the static compile's split
    kernels and chunks."""
    f = tg.compile(_center, dynamic=True)
    for b, t in [(3, 32), (1, 32), (512, 32), (5, 32), (300, 32), (0, 32)]:     # (its width is pinned)
        arrays = [RNG.standard_normal(s).astype(np.float32) for s in ((b, t), (t,))]
        ts = [tg.tensor(a, requires_grad=True) for a in arrays]
        loss = f(*ts)
        loss.backward()
        for got, want in zip([loss.detach().numpy(), ts[0].grad.numpy(), ts[1].grad.numpy()], _numpy_center(*arrays)):
            np.testing.assert_allclose(got, want, rtol=2e-3, atol=2e-3)
        if b >= 300:
            static = tg.compile(_center)
            static(*[tg.tensor(a, requires_grad=True) for a in arrays]).backward()
            assert _regions(f, ts) == _regions(static, ts) != [[], []], (b, t)
            assert f.stats()["traces"] == 1, f.stats()


def test_a_kernel_traced_at_small_sizes_splits_at_a_large_call(split_small):
    """Traced at sizes too small to split (a ragged batch of 3), a layer norm compiled with dynamic=True has
    its kernels compiled split all the same, and each call's sizes decide as the static compile at those
    sizes does: at large sizes its regions run on the pool's chunks (their Judges hear of it), the same
    kernels in as many chunks as the static compile's; at small ones none runs (the kernels run whole on
    the calling thread); values as NumPy's over sizes 0, 1, small and large."""
    f = tg.compile(_layernorm, dynamic=True)
    seen = {}
    for b, t in [(3, 16), (200, 96), (1, 16), (0, 16), (200, 96), (5, 17), (300, 40)]:
        arrays = _arrays(b, t)
        ts = [tg.tensor(a, requires_grad=k < 3) for k, a in enumerate(arrays)]
        for got, want in zip(_step(f, arrays), _numpy_layernorm(*arrays)):
            np.testing.assert_allclose(got, want, rtol=2e-3, atol=2e-3)
        now = _heard(f, ts)
        ran, seen = {k for k, v in now.items() if v != seen.get(k, 0)}, now
        assert now and ran == (set(now) if b >= 200 else set()), (b, t, ran, now)
        if b >= 200:
            static = tg.compile(_layernorm)
            static(*[tg.tensor(a, requires_grad=k < 3) for k, a in enumerate(arrays)]).backward()
            assert _regions(f, ts) == _regions(static, ts), (b, t)
    assert f.stats()["traces"] == 1, f.stats()


@pytest.mark.parametrize("shape", [lambda n: (n, 8), lambda n: (4, n)], ids=["rows", "columns"])
def test_an_elementwise_kernel_traced_small_splits_per_call(split_small, shape):
    """An elementwise kernel of a symbolic size (its rows, or its columns under 4 known rows) traced at 17
    (too small to split) runs split at 4096 (its region's chunks cut for the call, the Judge hearing of
    it) and whole at 17, 1 and 0 again."""
    f = tg.compile(lambda x: (x * 2 + 1).relu(), dynamic=True)
    for n in (17, 4096, 17, 1, 0, 4096):
        x = RNG.standard_normal(shape(n)).astype(np.float32)
        rows = x.shape[0]
        np.testing.assert_array_equal(f(tg.tensor(x)).numpy(), np.maximum(x * 2 + 1, 0))
        region, = _entry(f, [tg.tensor(x)]).programs[0].regions
        heard = region.judge.warm + sum(region.judge.runs.values())
        f(tg.tensor(x))
        split = region.judge.warm + sum(region.judge.runs.values()) != heard
        assert split == (n == 4096) and (region.used > 1) == split, (n, region.used)
        if split:
            assert list(region.bounds) == region.chunks.cut(rows, region.used)


def _independent(a, b, c):
    """Small kernels reading and writing nothing of each other."""
    return (a * 2.0 + 1.0).tanh(), (b * 3.0).exp().sum(axis=1), (c * c).sum(axis=0) * 0.5


def test_small_kernels_grouped_at_the_traced_sizes_stay_grouped(monkeypatch):
    """Small kernels of symbolic sizes that a static compile at the traced sizes runs as one shared region
    (none worth splitting, together worth it) share it in the dynamic=True compile too, instead of each
    being split per call (which would cost a tiny program its one region); values as NumPy's at 0, 1, few
    and many rows, each kernel whole, as the group runs them."""
    shapes = lambda n: ((n, 30), (n, 20), (n, 10))       # noqa: E731
    arrays = [RNG.standard_normal(s) for s in shapes(40)]
    monkeypatch.setenv("TRACEGRAD_THRESHOLDS", f"parallel_min_work={1 << 40}")
    alone = tg.compile(_independent)
    alone(*map(tg.tensor, arrays))
    prog, = (p for p in _entry(alone, list(map(tg.tensor, arrays))).programs if p is not None)
    works = [regions.work(k) for k in prog.kernels if k.kind in ("loop", "reduce_acc")]
    assert len(works) >= 3 and not prog.regions
    monkeypatch.setenv("TRACEGRAD_THRESHOLDS", f"parallel_min_work={max(works) + 1}")   # each small, together not
    got = {}
    for dynamic in (False, True):
        f = tg.compile(_independent, dynamic=dynamic)
        f(*map(tg.tensor, arrays))
        prog, = (p for p in _entry(f, list(map(tg.tensor, arrays))).programs if p is not None)
        got[dynamic] = [r.chunks.members for r in prog.regions if r.chunks.members or r.used > 1]
    assert got[True] == got[False] and got[True], got       # (split per call elsewhere: whole at these sizes)
    for n in (0, 1, 40, 5, 2000):
        a, b, c = (RNG.standard_normal(s) for s in shapes(n))
        for out, want in zip(f(tg.tensor(a), tg.tensor(b), tg.tensor(c)),
                             (np.tanh(a * 2 + 1), np.exp(b * 3).sum(1), (c * c).sum(0) * 0.5)):
            np.testing.assert_allclose(out.numpy(), want, rtol=1e-12, atol=1e-12)
    assert f.stats()["traces"] == 1, f.stats()


def _column_stats(x, i):
    return x.sum(axis=0), x.amax(axis=0), x.amin(axis=0), i.sum(axis=0), (x.double() * 2).sum(axis=0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_partials_joined_over_the_calls_chunks(split_small, dtype):
    """Column sums, maxima and minima (float, int64, float64 partials) traced at 3 rows and called at rows
    that split them into 2 to 16 chunks: each call runs and joins only its own chunks (the region's
    USED count, the join's run-time loop); values as NumPy's (exactly where the join is exact)."""
    f = tg.compile(_column_stats, dynamic=True)
    counts = set()
    for rows in (3, 64, 300, 40, 1000, 5000, 1, 2000):      # (no rows: max() raises, as eager)
        x = RNG.standard_normal((rows, 24)).astype(dtype)
        i = RNG.integers(-1000, 1000, (rows, 24))
        got = [o.numpy() for o in f(tg.tensor(x), tg.tensor(i))]
        np.testing.assert_allclose(got[0], x.astype(np.float64).sum(0), rtol=1e-5, atol=1e-4)
        np.testing.assert_array_equal(got[1], x.max(0))
        np.testing.assert_array_equal(got[2], x.min(0))
        np.testing.assert_array_equal(got[3], i.sum(0))
        np.testing.assert_allclose(got[4], (x.astype(np.float64) * 2).sum(0), rtol=1e-12, atol=1e-12)
        prog, = (p for p in _entry(f, [tg.tensor(x), tg.tensor(i)]).programs if p is not None)
        counts |= {r.used for r in prog.regions if r.chunks.outs}
    assert len(counts - {1}) >= 3 and max(counts) <= 16, counts
    assert f.stats()["traces"] == 1, f.stats()
