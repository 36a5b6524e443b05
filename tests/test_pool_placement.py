"""The pool's worker and the thread that posts a job never share one CPU where another is allowed
(threads.py `Pool._placed`): a worker the kernel wakes on the posting thread's CPU moves off it before it
spins. Checked by the mechanism (which CPU each ran on, the masks restored), never by timing."""
import ctypes
import os
import threading
import time

import numpy as np
import pytest

from tracegrad.backends.cpu import threads
from tracegrad.backends.cpu.engine import compile_module

GETCPU = threads._getcpu()
ALLOWED = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set()
pytestmark = pytest.mark.skipif(GETCPU is None or len(ALLOWED) < 2, reason="needs sched_getcpu, "
                                "sched_setaffinity and two CPUs")
NOP = "define void @nop(ptr %t, i64 %lo, i64 %hi) {\nentry:\n  ret void\n}"


class Always:
    """A Judge that always picks the workers."""
    def parallel(self):
        return True

    def record(self, parallel, seconds):
        pass


def _in_thread(fn):
    """fn() run in a fresh thread (its CPU mask its own); its result."""
    out = []
    t = threading.Thread(target=lambda: out.append(fn()))
    t.start()
    t.join()
    return out[0]


def _until(cond, what, limit=30.0):
    end = time.monotonic() + limit
    while not cond():
        assert time.monotonic() < end, f"{what} did not happen in {limit} s"
        time.sleep(0.001)


def test_apart_moves_the_thread_and_restores_its_mask():
    """apart(cpu): the thread runs on another allowed CPU in between, and its mask is as before after; a
    thread allowed only that CPU stays (None)."""
    def move():
        here = GETCPU()
        return here, threads.apart(here, GETCPU), os.sched_getaffinity(0)
    here, moved, mask = _in_thread(move)
    assert moved is not None and moved != here and moved in ALLOWED and mask == ALLOWED

    def stay():
        cpu = min(ALLOWED)
        os.sched_setaffinity(0, {cpu})
        return threads.apart(cpu, GETCPU), os.sched_getaffinity(0)
    assert _in_thread(stay) == (None, {min(ALLOWED)})


def _jobs(pool, cpu, check, n=6):
    """Post n jobs from a thread held on `cpu`, each after the worker went to sleep; check() after each,
    once the worker has woken."""
    engine = compile_module(NOP)
    fn, tables, bounds = engine.address("nop"), (ctypes.c_void_p * 4)(), np.arange(5, dtype=np.int64)
    worker = pool.ctl + 8 * pool._state(0)

    def post():
        os.sched_setaffinity(0, {cpu})
        for _ in range(n):
            pool.park()
            _until(lambda: ctypes.c_int64.from_address(worker).value == 0, "the worker going to sleep")
            pool.started[0] = None
            pool.run(fn, tables, bounds, 4, Always())
            _until(lambda: pool.started[0] is not None, "the worker waking")
            assert pool.words[threads._CALLER] == cpu       # the post records the posting thread's CPU
            check()
    try:
        _in_thread(post)
    finally:
        pool.quiesce()


def test_a_woken_worker_never_spins_on_the_posting_cpu():
    """Wherever the kernel wakes the worker, it starts on a CPU other than the posting thread's."""
    pool, cpu = threads.Pool(2), min(ALLOWED)
    _jobs(pool, cpu, lambda: pool.started[0] not in (None, cpu) or pytest.fail(f"{pool.started}, {pool.moves}"))


def test_a_worker_woken_on_the_posting_cpu_moves(monkeypatch):
    """A worker that finds itself on the posting thread's CPU when woken (made so here: its getcpu says
    that CPU) moves off it (apart) and spins where it moved to; one that does not stays put."""
    pool, cpu, calls = threads.Pool(2), min(ALLOWED), []
    monkeypatch.setattr(threads, "apart", lambda c, getcpu: calls.append(c) or 1000 + c)
    pool._getcpu = lambda: cpu
    _jobs(pool, cpu, lambda: pool.started[0] == 1000 + cpu or pytest.fail(str(pool.started)), n=3)
    assert calls == [cpu] * 3 and pool.moves == 3
    pool = threads.Pool(2)
    pool._getcpu = lambda: cpu + 1
    _jobs(pool, cpu, lambda: pool.started[0] == cpu + 1 or pytest.fail(str(pool.started)), n=2)
    assert calls == [cpu] * 3 and pool.moves == 0
