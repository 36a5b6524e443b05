"""The floors a workload's time is judged against, measured before any workload runs.

- Bandwidth floor (the memory-bound workloads, which have `floor_bytes`: the bytes their whole call must
  move): floor_bytes over the best bandwidth of ROUNDS rounds of a copy (dst = src) and a triad
  (dst = a + s * b) moving the same bytes, numba-parallel on as many threads as tracegrad's kernels use,
  and NumPy's one-thread copy (memcpy). Best, not median: a floor is what the machine can do, and a round that
  a busy moment slowed says nothing about that. Measured first, so the workloads' own load does not
  lower it.
- Compute floor (a workload with `compute_floor`, W1): the same elements through the workload's
  arithmetic on a block that stays in cache, compiled by tracegrad and summed (one add per element
  more): what its transcendental costs here with no memory traffic.

A workload's floor is the larger of the two; a time below it means the floor read low (a busy machine
while it was taken), which the table says instead of printing a ratio below 1.
"""
import time

import numpy as np

ROUNDS = 7
FLOOR = ("copy, threads", "copy, one thread")      # the survey's and tools' pseudo-columns (floor_setup)


def _kernels():
    import numba

    @numba.njit(parallel=True, fastmath=True, cache=False)
    def copy(dst, src):
        for i in numba.prange(src.size):
            dst[i] = src[i]

    @numba.njit(parallel=True, fastmath=True, cache=False)
    def triad(dst, a, b, s):
        for i in numba.prange(a.size):
            dst[i] = a[i] + s * b[i]
    return copy, triad


def _best(run, rounds):
    run()
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    return min(times)


def bandwidth(nbytes, rounds=ROUNDS):
    """{way: GB/s} moving `nbytes` per call: the copy and the triad on tracegrad's threads, NumPy's copy."""
    import numba

    from ..backends.cpu.threads import threads
    numba.set_num_threads(min(threads(), numba.config.NUMBA_NUM_THREADS))
    copy, triad = _kernels()
    n2, n3 = max(1, nbytes // 8), max(1, nbytes // 12)          # float32: copy moves 8 B, triad 12 B an element
    src, dst = np.ones(n2, np.float32), np.zeros(n2, np.float32)
    a, b, c = np.ones(n3, np.float32), np.ones(n3, np.float32), np.zeros(n3, np.float32)
    ways = {"copy, threads": lambda: copy(dst, src), "triad, threads": lambda: triad(c, a, b, np.float32(3.0)),
            "copy, one thread": lambda: np.copyto(dst, src)}
    moved = {"copy, threads": n2 * 8, "triad, threads": n3 * 12, "copy, one thread": n2 * 8}
    return {way: moved[way] / _best(run, rounds) / 1e9 for way, run in ways.items()}


def floor_setup(floor_bytes, threaded=True):
    """run() copying floor_bytes / 2 bytes (float32) into an existing array, numba-parallel on tracegrad's
    thread count or (threaded=False) NumPy's copy on this thread: the floor column of the survey and the
    tools, timed in their rounds."""
    import numba

    from ..backends.cpu.threads import threads
    n = floor_bytes // 8
    src, dst = np.ones(n, np.float32), np.zeros(n, np.float32)
    if not threaded:
        return lambda: np.copyto(dst, src) or []
    numba.set_num_threads(min(threads(), numba.config.NUMBA_NUM_THREADS))
    copy = _kernels()[0]

    def run():
        copy(dst, src)
        return []
    return run


def measure(workloads, log=print):
    """{workload id: Floor} for the workloads that have one, measured now (before they run)."""
    out = {}
    for w in workloads:
        if not w.floor_bytes and not w.compute_floor:
            continue
        f = out[w.id] = Floor()
        if w.floor_bytes:
            f.rates = bandwidth(w.floor_bytes)
            f.memory = w.floor_bytes / max(f.rates.values()) / 1e9
        if w.compute_floor:
            f.compute = _best(w.compute_floor(w.inputs()), ROUNDS)
        log(f"  floor of {w.id}: {f.describe()}")
    return out


class Floor:
    def __init__(self):
        self.rates, self.memory, self.compute = {}, None, None

    @property
    def seconds(self):
        return max(t for t in (self.memory, self.compute) if t is not None)

    def describe(self):
        parts = []
        if self.memory is not None:
            best = max(self.rates, key=self.rates.get)
            parts.append(f"bandwidth {self.memory * 1e3:.3f} ms ({self.rates[best]:.1f} GB/s, {best}; "
                         + ", ".join(f"{k} {v:.1f}" for k, v in self.rates.items() if k != best) + ")")
        if self.compute is not None:
            parts.append(f"compute {self.compute * 1e3:.3f} ms")
        return "; ".join(parts)


def floor_lines(rows, columns, width, floors):
    """The floor table: each workload's floor (the larger of bandwidth and compute) and every column's
    time over it; 'below' where a column beat the floor (the floor read low)."""
    lines = ["floor = max(bytes that must move / best copy or triad bandwidth, compute on cached data), "
             "measured before the workloads; time / floor per column",
             f"{'workload':24s}{'MB':>8s}{'floor ms':>10s}{'GB/s':>7s}" + "".join(f"{c:>{width}s}" for c in columns)]
    for w, res in rows:
        f = floors.get(w.id)
        if f is None:
            continue
        cells = ["-" if res[c].failure or res[c].median is None else
                 f"{res[c].median / f.seconds:.2f}x" if res[c].median >= f.seconds else "below" for c in columns]
        gbs = f"{max(f.rates.values()):7.1f}" if f.rates else f"{'-':>7s}"
        mb = f"{w.floor_bytes / 1e6:8.1f}" if w.floor_bytes else f"{'-':>8s}"
        lines.append(f"{w.id + ' ' + w.name:24s}{mb}{f.seconds * 1e3:10.3f}{gbs}" + "".join(f"{c:>{width}s}" for c in cells))
    return lines
