"""How busy the machine was while something was timed: the share of all cores that other processes used
(Linux: /proc/stat's busy time less this process's CPU time). A timing taken while others used more than
BUSY of the machine says as much about them as about the code: the bench and the examples say so beside
their figures.

And `settle()`, which the bench runs before each column's sample: a library's thread pool keeps
spinning after its call returns, on the cores the next column needs. OpenBLAS's workers (NumPy's, and
tracegrad eager's matrix products) busy-wait about 0.1 s (its THREAD_TIMEOUT, 2^28 cycles, fixed when
the library loads: OPENBLAS_THREAD_TIMEOUT cannot change it from inside the process), torch's OpenMP
and MKL threads 10-30 ms. Measured on the 2-core bench host (others using ~90 % of it), W4's tg
compiled sample took 28.4 ms right after NumPy's, 26.2 ms right after torch eager's, and 16.3 ms
right after its own (whose pool parks at once), each started from the same pause. So the bench
waits, sleeping, until this process uses no CPU before each sample (the spin is over), and its
Load counts only the samples' time, not the waits."""
import os
import time

BUSY = 0.10


def _busy_seconds():
    """CPU seconds all cores have spent busy since boot, or None where /proc/stat is missing."""
    try:
        with open("/proc/stat") as fh:
            fields = [int(v) for v in fh.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)          # idle + iowait
    busy = sum(fields[:8]) - idle                                      # without guest time (counted in user)
    return busy / os.sysconf("SC_CLK_TCK")


def _own_seconds():
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


class Load:
    """`with Load() as load: ...`, then `load.others`: the share of all cores other processes used during the
    block (None where unknown), and `load.note()`: a warning text when it passed BUSY, else "". One Load
    entered several times (`load = Load()`, then `with load:` around each sample) counts all its blocks
    together, and nothing between them."""

    def __init__(self):
        self.others, self._wall, self._theirs, self._known = None, 0.0, 0.0, True

    def __enter__(self):
        self._start = (time.perf_counter(), _busy_seconds(), _own_seconds())
        return self

    def __exit__(self, *exc):
        wall, busy, own = self._start
        now_busy = _busy_seconds()
        self._wall += time.perf_counter() - wall
        if busy is None or now_busy is None:
            self._known = False
        else:
            self._theirs += (now_busy - busy) - (_own_seconds() - own)
        if self._known and self._wall > 0:
            self.others = max(0.0, self._theirs / (self._wall * (os.cpu_count() or 1)))
        return False

    def note(self):
        if self.others is None or self.others <= BUSY:
            return ""
        return (f"other processes used {self.others:.0%} of the machine while this was timed (more than "
                f"{BUSY:.0%}): the times are not meaningful; measure on a quiet machine")


def settle(window=0.01, quiet=0.05, limit=0.5):
    """Sleep until this process's threads have stopped using CPU: two `window`s in a row in which it used
    less than `quiet` of one core, or `limit` seconds (a pool that never parks). See the module's text."""
    end, calm = time.perf_counter() + limit, 0
    while calm < 2 and time.perf_counter() < end:
        c0, t0 = time.process_time(), time.perf_counter()
        time.sleep(window)
        used = (time.process_time() - c0) / (time.perf_counter() - t0)
        calm = calm + 1 if used < quiet else 0
