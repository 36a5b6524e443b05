"""The thread pool that splits a kernel's outer loop: chunks claimed by whoever is running.

A job is a list of chunks (fn, table, lo, hi), fixed by the program (never by the thread count, so
results do not depend on it: see runtime.py). The calling thread posts the job, wakes the sleeping
workers, then claims and runs chunks itself alongside them, one compare-and-swap per chunk; it
waits only for chunks a worker has already started. A worker that the OS does not schedule (the
machine is busy) therefore costs nothing but its one chunk in flight.

Each split kernel has a Judge that times it on the workers and on the calling thread alone and
uses the faster (trying the other now and then): on a busy machine, where workers wait for a core,
compiled code runs as fast as single-threaded code, not slower.

Waking a sleeping thread costs tens of microseconds, so a worker, after its last chunk, keeps
watching the job word in native code (GIL released) for SPIN_BUDGET pause iterations before it
goes back to sleep on its semaphore; a waiting caller spins briefly, then yields its core.

Shared words (int64, one cache line each): the job word `gen << 32 | chunks << 16 | next`, the count
of chunks done, the job (fn, tables, bounds), the park flag (set before BLAS or NumPy steps, so
spinning workers step aside for their threads); then one state word per worker (1 while spinning).
Posting stores the job word then reads the states (seq_cst); a worker stopping clears its state
then re-reads the job word (seq_cst): one of the two always sees the other, so a posted job never
waits on a sleeping worker that nobody wakes.
"""
import atexit
import ctypes
import os
import threading
import time

import llvmlite.binding as llvm
import numpy as np

from . import forksafe

SPIN_BUDGET = 20000       # pause iterations a worker watches for the next job (about a millisecond)
WAIT_SPINS = 2000         # pause iterations a waiting caller spins before it yields its core
MAX_CHUNKS = 0xFFFF
_LINE = 8                 # int64s per cache line
_JOB, _DONE, _FN, _TABLES, _BOUNDS, _PARK = (i * _LINE for i in range(6))
_STATES = 6 * _LINE


def _ir():
    pause = "call void @llvm.x86.sse2.pause()" if llvm.get_default_triple().startswith("x86_64") else ""
    decl = "declare void @llvm.x86.sse2.pause()" if pause else ""
    w = lambda name, i: f"%{name} = getelementptr i64, ptr %c, i64 {i}"  # noqa: E731
    return f"""{decl}
declare i32 @sched_yield()

; claim chunks of the posted job and run them until none is left; returns how many this thread ran
define i64 @tg_claim(ptr %c) {{
entry:
  {w("dp", _DONE)}
  {w("fp", _FN)}
  {w("tp", _TABLES)}
  {w("bp", _BOUNDS)}
  br label %loop
loop:
  %ran = phi i64 [0, %entry], [%ran, %try], [%ran1, %run]
  %job = load atomic i64, ptr %c acquire, align 8
  %next = and i64 %job, 65535
  %n16 = lshr i64 %job, 16
  %n = and i64 %n16, 65535
  %left = icmp ult i64 %next, %n
  br i1 %left, label %try, label %exit
try:
  %job1 = add i64 %job, 1
  %cas = cmpxchg ptr %c, i64 %job, i64 %job1 acq_rel acquire
  %won = extractvalue {{ i64, i1 }} %cas, 1
  br i1 %won, label %run, label %loop
run:
  %fi = load i64, ptr %fp, align 8
  %fn = inttoptr i64 %fi to ptr
  %ti = load i64, ptr %tp, align 8
  %tables = inttoptr i64 %ti to ptr
  %bi = load i64, ptr %bp, align 8
  %bounds = inttoptr i64 %bi to ptr
  %tslot = getelementptr ptr, ptr %tables, i64 %next
  %table = load ptr, ptr %tslot, align 8
  %lop = getelementptr i64, ptr %bounds, i64 %next
  %lo = load i64, ptr %lop, align 8
  %hip = getelementptr i64, ptr %lop, i64 1
  %hi = load i64, ptr %hip, align 8
  call void %fn(ptr %table, i64 %lo, i64 %hi)
  %d = atomicrmw add ptr %dp, i64 1 release, align 8
  %ran1 = add i64 %ran, 1
  br label %loop
exit:
  ret i64 %ran
}}

; a worker: run chunks as they are posted; after `budget` idle pauses (or when parked), return
define void @tg_spin(ptr %c, ptr %state, i64 %budget) {{
entry:
  {w("pk", _PARK)}
  store atomic i64 1, ptr %state seq_cst, align 8
  br label %loop
loop:
  %idle = phi i64 [0, %entry], [0, %again], [%idle1, %wait]
  %ran = call i64 @tg_claim(ptr %c)
  %worked = icmp ne i64 %ran, 0
  %idle0 = select i1 %worked, i64 0, i64 %idle
  br label %wait
wait:
  {pause}
  %idle1 = add i64 %idle0, 1
  %parked = load atomic i64, ptr %pk monotonic, align 8
  %awake = icmp eq i64 %parked, 0
  %patient = icmp slt i64 %idle1, %budget
  %stay = and i1 %awake, %patient
  br i1 %stay, label %loop, label %stop
stop:
  store atomic i64 0, ptr %state seq_cst, align 8
  %job = load atomic i64, ptr %c seq_cst, align 8
  %next = and i64 %job, 65535
  %n16 = lshr i64 %job, 16
  %n = and i64 %n16, 65535
  %late = icmp ult i64 %next, %n
  br i1 %late, label %again, label %exit
again:
  store atomic i64 1, ptr %state seq_cst, align 8
  br label %loop
exit:
  ret void
}}

; post a job of n chunks; wake[i] = 1 for each of the `workers` workers found asleep
define void @tg_post(ptr %c, i64 %fn, i64 %tables, i64 %bounds, i64 %n, i64 %workers, ptr %wake) {{
entry:
  {w("fp", _FN)}
  store i64 %fn, ptr %fp, align 8
  {w("tp", _TABLES)}
  store i64 %tables, ptr %tp, align 8
  {w("bp", _BOUNDS)}
  store i64 %bounds, ptr %bp, align 8
  {w("dp", _DONE)}
  store atomic i64 0, ptr %dp monotonic, align 8
  {w("pk", _PARK)}
  store atomic i64 0, ptr %pk monotonic, align 8
  %old = load atomic i64, ptr %c monotonic, align 8
  %gen = lshr i64 %old, 32
  %gen1 = add i64 %gen, 1
  %g = shl i64 %gen1, 32
  %ns = shl i64 %n, 16
  %job = or i64 %g, %ns
  store atomic i64 %job, ptr %c seq_cst, align 8
  br label %check
check:
  %i = phi i64 [0, %entry], [%i1, %body]
  %more = icmp slt i64 %i, %workers
  br i1 %more, label %body, label %exit
body:
  %so = mul i64 %i, {_LINE}
  %so1 = add i64 %so, {_STATES}
  %sp = getelementptr i64, ptr %c, i64 %so1
  %st = load atomic i64, ptr %sp seq_cst, align 8
  %asleep = icmp eq i64 %st, 0
  %flag = zext i1 %asleep to i64
  %wp = getelementptr i64, ptr %wake, i64 %i
  store i64 %flag, ptr %wp, align 8
  %i1 = add i64 %i, 1
  br label %check
exit:
  ret void
}}

; wait until all n chunks of the posted job are done: spin a little, then yield the core
define void @tg_wait(ptr %c, i64 %n) {{
entry:
  {w("dp", _DONE)}
  br label %loop
loop:
  %k = phi i64 [0, %entry], [%k1, %spin], [%k1, %yield]
  %d = load atomic i64, ptr %dp acquire, align 8
  %done = icmp eq i64 %d, %n
  br i1 %done, label %exit, label %next
next:
  %k1 = add i64 %k, 1
  %patient = icmp slt i64 %k, {WAIT_SPINS}
  br i1 %patient, label %spin, label %yield
spin:
  {pause}
  br label %loop
yield:
  %y = call i32 @sched_yield()
  br label %loop
exit:
  ret void
}}

; all n chunks on this thread, in order
define void @tg_serial(i64 %fi, ptr %tables, ptr %bounds, i64 %n) {{
entry:
  %fn = inttoptr i64 %fi to ptr
  br label %loop
loop:
  %i = phi i64 [0, %entry], [%i1, %body]
  %more = icmp slt i64 %i, %n
  br i1 %more, label %body, label %exit
body:
  %tslot = getelementptr ptr, ptr %tables, i64 %i
  %table = load ptr, ptr %tslot, align 8
  %lop = getelementptr i64, ptr %bounds, i64 %i
  %lo = load i64, ptr %lop, align 8
  %hip = getelementptr i64, ptr %lop, i64 1
  %hi = load i64, ptr %hip, align 8
  call void %fn(ptr %table, i64 %lo, i64 %hi)
  %i1 = add i64 %i, 1
  br label %loop
exit:
  ret void
}}
"""


_P, _I = ctypes.c_void_p, ctypes.c_int64


class Pool:
    """n threads (the caller and n-1 native workers) sharing the chunks of one job at a time."""

    def __init__(self, n):
        from .engine import compile_module
        self.n, self.busy = n, forksafe.lock()
        self.engine = compile_module(_ir())
        a = self.engine.address
        self._claim = ctypes.CFUNCTYPE(_I, _P)(a("tg_claim"))
        self._spin = ctypes.CFUNCTYPE(None, _P, _P, _I)(a("tg_spin"))
        self._post = ctypes.CFUNCTYPE(None, _P, _I, _I, _I, _I, _I, _P)(a("tg_post"))
        self._wait = ctypes.CFUNCTYPE(None, _P, _I)(a("tg_wait"))
        self._serial = ctypes.CFUNCTYPE(None, _I, _P, _P, _I)(a("tg_serial"))
        words = _STATES + _LINE * n
        raw = np.zeros(words + _LINE, np.int64)          # aligned to a cache line
        skip = (-raw.ctypes.data % 64) // 8
        self.words = raw[skip:skip + words]
        self.ctl = self.words.ctypes.data
        self.wake_flags = np.zeros(max(n - 1, 1), np.int64)
        self.wake = [threading.Semaphore(0) for _ in range(n - 1)]
        for i in range(n - 1):
            threading.Thread(target=self._work, args=(i,), daemon=True, name=f"tracegrad-worker-{i}").start()
        atexit.register(self.quiesce)

    def _state(self, i):
        return _STATES + _LINE * i

    def quiesce(self, timeout=0.5):
        """Park the workers and wait until none runs native code (at exit, before the code is freed)."""
        self.park()
        states = [self._state(i) for i in range(self.n - 1)]
        deadline = time.monotonic() + timeout
        while self.words[states].any() and time.monotonic() < deadline:
            time.sleep(0.0005)

    def _work(self, i):
        state = self.ctl + 8 * self._state(i)
        while True:
            self.wake[i].acquire()
            self._spin(self.ctl, state, SPIN_BUDGET)

    def park(self):
        """Ask spinning workers to sleep now (before a step that uses other threads, e.g. BLAS)."""
        self.words[_PARK] = 1

    def run(self, fn, tables, bounds, n, judge):
        """Run chunk i as fn(tables[i], bounds[i], bounds[i+1]) for i < n, and wait for all. fn is a
        function address, tables a ctypes array of n pointer tables, bounds an int64 array of n+1;
        `judge` (a Judge, one per kernel) says whether to use the workers and learns from the time."""
        tables, bounds = ctypes.addressof(tables), bounds.ctypes.data
        t0 = time.perf_counter()
        if self.n == 1 or not judge.parallel() or not self.busy.acquire(blocking=False):
            self._serial(fn, tables, bounds, n)      # (busy: another thread's job has the workers)
            judge.record(False, time.perf_counter() - t0)
            return
        try:
            self._post(self.ctl, fn, tables, bounds, n, self.n - 1, self.wake_flags.ctypes.data)
            for i in np.flatnonzero(self.wake_flags[:self.n - 1]):
                self.wake[i].release()
            self._claim(self.ctl)
            self._wait(self.ctl, n)
        finally:
            self.busy.release()
        judge.record(True, time.perf_counter() - t0)


class Judge:
    """Whether one kernel runs faster on the workers or on the calling thread alone, learnt from its
    own run times: a moving average of each mode's seconds, the faster mode used, the other one tried
    now and then (after EXPLORE runs, twice as many after each try that confirms the choice, up to
    MAX_EXPLORE; a try that wins switches). So a busy machine, where workers wait for a core or
    fight for memory bandwidth, falls back to one thread, and a quiet one gets all threads back."""

    EXPLORE, MAX_EXPLORE = 8, 1024

    def __init__(self):
        self.mean = {True: None, False: None}       # seconds per run, on the workers / on one thread
        self.best, self.trying = True, False
        self.interval, self.countdown = self.EXPLORE, 2     # the second run tries one thread

    def parallel(self):
        """Whether to use the workers for this run."""
        self.countdown -= 1
        self.trying = self.countdown <= 0
        return self.best != self.trying

    def record(self, parallel, seconds):
        """Learn from one run that took `seconds` (on the workers if `parallel`)."""
        old, tried = self.mean[parallel], parallel != self.best
        # a try's time replaces the old one (taken maybe under other load); the chosen mode's averages
        self.mean[parallel] = seconds if old is None or tried else 0.75 * old + 0.25 * seconds
        other = self.mean[not parallel]
        if tried:
            if other is not None and self.mean[parallel] < other:
                self.best, self.interval = parallel, self.EXPLORE
            else:
                self.interval = min(2 * self.interval, self.MAX_EXPLORE)
            self.countdown = self.interval
        elif other is not None and self.mean[parallel] > other:     # the chosen mode got slower
            self.best, self.interval, self.countdown = not parallel, self.EXPLORE, self.EXPLORE


def threads():
    """Threads per kernel: TRACEGRAD_THREADS, default all cores."""
    n = os.environ.get("TRACEGRAD_THREADS")
    return max(1, int(n)) if n else (os.cpu_count() or 1)


_POOL = []
_STARTING = forksafe.lock()
# a forked child has none of the parent's worker threads (and may have copied a "spinning" state):
# it starts its own pool on first use
os.register_at_fork(after_in_child=_POOL.clear)


def pool():
    if not _POOL:
        with _STARTING:
            if not _POOL:
                _POOL.append(Pool(threads()))
    return _POOL[0]
