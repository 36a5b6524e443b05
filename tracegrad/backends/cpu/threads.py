"""The thread pool that splits a kernel's outer loop: chunks claimed by whoever is running.

A job is a list of chunks (fn, table, lo, hi), fixed by the program (never by the thread count, so
results do not depend on it: see regions.py). The calling thread posts the job, wakes the sleeping
workers, then claims and runs chunks itself alongside them, one compare-and-swap per chunk; it
waits only for chunks a worker has already started. A worker that the OS does not schedule (the
machine is busy) therefore costs nothing but its one chunk in flight.

All of it is native: `tg_region(ctl, fn, tables, bounds, n, desc)` posts, wakes, claims, waits and
times one job, so a compiled program's native segment runs its split kernels (its parallel regions,
regions.py) without returning to Python; its address and the pool's shared words reach the program
through its pointer table, filled per process (never baked into the cached object code). Sleeping
workers wait on POSIX semaphores (sem_wait through ctypes, the GIL released); the region wakes them
with sem_post, called by the address stored in the shared words (where POSIX semaphores are missing,
a ctypes callback releasing a Python semaphore). Only one job at a time has the workers: a region
that finds them busy (another thread's program) runs its chunks alone.

Each split kernel has a Judge that times it on the workers and on the calling thread alone and
uses the faster (trying the other now and then): on a busy machine, where workers wait for a core,
compiled code runs as fast as single-threaded code, not slower. The native region reads the
Judge's choice from its descriptor (`desc[0]`: 1 = the workers) and writes back the mode it used
and its nanoseconds (clock_gettime, by address); Python hands those to the Judge after the call.

Waking a sleeping thread costs tens of microseconds, so a worker, after its last chunk, keeps
watching the job word in native code (GIL released) for spin_budget pause iterations (machine.py) before it
goes back to sleep on its semaphore; a waiting caller spins briefly, then yields its core.

Shared words (int64, one cache line each): the job word `gen << 32 | chunks << 16 | next`, the count
of chunks done, the job (fn, tables, bounds), the park flag (set before BLAS or NumPy steps, so
spinning workers step aside for their threads), the busy word (1 while a job has the workers), the
configuration (workers, wake function, semaphores, clock function, clock id, getcpu function, the
posting thread's CPU: a worker woken there moves off it, `Pool._placed`); then one state word per
worker (1 while spinning). Posting stores the job word then reads the states (seq_cst); a worker
stopping clears its state then re-reads the job word (seq_cst): one of the two always sees the
other, so a posted job never waits on a sleeping worker that nobody wakes.
"""
import atexit
import ctypes
import os
import threading
import time

import llvmlite.binding as llvm
import numpy as np

from . import forksafe, machine

WAIT_SPINS = 2000         # pause iterations a waiting caller spins before it yields its core
MAX_CHUNKS = 0xFFFF
_LINE = 8                 # int64s per cache line
_JOB, _DONE, _FN, _TABLES, _BOUNDS, _PARK, _BUSY, _CONF = (i * _LINE for i in range(8))
_WORKERS, _WAKE, _SEMS, _CLOCK, _CLOCK_ID, _GETCPU, _CALLER = range(_CONF, _CONF + 7)
_STATES = 8 * _LINE
SEM_BYTES = 64            # bytes per worker semaphore (glibc's sem_t: 32 or 16)
DESC_TABLES = 8           # a region descriptor's words: choice, mode used, nanoseconds, chunks used, ..., then its tables


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

; post a job of n chunks, then wake each worker found asleep: wake(sems + i * SEM_BYTES); the
; posting thread's CPU first (getcpu, where there is one), for the workers it wakes
define void @tg_post(ptr %c, ptr %fn, ptr %tables, ptr %bounds, i64 %n) {{
entry:
  {w("gp", _GETCPU)}
  %getcpu = load ptr, ptr %gp, align 8
  %hasget = icmp ne ptr %getcpu, null
  br i1 %hasget, label %where, label %post
where:
  %cpu = call i32 %getcpu()
  %cpu64 = sext i32 %cpu to i64
  {w("cp", _CALLER)}
  store atomic i64 %cpu64, ptr %cp monotonic, align 8
  br label %post
post:
  {w("fp", _FN)}
  store ptr %fn, ptr %fp, align 8
  {w("tp", _TABLES)}
  store ptr %tables, ptr %tp, align 8
  {w("bp", _BOUNDS)}
  store ptr %bounds, ptr %bp, align 8
  {w("dp", _DONE)}
  store atomic i64 0, ptr %dp monotonic, align 8
  {w("pk", _PARK)}
  store atomic i64 0, ptr %pk monotonic, align 8
  {w("np", _WORKERS)}
  %workers = load i64, ptr %np, align 8
  {w("wp", _WAKE)}
  %wake = load ptr, ptr %wp, align 8
  {w("sp", _SEMS)}
  %sems = load i64, ptr %sp, align 8
  %old = load atomic i64, ptr %c monotonic, align 8
  %gen = lshr i64 %old, 32
  %gen1 = add i64 %gen, 1
  %g = shl i64 %gen1, 32
  %ns = shl i64 %n, 16
  %job = or i64 %g, %ns
  store atomic i64 %job, ptr %c seq_cst, align 8
  br label %check
check:
  %i = phi i64 [0, %post], [%i1, %next]
  %more = icmp slt i64 %i, %workers
  br i1 %more, label %body, label %exit
body:
  %so = mul i64 %i, {_LINE}
  %so1 = add i64 %so, {_STATES}
  %stp = getelementptr i64, ptr %c, i64 %so1
  %st = load atomic i64, ptr %stp seq_cst, align 8
  %asleep = icmp eq i64 %st, 0
  br i1 %asleep, label %wakeup, label %next
wakeup:
  %off = mul i64 %i, {SEM_BYTES}
  %semi = add i64 %sems, %off
  %sem = inttoptr i64 %semi to ptr
  %r = call i32 %wake(ptr %sem)
  br label %next
next:
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

; monotonic nanoseconds from the clock function and id in the configuration words
define i64 @tg_now(ptr %c) {{
entry:
  %ts = alloca [2 x i64], align 8
  {w("cp", _CLOCK)}
  %clock = load ptr, ptr %cp, align 8
  {w("ip", _CLOCK_ID)}
  %id64 = load i64, ptr %ip, align 8
  %id = trunc i64 %id64 to i32
  %r = call i32 %clock(i32 %id, ptr %ts)
  %s = load i64, ptr %ts, align 8
  %nsp = getelementptr i64, ptr %ts, i64 1
  %ns = load i64, ptr %nsp, align 8
  %s9 = mul i64 %s, 1000000000
  %t = add i64 %s9, %ns
  ret i64 %t
}}

; one job of n chunks: on the workers when desc[0] says so and they are free, else on this thread
; alone; desc[1] = the mode used (1: workers), desc[2] = its nanoseconds
define void @tg_region(ptr %c, ptr %fn, ptr %tables, ptr %bounds, i64 %n, ptr %desc) {{
entry:
  %t0 = call i64 @tg_now(ptr %c)
  %choice = load i64, ptr %desc, align 8
  {w("np", _WORKERS)}
  %workers = load i64, ptr %np, align 8
  %want = icmp ne i64 %choice, 0
  %some = icmp sgt i64 %workers, 0
  %try = and i1 %want, %some
  br i1 %try, label %claim, label %serial
claim:
  {w("bz", _BUSY)}
  %cas = cmpxchg ptr %bz, i64 0, i64 1 acquire monotonic
  %won = extractvalue {{ i64, i1 }} %cas, 1
  br i1 %won, label %parallel, label %serial
parallel:
  call void @tg_post(ptr %c, ptr %fn, ptr %tables, ptr %bounds, i64 %n)
  %ran = call i64 @tg_claim(ptr %c)
  call void @tg_wait(ptr %c, i64 %n)
  store atomic i64 0, ptr %bz release, align 8
  br label %done
serial:
  %fi = ptrtoint ptr %fn to i64
  call void @tg_serial(i64 %fi, ptr %tables, ptr %bounds, i64 %n)
  br label %done
done:
  %used = phi i64 [1, %parallel], [0, %serial]
  %t1 = call i64 @tg_now(ptr %c)
  %dt = sub i64 %t1, %t0
  %up = getelementptr i64, ptr %desc, i64 1
  store i64 %used, ptr %up, align 8
  %tp = getelementptr i64, ptr %desc, i64 2
  store i64 %dt, ptr %tp, align 8
  ret void
}}
"""


_P, _I = ctypes.c_void_p, ctypes.c_int64
_REGION = ctypes.CFUNCTYPE(None, _P, _P, _P, _P, _I, _P)


def _libc():
    """(sem_init, sem_wait, address of sem_post, address of clock_gettime) of the C library; the
    semaphore entries None where POSIX semaphores are missing (sem_init fails: macOS)."""
    libc = ctypes.CDLL(None, use_errno=True)
    clock = ctypes.cast(libc.clock_gettime, _P).value
    try:
        init, wait, post = libc.sem_init, libc.sem_wait, libc.sem_post
    except AttributeError:
        return None, None, None, clock
    probe = ctypes.create_string_buffer(SEM_BYTES)
    if init(probe, 0, 0) != 0:
        return None, None, None, clock
    return init, wait, ctypes.cast(post, _P).value, clock


def _getcpu():
    """The C library's sched_getcpu (the CPU the calling thread runs on) as a ctypes function, or None
    where there is none or a thread cannot be moved (os.sched_setaffinity: Linux)."""
    fn = getattr(ctypes.CDLL(None), "sched_getcpu", None)
    if fn is None or not hasattr(os, "sched_setaffinity"):
        return None
    fn.restype, fn.argtypes = ctypes.c_int, []
    return fn


def apart(cpu, getcpu):
    """Move the calling thread off CPU `cpu` onto another it may run on, its allowed CPUs restored after
    (the kernel moves a thread at once when its CPU leaves its mask, and leaves it where it is when the mask
    comes back). Returns the CPU it ran on in between, or None where it may run on no other."""
    allowed = os.sched_getaffinity(0)
    if not allowed - {cpu}:
        return None
    os.sched_setaffinity(0, allowed - {cpu})
    moved = getcpu()
    os.sched_setaffinity(0, allowed)
    return moved


class Pool:
    """n threads (the caller and n-1 native workers) sharing the chunks of one job at a time."""

    def __init__(self, n):
        from .engine import compile_module
        self.n, self.spin = n, machine.value("spin_budget")       # read here, never in a worker
        self.engine = compile_module(_ir())
        a = self.engine.address
        self.region = a("tg_region")             # what a program's pointer table holds (regions.py)
        self._region = _REGION(self.region)
        self._spin = ctypes.CFUNCTYPE(None, _P, _P, _I)(a("tg_spin"))
        words = _STATES + _LINE * n
        raw = np.zeros(words + _LINE, np.int64)          # aligned to a cache line
        skip = (-raw.ctypes.data % 64) // 8
        self.words = raw[skip:skip + words]
        self.ctl = self.words.ctypes.data
        init, wait, post, clock = _libc()
        self.sems = np.zeros(max(n - 1, 1) * SEM_BYTES // 8, np.int64)
        if init is not None:
            for i in range(n - 1):
                init(ctypes.c_void_p(self.sems.ctypes.data + i * SEM_BYTES), 0, 0)
            sem = lambda i: ctypes.c_void_p(self.sems.ctypes.data + i * SEM_BYTES)  # noqa: E731
            self._sleep = lambda i: wait(sem(i))
        else:                   # a ctypes callback releases Python semaphores (it takes the GIL)
            wake = [threading.Semaphore(0) for _ in range(n - 1)]
            self._callback = ctypes.CFUNCTYPE(ctypes.c_int, _P)(lambda p: wake[(p or 0) // SEM_BYTES].release() or 0)
            post = ctypes.cast(self._callback, _P).value
            self._sleep = lambda i: wake[i].acquire()
        self.words[_WORKERS], self.words[_WAKE] = n - 1, post
        self.words[_SEMS] = self.sems.ctypes.data if init is not None else 0
        self.words[_CLOCK], self.words[_CLOCK_ID] = clock, time.CLOCK_MONOTONIC
        self._getcpu, self.moves, self.started = _getcpu(), 0, [None] * (n - 1)
        self.words[_GETCPU] = ctypes.cast(self._getcpu, _P).value if self._getcpu else 0
        self.words[_CALLER] = -1
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
            self._sleep(i)
            self.started[i] = self._placed()
            self._spin(self.ctl, state, self.spin)

    def _placed(self):
        """After a wake: the CPU this worker spins on, moved off the posting thread's (`apart`, counted in
        `moves`) where the kernel woke it there: both would share one core, another idle. On the 2-core
        bench VM, after ~0.1 s idle (OpenBLAS's threads spinning out after a NumPy product, the bench
        waiting), W12's next step ran both on one core, each waiting milliseconds for the other."""
        if self._getcpu is None:
            return None
        cpu, caller = self._getcpu(), int(self.words[_CALLER])
        if cpu == caller and (moved := apart(caller, self._getcpu)) is not None:
            self.moves += 1
            return moved
        return cpu

    def park(self):
        """Ask spinning workers to sleep now (before a step that uses other threads, e.g. BLAS)."""
        self.words[_PARK] = 1

    def run(self, fn, tables, bounds, n, judge):
        """Run chunk i as fn(tables[i], bounds[i], bounds[i+1]) for i < n, and wait for all. fn is a
        function address, tables a ctypes array of n pointer tables, bounds an int64 array of n+1;
        `judge` (a Judge, one per kernel) says whether to use the workers and learns from the time.
        (Compiled programs run their jobs natively, regions.py; this is the same call from Python.)"""
        desc = np.zeros(DESC_TABLES, np.int64)
        desc[0] = judge.parallel()
        self._region(self.ctl, fn, ctypes.addressof(tables), bounds.ctypes.data, n, desc.ctypes.data)
        judge.record(bool(desc[1]), desc[2] * 1e-9)


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
