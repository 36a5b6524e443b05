"""The floors a workload's time is judged against, measured before any workload runs.

- Bandwidth floor (the memory-bound workloads, which have `traffic`: the arrays their call must read and write,
  from their shapes, streams.py): the fastest of ROUNDS timed runs of those passes over buffers of the
  workload's own sizes, each pass a stream of 64-byte vectors, with normal or non-temporal stores, on one
  thread and on tracegrad's thread count. The same passes over arrays four times the last-level cache are
  timed beside it and printed: where the workload's own footprint streams much faster than that, its buffers
  stayed in cache between calls, as the workload's own can. Best, not median: a floor is what the machine can
  do, and a round that a busy moment slowed says nothing about that. Measured first, so the workloads' own
  load does not lower it.
- Compute floor (a workload with `compute_floor`, W1): its arithmetic, with the math library routine
  tracegrad's compiled code calls, over as many elements read from a block that stays in cache (no memory
  traffic), on tracegrad's threads: the vector throughput of that routine here.

A workload's floor is the larger of the two; a time below it means the floor read low (a busy machine
while it was taken), which the table says instead of printing a ratio below 1.
"""
import time

import numpy as np

from . import streams

ROUNDS = 15
FLOOR = ("copy, threads", "copy, one thread")      # the survey's and tools' pseudo-columns (floor_setup)


def _copy_kernel():
    import numba

    @numba.njit(parallel=True, fastmath=True, cache=False)
    def copy(dst, src):
        for i in numba.prange(src.size):
            dst[i] = src[i]
    return copy


def _best(run, rounds):
    run()
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    return min(times)


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
    copy = _copy_kernel()

    def run():
        copy(dst, src)
        return []
    return run


def _threads():
    import numba

    from ..backends.cpu.threads import threads
    return min(threads(), numba.config.NUMBA_NUM_THREADS)


def measure(workloads, log=print, rounds=ROUNDS):
    """{workload id: Floor} for the workloads that have one, measured now (before they run)."""
    out, seen = {}, {}
    for w in workloads:
        if not w.traffic and not w.compute_floor:
            continue
        inp = w.inputs()
        f = out[w.id] = Floor()
        if w.traffic:
            f.traffic = w.traffic(inp)
            far = streams.beyond_l3(f.traffic)
            for t, slot in ((f.traffic, "own"), (far, "far")):
                if t not in seen:                            # W1 and W2 move the same: measured once
                    seen[t] = streams.measure(t, _threads(), rounds)
                setattr(f, slot, seen[t])
            f.far_traffic = far
        if w.compute_floor:
            f.compute = _best(w.compute_floor(inp), rounds)
        log(f"  floor of {w.id}: " + f.describe().replace("\n", "\n  "))
    return out


def _way(key):
    threads, kind = key
    return f"{threads} thread{'s' if threads > 1 else ''}, {kind} stores"


class Floor:
    """traffic (streams.Traffic); own / far: {(threads, store kind): best seconds} of its passes over the
    workload's buffers / over arrays beyond the last-level cache (far_traffic); compute: seconds or None."""

    def __init__(self):
        self.traffic = self.far_traffic = self.compute = None
        self.own, self.far = {}, {}

    @property
    def memory(self):
        return min(self.own.values()) if self.own else None

    @property
    def seconds(self):
        return max(t for t in (self.memory, self.compute) if t is not None)

    @property
    def gbs(self):
        """The bandwidth the floor stands for: the workload's bytes over its best stream time."""
        return self.traffic.nbytes / self.memory / 1e9 if self.own else None

    def describe(self):
        """What the floor is made of, a line per part: the bytes and passes, each stream's rate over the
        workload's buffers (the best first), beyond the last-level cache, the compute floor."""
        lines = []
        if self.own:
            ways = sorted(self.own, key=self.own.get)
            far = min(self.far, key=self.far.get)
            far_gbs = self.far_traffic.nbytes / self.far[far] / 1e9
            lines += [f"{self.traffic.nbytes / 1e6:.1f} MB must move: {self.traffic.describe()}",
                      f"  over its own buffers: {self.memory * 1e3:.3f} ms, {self.gbs:.1f} GB/s ({_way(ways[0])}); "
                      + ", ".join(f"{_way(k)} {self.traffic.nbytes / self.own[k] / 1e9:.1f}" for k in ways[1:]),
                      f"  beyond the {streams.last_level_cache() >> 20} MB last-level cache: {far_gbs:.1f} GB/s "
                      f"({_way(far)}), which would make it {self.traffic.nbytes / far_gbs / 1e6:.3f} ms"]
        if self.compute is not None:
            lines.append(f"  compute on cached data: {self.compute * 1e3:.3f} ms")
        return "\n".join(lines)


def floor_lines(rows, columns, width, floors):
    """The floor table: each workload's floor (the larger of bandwidth and compute) and every column's
    time over it; 'below' where a column beat the floor (the floor read low)."""
    lines = ["floor = max(the bytes a workload must move / the best stream of its passes over buffers of its sizes, "
             "its arithmetic on cached data), measured before the workloads; time / floor per column",
             f"{'workload':24s}{'MB':>8s}{'floor ms':>10s}{'GB/s':>7s}{'comp ms':>9s}"
             + "".join(f"{c:>{width}s}" for c in columns)]
    for w, res in rows:
        f = floors.get(w.id)
        if f is None:
            continue
        cells = ["-" if res[c].failure or res[c].median is None else
                 f"{res[c].median / f.seconds:.2f}x" if res[c].median >= f.seconds else "below" for c in columns]
        gbs = f"{f.gbs:7.1f}" if f.own else f"{'-':>7s}"
        mb = f"{f.traffic.nbytes / 1e6:8.1f}" if f.traffic else f"{'-':>8s}"
        comp = f"{f.compute * 1e3:9.3f}" if f.compute is not None else f"{'-':>9s}"
        lines.append(f"{w.id + ' ' + w.name:24s}{mb}{f.seconds * 1e3:10.3f}{gbs}{comp}"
                     + "".join(f"{c:>{width}s}" for c in cells))
    return lines
