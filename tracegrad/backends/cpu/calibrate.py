"""Measuring this machine for machine.py (`measure`, well under a second) and the thresholds the
measurements give (`derive`).

Facts: the data caches' sizes (from the OS, /sys/devices/system/cpu; where it does not say, those
of DEFAULT_CACHES: the knees of copy bandwidth against size, tried first, were too noisy on a shared
machine to find the caches), the cost of waking a sleeping thread (a semaphore round trip
between two threads, halved: how the pool's workers sleep, threads.py), the time of one element-op
of a memory-bound map (NumPy's add of float32 arrays the size of a split kernel's), and of one pause
instruction of the target (a compiled loop). Each timing is the best of several: on a busy machine
the best run is the one least disturbed.

What they give, scaled so that the development machine gives the defaults back (an AMD EPYC: 32
KiB L1d, 1 MiB L2, 32 MiB last level; 12 us per wake, 0.16 ns per element-op, 24 ns per pause, on
a loaded machine): streamed stores above twice the L2 (stream.py's measurement: 4 MiB paid on a 2 MiB L2, 2 MiB did not); tiles and row blocks that keep what is read twice in L1 (a
transpose's two tiles in a quarter of it); the online column walk's rows in L2; a kernel split over
threads when its single-thread time is at least GAIN wakes (a power of two) (never with one thread); a worker spinning
about a millisecond of pauses before it sleeps.
"""
import ctypes
import glob
import math
import os
import threading
import time

import llvmlite.binding as llvm
import numpy as np

from . import host

GAIN = 16                       # single-thread time of a split kernel, in thread wakes, at least
SPIN_NS = 1_000_000             # how long a worker spins before it sleeps
DEFAULT_CACHES = {"l1d": 32 << 10, "l2": 1 << 20, "llc": 32 << 20}     # where the OS does not say
_SIZE = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def measure():
    """The facts, a dict of numbers (and where the cache sizes came from)."""
    start = time.perf_counter()
    facts = caches_from_os() or dict(DEFAULT_CACHES, caches_from="defaults (the OS lists no caches)")
    facts.update(wake_ns=_wake_ns(), element_ns=_element_ns(), pause_ns=_pause_ns(), threads=threads())
    facts["seconds"] = round(time.perf_counter() - start, 3)
    return facts


def derive(facts):
    """{threshold: value} from `facts` (machine.py clamps them to their ranges)."""
    l1, l2 = facts["l1d"], facts["l2"]
    work = GAIN * facts["wake_ns"] / max(facts["element_ns"], 1e-3)
    return {
        "parallel_min_work": 1 << 62 if facts["threads"] < 2 else 1 << max(0, round(math.log2(max(work, 1)))),
        "stream_min_bytes": 2 * l2,
        "tile": math.isqrt(l1 // 32),
        "across_tile": l1 // 128,
        "scratch_limit": l1 // 4,
        "online_block": l1 // 16,
        "block_bytes": l2,
        "hoist_bytes": 2 * l1,
        "spin_budget": int(SPIN_NS / max(facts["pause_ns"], 0.1)),
    }


def threads():
    """Threads per kernel as threads.threads() counts them (TRACEGRAD_THREADS, default all cores)."""
    n = os.environ.get("TRACEGRAD_THREADS")
    return max(1, int(n)) if n else (os.cpu_count() or 1)


def caches_from_os(root="/sys/devices/system/cpu/cpu0/cache"):
    """{l1d, l2, llc} in bytes from Linux's cache listing, or None where it has no data caches."""
    sizes = {}
    for d in glob.glob(os.path.join(root, "index*")):
        try:
            with open(os.path.join(d, "level")) as a, open(os.path.join(d, "type")) as b, \
                    open(os.path.join(d, "size")) as c:
                level, kind, size = int(a.read()), b.read().strip(), c.read().strip()
            n = int(size.rstrip("KMG")) * _SIZE.get(size[-1:], 1)
        except (OSError, ValueError):
            continue
        if kind in ("Data", "Unified") and n > 0:
            sizes[level] = max(n, sizes.get(level, 0))
    if 1 not in sizes:
        return None
    l2 = sizes.get(2, 32 * sizes[1])
    return {"l1d": sizes[1], "l2": l2, "llc": sizes[max(sizes)] if max(sizes) > 2 else l2, "caches_from": "os"}


def _best(fn, repeats):
    """The shortest of `repeats` runs of fn, in nanoseconds."""
    out = math.inf
    for _ in range(repeats):
        t = time.perf_counter_ns()
        fn()
        out = min(out, time.perf_counter_ns() - t)
    return max(out, 1)


def _wake_ns(rounds=40):
    """Half the median round trip of a semaphore between this thread and a sleeping one."""
    ping, pong, times = threading.Semaphore(0), threading.Semaphore(0), []

    def partner():
        for _ in range(rounds):
            ping.acquire()
            pong.release()
    t = threading.Thread(target=partner, daemon=True)
    t.start()
    for _ in range(rounds):
        start = time.perf_counter_ns()
        ping.release()
        pong.acquire()
        times.append(time.perf_counter_ns() - start)
    t.join()
    return sorted(times)[len(times) // 2] / 2


def _element_ns(n=1 << 20):
    a, b, c = np.ones(n, np.float32), np.ones(n, np.float32), np.empty(n, np.float32)
    return _best(lambda: np.add(a, b, out=c), 5) / n


_SPIN = """define void @spin(i64 %n) {
entry:
  br label %loop
loop:
  %i = phi i64 [0, %entry], [%j, %loop]
  PAUSE
  %j = add i64 %i, 1
  %more = icmp ult i64 %j, %n
  br i1 %more, label %loop, label %done
done:
  ret void
}
DECL
"""


def _pause_ns(n=20000):
    """Nanoseconds of one iteration of a worker's idle loop: a pause instruction (x86) and a count."""
    host.initialize()
    x86 = llvm.get_default_triple().startswith("x86_64")
    text = _SPIN.replace("PAUSE", "call void @llvm.x86.sse2.pause()" if x86 else "") \
        .replace("DECL", "declare void @llvm.x86.sse2.pause()" if x86 else "")
    mod = llvm.parse_assembly(text)
    ee = llvm.create_mcjit_compiler(mod, host.current().new_machine())
    ee.finalize_object()
    spin = ctypes.CFUNCTYPE(None, ctypes.c_int64)(ee.get_function_address("spin"))
    spin(100)
    ns = _best(lambda: spin(n), 5) / n
    del spin, ee                        # the module's code is freed with its engine
    return ns
