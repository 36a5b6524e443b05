"""The native runtime never hangs or answers differently because of what happens around it: a fork
while another thread runs or compiles, the thread count, a worker that never gets a core."""
import ctypes
import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import hangs
import tracegrad as tg
from tracegrad.backends.cpu import judge as judges, threads

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _python(script, timeout=None, env=None, args=()):
    """Run `script` in a fresh interpreter; a hang fails (TimeoutExpired) instead of hanging the suite."""
    env = dict(os.environ, PYTHONPATH=ROOT, **(env or {}))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script), *args], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


FORK_WHILE_BUSY = """
    import os, signal, sys, threading, time
    import numpy as np
    import tracegrad as tg

    x = tg.from_numpy(np.random.default_rng(0).standard_normal(1 << 20).astype(np.float32))
    big = tg.compile(lambda x: ((x * 2.0).tanh() * x).sum())      # split across the worker pool
    small = tg.compile(lambda x: x[:100] * 3.0 + 1.0)                 # one call on this thread
    want_big, want_small = big(x).item(), small(x).numpy().copy()
    stop = []

    def run_calls():            # compiled calls in a loop: holds the program and pool locks often
        while not stop:
            big(x), small(x)

    def compile_new():          # new LLVM modules in a loop: holds llvmlite's lock often
        from tracegrad.backends.cpu.engine import compile_module
        c = 0
        while not stop:
            c += 1
            compile_module(f"define i64 @f(i64 %a) {{ %b = mul i64 %a, {c} ret i64 %b }}")

    for target in (run_calls, compile_new):
        threading.Thread(target=target, daemon=True).start()
    for i in range(int(sys.argv[1])):
        time.sleep(0.02)
        pid = os.fork()
        if pid == 0:            # the child: old and new compiled functions, then exit 0
            signal.alarm(int(sys.argv[2]))    # a deadlock is killed by SIGALRM (exit status != 0)
            ok = abs(big(x).item() - want_big) <= 1e-6 * abs(want_big)
            ok &= np.array_equal(small(x).numpy(), want_small)
            new = tg.compile(lambda x: x[:5] * (100.0 + i))(x).numpy()
            ok &= np.allclose(new, x.numpy()[:5] * (100.0 + i))
            os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
        if not (os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0):
            sys.exit(f"forked child {i} failed: wait status {status}")
    stop.append(1)
    print("ok")
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_fork_while_other_threads_run_and_compile():
    """The child of a fork taken while another thread holds a program's lock, the pool or llvmlite's
    lock runs compiled functions (old and new) and exits: the locks are released in the child."""
    res = _python(FORK_WHILE_BUSY, timeout=hangs.limit(9), args=["6", str(hangs.limit(9))])
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stderr[-3000:]


THREAD_COUNT = """
    import os, sys
    import numpy as np
    import tracegrad as tg
    os.environ["TRACEGRAD_THRESHOLDS"] = "parallel_min_work=1"   # split every kernel, however small
    rng = np.random.default_rng(0)
    x = tg.from_numpy(rng.standard_normal((257, 129)).astype(np.float32))
    w = tg.from_numpy(rng.standard_normal(129).astype(np.float32))
    f = tg.compile(lambda x, w: ((x * w).tanh().sum(axis=0), (x * x).sum(), x.amax(axis=0),
                                 (x - x.mean(axis=1, keepdims=True)).exp()))
    outs = [o.numpy() for _ in range(3) for o in f(x, w)]
    np.savez(sys.argv[1], *outs)
"""


def test_results_do_not_depend_on_the_thread_count(tmp_path):
    """Kernels are split into chunks fixed by their size: 1, 2 and 3 threads give the same bits."""
    got = []
    for n in ("1", "2", "3"):
        path = tmp_path / f"t{n}.npz"
        res = _python(THREAD_COUNT, env={"TRACEGRAD_THREADS": n}, args=[str(path)])
        assert res.returncode == 0, res.stderr[-3000:]
        with np.load(path) as z:
            got.append([z[k] for k in sorted(z.files, key=lambda k: int(k.split("_")[1]))])
    for other in got[1:]:
        for a, b in zip(got[0], other):
            np.testing.assert_array_equal(a, b)


@pytest.fixture
def split_everything(monkeypatch):
    monkeypatch.setenv("TRACEGRAD_THRESHOLDS", "parallel_min_work=1")


def _outputs(f, *args):
    return [o.numpy().copy() for o in f(*args)]


def test_workers_and_calling_thread_alone_give_the_same_bits(split_everything, monkeypatch):
    x = tg.from_numpy(np.random.default_rng(1).standard_normal((300, 1023)).astype(np.float32))
    f = tg.compile(lambda x: (x.sum(axis=0), (x * x).sum(), x.amin(axis=0), (x * 2.0).tanh()))
    runs = {}
    for parallel in (True, False):
        monkeypatch.setattr(judges.Judge, "parallel", lambda self, p=parallel: p)
        runs[parallel] = [_outputs(f, x) for _ in range(3)]
    for outs in runs[True][1:] + runs[False]:
        for a, b in zip(runs[True][0], outs):
            np.testing.assert_array_equal(a, b)
    xn = x.numpy().astype(np.float64)
    for got, want in zip(runs[False][0], (xn.sum(0), (xn * xn).sum(), xn.min(0), np.tanh(2 * xn))):
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-4)


def test_a_worker_that_never_runs_costs_nothing_but_its_chunks(split_everything):
    """Workers that the OS does not schedule (here: never woken) leave their chunks to the caller."""
    from tracegrad.backends.cpu.engine import compile_module
    pool = threads.Pool(3)
    noop = compile_module("define i32 @noop(ptr %sem) {\n  ret i32 0\n}")
    pool.words[threads._WAKE] = noop.address("noop")            # sleeping workers are never woken
    x = tg.from_numpy(np.random.default_rng(2).standard_normal((64, 512)).astype(np.float32))
    f = tg.compile(lambda x: ((x * 3.0).sin().sum(axis=0), (x + 1.0).exp()))
    try:
        threads._POOL.insert(0, pool)
        done = []
        t = threading.Thread(target=lambda: done.append(_outputs(f, x)), daemon=True)
        t.start()
        t.join(hangs.limit(1))
        assert done, "a compiled call waited for workers that never ran"
    finally:
        threads._POOL.remove(pool)
    xn = x.numpy().astype(np.float64)
    np.testing.assert_allclose(done[0][0], np.sin(3 * xn).sum(0), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(done[0][1], np.exp(xn + 1), rtol=1e-5)


def _learn(judge, seconds, runs):
    """Drive a Judge with the run times `seconds(parallel)`; returns the modes it chose."""
    modes = []
    for _ in range(runs):
        p = judge.parallel()
        modes.append(p)
        judge.record(p, seconds(p))
    return modes


def test_judge_falls_back_to_one_thread_when_workers_are_slow_and_returns():
    j = judges.Judge()
    busy = _learn(j, lambda p: 3.0 if p else 1.0, 2000)            # workers not getting a core
    assert not j.best and sum(busy) <= 12                            # a few tries, ever rarer
    tries = [i for i, p in enumerate(busy) if p]
    assert all(b - a >= a // 4 for a, b in zip(tries[2:], tries[3:]))   # intervals grow
    quiet = _learn(j, lambda p: 0.5 if p else 1.0, 2000)            # the machine is quiet again
    back = quiet.index(True)                                          # the next try of the workers wins
    assert j.best and back <= judges.Judge.MAX_EXPLORE and all(quiet[back:back + 8])
    assert sum(not p for p in quiet[-1000:]) <= 8                     # one-thread tries grow rare


def test_judge_follows_a_mode_that_gets_slower():
    j = judges.Judge()
    _learn(j, lambda p: 0.5 if p else 1.0, 100)
    assert j.best
    _learn(j, lambda p: 4.0 if p else 1.0, 10)                       # load arrives mid-stream
    assert not j.best


def test_judge_learns_nothing_from_a_slow_first_run():
    """A first run that pays for faulting in fresh memory does not hand the next runs to one thread."""
    j, runs = judges.Judge(), []

    def seconds(p):
        runs.append(p)
        return 30.0 if len(runs) == 1 else 0.5 if p else 1.0
    modes = _learn(j, seconds, 40)
    assert modes[:2] == [True, True] and not modes[2]                # warm-up, then the workers timed, then a try
    assert j.best and sum(not p for p in modes) <= 3


def test_judge_tries_again_a_mode_beaten_after_one_slow_run():
    """A slow second run on the workers (the first learnt from: still cold) that loses to a one-thread
    try does not hand the next runs to one thread: the workers are tried again at the next run, win,
    and run the later runs (the bench's few calls per column then time the faster mode)."""
    j, runs = judges.Judge(), []

    def seconds(p):
        runs.append(p)
        return 30.0 if len(runs) == 1 else 12.0 if len(runs) == 2 else 1.2 if p else 2.2
    modes = _learn(j, seconds, 14)
    assert modes[:4] == [True, True, False, True]            # warm-up, timed, the try, the workers again
    assert j.best and sum(not p for p in modes[4:]) <= 1


class _Always:
    def parallel(self):
        return True

    def record(self, parallel, seconds):
        pass


@pytest.mark.parametrize("n", [1, 2, 5])
def test_pool_runs_every_chunk_exactly_once(n):
    """Many jobs of many chunks: each chunk's slice written once (a lost or doubled chunk shows)."""
    from tracegrad.backends.cpu.engine import compile_module
    eng = compile_module("""
define void @inc(ptr %table, i64 %lo, i64 %hi) {
entry:
  %p = load ptr, ptr %table
  br label %loop
loop:
  %i = phi i64 [%lo, %entry], [%i1, %body]
  %more = icmp slt i64 %i, %hi
  br i1 %more, label %body, label %exit
body:
  %q = getelementptr i64, ptr %p, i64 %i
  %v = load i64, ptr %q
  %v1 = add i64 %v, 1
  store i64 %v1, ptr %q
  %i1 = add i64 %i, 1
  br label %loop
exit:
  ret void
}""")
    pool, judge = threads.Pool(n), _Always()
    data = np.zeros(1000, np.int64)
    table = (ctypes.c_void_p * 1)(data.ctypes.data)
    for chunks in (2, 7, 64, 1000):
        tables = (ctypes.c_void_p * chunks)(*[ctypes.addressof(table)] * chunks)
        bounds = np.array([1000 * i // chunks for i in range(chunks + 1)], np.int64)
        for _ in range(50):
            pool.run(eng.address("inc"), tables, bounds, chunks, judge)
    pool.quiesce()
    np.testing.assert_array_equal(data, np.full(1000, 4 * 50))
