"""The thread pool that splits a kernel's outer loop: native spin-then-sleep workers.

Waking a sleeping thread costs tens of microseconds on these VMs (measured: ~80 µs for a Python
lock or queue hand-off), as much as a mid-sized kernel. So each worker, after a job, keeps
spinning in native code (GIL released) for SPIN_BUDGET pause iterations — about a millisecond —
watching its job slot; a job posted meanwhile starts within a microsecond. Only an idle worker
goes back to sleep on a semaphore, and the poster wakes it.

A worker's slot is eight int64s: gen (jobs posted), done (jobs finished), fn, table, lo, hi,
state (1 while spinning) and park (set before BLAS or NumPy steps, so a spinning worker steps
aside for their own threads). Posting writes the job then increments gen (seq_cst) and reads state;
a worker stopping sets state = 0 then re-reads gen (seq_cst): one of the two always sees the
other, so a job is never missed (an extra wake-up is harmless).
"""
import atexit
import ctypes
import os
import threading
import time

import llvmlite.binding as llvm
import numpy as np

SPIN_BUDGET = 20000
_SLOT = 8          # int64s per slot (64 bytes: one cache line)


def _ir():
    pause = "call void @llvm.x86.sse2.pause()" if llvm.get_default_triple().startswith("x86_64") else ""
    decl = "declare void @llvm.x86.sse2.pause()" if pause else ""
    f = lambda i: f"getelementptr i64, ptr %s, i64 {i}"  # noqa: E731
    return f"""{decl}
define void @tg_spin(ptr %s, i64 %budget) {{
entry:
  %gp = {f(0)}
  %dp = {f(1)}
  %fp = {f(2)}
  %tp = {f(3)}
  %lp = {f(4)}
  %hp = {f(5)}
  %sp = {f(6)}
  store atomic i64 1, ptr %sp seq_cst, align 8
  %seen0 = load atomic i64, ptr %dp acquire, align 8
  br label %loop
loop:
  %seen = phi i64 [%seen0, %entry], [%g, %run], [%seen, %idle], [%seen, %again]
  %n = phi i64 [0, %entry], [0, %run], [%n1, %idle], [0, %again]
  %g = load atomic i64, ptr %gp acquire, align 8
  %new = icmp ne i64 %g, %seen
  br i1 %new, label %run, label %idle
run:
  %fi = load i64, ptr %fp, align 8
  %fn = inttoptr i64 %fi to ptr
  %ti = load i64, ptr %tp, align 8
  %table = inttoptr i64 %ti to ptr
  %lo = load i64, ptr %lp, align 8
  %hi = load i64, ptr %hp, align 8
  call void %fn(ptr %table, i64 %lo, i64 %hi)
  store atomic i64 %g, ptr %dp release, align 8
  br label %loop
idle:
  {pause}
  %n1 = add i64 %n, 1
  %pk = {f(7)}
  %parked = load atomic i64, ptr %pk monotonic, align 8
  %awake = icmp eq i64 %parked, 0
  %budget_left = icmp slt i64 %n1, %budget
  %more = and i1 %awake, %budget_left
  br i1 %more, label %loop, label %stop
stop:
  store atomic i64 0, ptr %sp seq_cst, align 8
  %g2 = load atomic i64, ptr %gp seq_cst, align 8
  %late = icmp ne i64 %g2, %seen
  br i1 %late, label %again, label %exit
again:
  store atomic i64 1, ptr %sp seq_cst, align 8
  br label %loop
exit:
  ret void
}}

define i64 @tg_post(ptr %s, i64 %fn, i64 %table, i64 %lo, i64 %hi) {{
entry:
  %fp = {f(2)}
  store i64 %fn, ptr %fp, align 8
  %tp = {f(3)}
  store i64 %table, ptr %tp, align 8
  %lp = {f(4)}
  store i64 %lo, ptr %lp, align 8
  %hp = {f(5)}
  store i64 %hi, ptr %hp, align 8
  %pk = {f(7)}
  store atomic i64 0, ptr %pk monotonic, align 8
  %gp = {f(0)}
  %old = atomicrmw add ptr %gp, i64 1 seq_cst, align 8
  %sp = {f(6)}
  %st = load atomic i64, ptr %sp seq_cst, align 8
  %asleep = icmp eq i64 %st, 0
  %r = zext i1 %asleep to i64
  ret i64 %r
}}

define void @tg_wait(ptr %s) {{
entry:
  %gp = {f(0)}
  %dp = {f(1)}
  br label %loop
loop:
  %g = load atomic i64, ptr %gp acquire, align 8
  %d = load atomic i64, ptr %dp acquire, align 8
  %done = icmp eq i64 %d, %g
  br i1 %done, label %exit, label %spin
spin:
  {pause}
  br label %loop
exit:
  ret void
}}
"""


class Pool:
    """n threads (this one and n-1 native workers) running slices of kernels' outer loops."""

    def __init__(self, n):
        from .engine import compile_module
        self.n, self.busy = n, threading.Lock()
        self.engine = compile_module(_ir())
        self._spin = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64)(self.engine.address("tg_spin"))
        self._post = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64,
                                      ctypes.c_int64, ctypes.c_int64)(self.engine.address("tg_post"))
        self._wait = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(self.engine.address("tg_wait"))
        self.slots = np.zeros((max(n - 1, 1), _SLOT), np.int64)
        self.wake = [threading.Semaphore(0) for _ in range(n - 1)]
        self._fn_addr = {}
        for i in range(n - 1):
            threading.Thread(target=self._work, args=(i,), daemon=True, name=f"tracegrad-worker-{i}").start()
        atexit.register(self.quiesce)

    def quiesce(self, timeout=0.5):
        """Park the workers and wait until none runs native code (at exit, before the code is freed)."""
        self.park()
        deadline = time.monotonic() + timeout
        while self.slots[:, 6].any() and time.monotonic() < deadline:
            time.sleep(0.0005)

    def _slot(self, i):
        return self.slots[i].ctypes.data

    def _work(self, i):
        slot = self._slot(i)
        while True:
            self.wake[i].acquire()
            self._spin(slot, SPIN_BUDGET)

    def _address(self, fn):
        a = self._fn_addr.get(id(fn))
        if a is None:
            a = self._fn_addr[id(fn)] = (ctypes.cast(fn, ctypes.c_void_p).value, fn)
        return a[0]

    def park(self):
        """Ask spinning workers to sleep now (before a step that uses other threads, e.g. BLAS)."""
        self.slots[:, 7] = 1

    def run(self, fn, table, extent):
        """Split [0, extent) of fn's outer loop evenly across the threads."""
        n = min(self.n, extent)
        self.run_jobs([(fn, table, extent * i // n, extent * (i + 1) // n) for i in range(n)])

    def run_jobs(self, jobs):
        """Run (fn, table, lo, hi) jobs, the first on this thread, and wait for all."""
        with self.busy:
            posted = []
            for i, (fn, table, lo, hi) in enumerate(jobs[1:]):
                slot = self._slot(i)
                if self._post(slot, self._address(fn), ctypes.addressof(table), lo, hi):
                    self.wake[i].release()
                posted.append(slot)
            fn, table, lo, hi = jobs[0]
            fn(table, lo, hi)
            for slot in posted:
                self._wait(slot)


def threads():
    """Threads per kernel: TRACEGRAD_THREADS, default all cores."""
    n = os.environ.get("TRACEGRAD_THREADS")
    return max(1, int(n)) if n else (os.cpu_count() or 1)


_POOL = []
# a forked child has none of the parent's worker threads (and may have copied a "spinning" state):
# it starts its own pool on first use
os.register_at_fork(after_in_child=_POOL.clear)


def pool():
    if not _POOL:
        _POOL.append(Pool(threads()))
    return _POOL[0]
