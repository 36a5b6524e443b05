"""Parallel regions (backends/cpu/regions.py): kernels split over the thread pool run inside a native
segment, so a program of loops, split kernels and matrix products is one native call. Checked
against eager and the interpret backend on programs mixing split and small kernels (odd sizes,
hypothesis), across thread counts (bit-identical), in a forked child, and on the error paths (bad
input, an index out of range, two threads at once): the pool never hangs."""
import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import hangs
import tracegrad as tg
from tracegrad.backends.cpu import gemm, judge, machine, regions, threads

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPLIT_AT = 4096       # element-ops: kernels of these tests' sizes split, their small ones do not


@pytest.fixture
def split_small(monkeypatch):
    monkeypatch.setenv("TRACEGRAD_THRESHOLDS", f"parallel_min_work={SPLIT_AT}")


def _programs(f, *args):
    entry, _ = f._entry_for(args, {})
    return [p for p in entry.programs if p is not None]


def _mixed(x, w, b, v, m):
    """Split kernels (a row kernel with a column sum; a map after a matrix product) with small
    kernels (on b, v and m) and a BLAS product between them."""
    h = (x * w + b).tanh()
    s = h.sum(axis=0) * v + b
    r = (h - h.mean(axis=1, keepdims=True)).exp()
    q = ((h @ (m * 0.01)) * v + b).sin()
    return s * 2.0, r, q, (b * b).sum()


def _close(got, want, tol):
    np.testing.assert_allclose(np.asarray(got, np.float64), np.asarray(want, np.float64), rtol=tol, atol=tol)


@settings(max_examples=12, deadline=None)
@given(rows=st.integers(5, 203), cols=st.integers(3, 97), seed=st.integers(0, 2 ** 31 - 1),
       dtype=st.sampled_from([np.float32, np.float64]))
def test_mixed_programs_match_eager_and_interpret(rows, cols, seed, dtype):
    with machine.override(parallel_min_work=SPLIT_AT):
        rng = np.random.default_rng(seed)
        arrays = [rng.standard_normal(s).astype(dtype) for s in ((rows, cols), (cols,), (cols,), (cols,), (cols, cols))]
        args = [tg.tensor(a) for a in arrays]
        compiled, interp = tg.compile(_mixed), tg.compile(_mixed, backend="interpret")
        eager = [o.numpy() for o in _mixed(*args)]
        tol = 2e-4 if dtype == np.float32 else 1e-9
        for _ in range(3):                       # the later calls: reused buffers, the third on one thread (the Judge)
            for got, i, e in zip(compiled(*args), interp(*args), eager):
                _close(got.numpy(), e, tol)
                _close(i.numpy(), e, tol)
        progs = _programs(compiled, *args)
        if rows * cols * 8 >= SPLIT_AT:          # the tanh map splits at least
            assert any(p.regions for p in progs)


def test_split_and_small_kernels_are_one_native_call(split_small, monkeypatch):
    monkeypatch.setattr(gemm, "SPLIT_WORK", 1 << 62)       # the products: BLAS calls between regions
    rng = np.random.default_rng(0)
    args = [tg.tensor(rng.standard_normal(s).astype(np.float32)) for s in ((301, 67), (67,), (67,), (67,), (67, 67))]
    f = tg.compile(_mixed)
    f(*args)
    prog, = _programs(f, *args)
    kinds = [k.kind for k in prog.kernels]
    assert len(prog.regions) >= 2 and len(prog.kernels) >= len(prog.regions) + 2 and "extern" in kinds
    assert [s[0] for s in prog.plan] == ["call"]          # one native segment, no Python step
    assert "use_pool()" in prog.run_source and "seg1" not in prog.run_source
    g = tg.compile(lambda x, m: (x * 2.0).tanh() @ m)
    g(args[0], args[4])
    assert len(_programs(g, args[0], args[4])[0].regions) == 1
    assert threads._POOL[0].words[threads._PARK] == 1     # the segment parked the workers before BLAS


def test_backward_of_a_mixed_step(split_small):
    """forward + backward (split kernels with small ones between) against float64 finite differences."""
    rng = np.random.default_rng(1)
    x = tg.tensor(rng.standard_normal((129, 33)), requires_grad=True)
    w = tg.tensor(rng.standard_normal(33), requires_grad=True)
    loss = tg.compile(lambda x, w: ((x * w).tanh().sum(axis=0) * w).sum() + (x.exp() * 0.01).sum())
    assert tg.gradcheck(lambda x, w: loss(x, w), (x, w))
    loss(x, w).backward()
    gx, gw = x.grad.numpy(), w.grad.numpy()
    for t in (x, w):
        t.grad = None
    ((x * w).tanh().sum(axis=0) * w).sum().__add__((x.exp() * 0.01).sum()).backward()
    _close(gx, x.grad.numpy(), 1e-10)
    _close(gw, w.grad.numpy(), 1e-10)


def _python(script, timeout=None, env=None, args=()):
    env = dict(os.environ, PYTHONPATH=ROOT, **(env or {}))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script), *args], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


TRAIN = """
    import os, sys
    import numpy as np
    import tracegrad as tg
    import tracegrad.nn.functional as F
    os.environ["TRACEGRAD_THRESHOLDS"] = "parallel_min_work=4096"
    tg.manual_seed(0)
    model = tg.nn.Sequential(tg.nn.Linear(61, 129), tg.nn.Tanh(), tg.nn.Linear(129, 129), tg.nn.ReLU(),
                             tg.nn.Linear(129, 7))
    opt = tg.optim.Adam(model.parameters(), lr=1e-2)
    rng = np.random.default_rng(0)
    x = tg.from_numpy(rng.standard_normal((257, 61)).astype(np.float32))
    y = tg.from_numpy(rng.integers(0, 7, 257))

    @tg.compile
    def step(model, opt, x, y):
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    losses = [step(model, opt, x, y).item() for _ in range(6)]
    entry, _ = step._entry_for((model, opt, x, y), {})
    assert any(p.regions for p in entry.programs if p is not None)
    np.savez(sys.argv[1], np.array(losses), *[p.detach().numpy() for p in model.parameters()])
"""


def test_training_step_bits_do_not_depend_on_the_thread_count(tmp_path):
    got = []
    for n in ("1", "2", "3"):
        path = tmp_path / f"t{n}.npz"
        res = _python(TRAIN, env={"TRACEGRAD_THREADS": n}, args=[str(path)])
        assert res.returncode == 0, res.stderr[-3000:]
        with np.load(path) as z:
            got.append([z[k] for k in sorted(z.files, key=lambda k: int(k.split("_")[1]))])
    assert got[0][0][-1] < got[0][0][0]                  # it trains
    for other in got[1:]:
        for a, b in zip(got[0], other):
            np.testing.assert_array_equal(a, b)


FORK = """
    import os, signal, sys
    import numpy as np
    import tracegrad as tg
    from tracegrad.backends.cpu import judge, regions, threads
    os.environ["TRACEGRAD_THRESHOLDS"] = "parallel_min_work=4096"
    judge.Judge.parallel = lambda self: True          # every region on the workers
    x = tg.from_numpy(np.random.default_rng(0).standard_normal((513, 129)).astype(np.float32))
    f = tg.compile(lambda x: ((x * 2.0).tanh().sum(axis=0), (x + 1.0).exp() * 0.5))
    want = [o.numpy().copy() for o in f(x)]
    parent = threads._POOL[0]
    pid = os.fork()
    if pid == 0:
        signal.alarm(int(sys.argv[1]))                # a hang is killed (exit status != 0)
        ok = all(np.array_equal(o.numpy(), w) for _ in range(3) for o, w in zip(f(x), want))
        mine = threads._POOL[0]
        ok &= mine is not parent and mine.n == 3
        entry, _ = f._entry_for((x,), {})
        prog, = [p for p in entry.programs if p is not None]
        ok &= prog.table[prog.pool_slots[0]] == mine.ctl and prog.regions[0].judge.mean[True] is not None
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    assert all(np.array_equal(o.numpy(), w) for o, w in zip(f(x), want))
    print("ok")
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_forked_child_runs_regions_on_its_own_pool():
    res = _python(FORK, timeout=hangs.limit(6), env={"TRACEGRAD_THREADS": "3"}, args=[str(hangs.limit(6))])
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stderr[-3000:]


def _in_thread(fn):
    """fn() in a daemon thread; its result, or a failure when it does not return (a hung pool)."""
    out = []
    t = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    t.start()
    t.join(hangs.limit(1))
    assert out, "a compiled call did not return"
    return out[0]


def test_bad_input_and_index_errors_leave_the_pool_working(split_small):
    rng = np.random.default_rng(2)
    x0 = rng.standard_normal((300, 41)).astype(np.float32)
    f = tg.compile(lambda x, i: ((x * 3.0).sin()[tg.arange(300), i], (x * x).sum(axis=0)))
    x, good, bad = tg.tensor(x0), tg.tensor(rng.integers(0, 41, 300)), tg.tensor(np.full(300, 41))
    want = [np.sin(3.0 * x0)[np.arange(300), good.numpy()], (x0.astype(np.float64) ** 2).sum(0)]
    for got, w in zip(f(x, good), want):
        _close(got.numpy(), w, 1e-4)
    assert any(p.regions for p in _programs(f, x, good))
    with pytest.raises(ValueError, match="expected"):
        _programs(f, x, good)[0].run((x0[:, :40], good.numpy()))
    with pytest.raises(IndexError, match="out of bounds"):
        f(x, bad)
    for got, w in zip(_in_thread(lambda: f(x, good)), want):
        _close(got.numpy(), w, 1e-4)


def test_two_threads_calling_programs_with_regions_at_once(split_small):
    """The busy word: a region finding the workers on another thread's job runs alone, never waits."""
    rng = np.random.default_rng(3)
    xs = [rng.standard_normal((211, 97)).astype(np.float32) for _ in range(2)]
    fs = [tg.compile(lambda x: (x * 2.0).tanh().sum(axis=0)), tg.compile(lambda x: (x + 1.0).exp().sum(axis=1))]
    want = [np.tanh(2.0 * xs[0].astype(np.float64)).sum(0), np.exp(xs[1].astype(np.float64) + 1).sum(1)]
    errors = []

    def work(i):
        try:
            for _ in range(200):
                _close(fs[i](tg.tensor(xs[i])).numpy(), want[i], 1e-4)
        except BaseException as e:      # noqa: BLE001 - reported below
            errors.append(e)
    threads_ = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(2)]
    for t in threads_:
        t.start()
    for t in threads_:
        t.join(hangs.limit(1.2))
    assert not any(t.is_alive() for t in threads_), "a call hung"
    assert not errors, errors[0]


def test_the_judge_learns_from_native_timings(split_small):
    x = tg.tensor(np.random.default_rng(4).standard_normal((400, 300)).astype(np.float32))
    f = tg.compile(lambda x: (x * 2.0).tanh())
    for _ in range(12):
        f(x)
    region, = _programs(f, x)[0].regions
    means = region.judge.mean
    assert means[True] is not None and means[False] is not None and 0 < means[False] < 10
    assert region.desc[1] == -1 and region.desc[0] in (0, 1)       # read, and the next choice set


def _kernel_works(f, *args):
    prog, = _programs(f, *args)
    return [regions.work(k) for k in prog.kernels if k.kind in ("loop", "reduce_acc")]


def _independent(a, b, c, d):
    """Small kernels reading and writing nothing of each other (intermediates between: shared memory)."""
    t = (b * 3.0).exp()
    return a * 2.0 + 1.0, (t - t.amax()).sum(axis=1), c.tanh().cumsum(0), (d * d).sum() * 0.5


def test_small_independent_kernels_share_one_region(monkeypatch):
    rng = np.random.default_rng(5)
    arrays = [rng.standard_normal(s) for s in ((301,), (7, 41), (253,), (3, 97))]
    args = [tg.tensor(a) for a in arrays]
    monkeypatch.setenv("TRACEGRAD_THRESHOLDS", f"parallel_min_work={1 << 40}")
    alone = tg.compile(_independent)
    want = [o.numpy() for o in alone(*args)]
    works = _kernel_works(alone, *args)
    assert len(works) >= 3 and not _programs(alone, *args)[0].regions
    monkeypatch.setenv("TRACEGRAD_THRESHOLDS", f"parallel_min_work={max(works) + 1}")   # none splits; together they are worth it
    shared = tg.compile(_independent)
    for parallel in (True, False, True):
        monkeypatch.setattr(judge.Judge, "parallel", lambda self, p=parallel: p)
        for got, w in zip(shared(*args), want):
            np.testing.assert_array_equal(got.numpy(), w)            # each kernel whole: the same bits
    prog, = _programs(shared, *args)
    groups = [r for r in prog.regions if r.chunks.members]
    assert groups and all(r.chunks.n == len(r.chunks.members) >= 2 for r in groups)
    a, b, c, d = arrays
    t = np.exp(3 * b)
    for got, w in zip(want, (2 * a + 1, (t - t.max()).sum(1), np.cumsum(np.tanh(c)), 0.5 * (d * d).sum())):
        _close(got, w, 1e-12)


def test_an_optimizer_step_with_shared_regions_matches_eager(monkeypatch):
    """SGD with momentum over several small parameters: one update kernel each, sharing regions."""
    monkeypatch.setenv("TRACEGRAD_THRESHOLDS", "parallel_min_work=400")      # the last updates: 364 + 28 + 20 + 12
    rng = np.random.default_rng(6)
    shapes = ((13, 7), (7,), (7, 5), (5,), (5, 3), (3,))

    def make():
        params = [tg.tensor(rng_p.copy(), requires_grad=True) for rng_p in init]
        return params, tg.optim.SGD(params, lr=0.05, momentum=0.9)
    init = [rng.standard_normal(s) for s in shapes]
    x = tg.tensor(rng.standard_normal((11, 13)))

    def loss_of(params):
        h = x
        for w, b in zip(params[::2], params[1::2]):
            h = (h @ w + b).tanh()
        return (h * h).sum()

    def step(params, opt):
        loss = loss_of(params)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss
    (pe, oe), (pc, oc) = make(), make()
    compiled = tg.compile(step)
    for _ in range(4):
        le, lc = step(pe, oe), compiled(pc, oc)
        _close(lc.item(), le.item(), 1e-12)
    for a, b in zip(pe, pc):
        _close(b.detach().numpy(), a.detach().numpy(), 1e-12)
    progs = _programs(compiled, pc, oc)
    assert any(r.chunks.members for p in progs for r in p.regions)
