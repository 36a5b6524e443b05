"""The bandwidth floor of memory-bound workloads: bytes that must move / measured bandwidth.

Bandwidth is measured as WORKLOADS.md does: a numba-parallel copy (b = a) and triad
(a = b + s*c) over 64 MiB float32 arrays on all cores, best of a few runs each; the floor uses
the better of the two, so a kernel can only beat it when its data fits in cache.
"""
import time

import numpy as np

ARRAY_BYTES = 64 << 20


def _best(fn, repeat):
    fn()
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def measure_bandwidth(repeat=5):
    """{"copy": GB/s, "triad": GB/s} (copy moves 2 arrays' bytes, triad 3)."""
    import numba

    @numba.njit(parallel=True, fastmath=True, cache=False)
    def copy(dst, src):
        for i in numba.prange(src.size):
            dst[i] = src[i]

    @numba.njit(parallel=True, fastmath=True, cache=False)
    def triad(a, b, c, s):
        for i in numba.prange(a.size):
            a[i] = b[i] + s * c[i]

    n = ARRAY_BYTES // 4
    a, b, c = np.ones(n, np.float32), np.ones(n, np.float32), np.ones(n, np.float32)
    return {"copy": 2 * ARRAY_BYTES / _best(lambda: copy(a, b), repeat) / 1e9,
            "triad": 3 * ARRAY_BYTES / _best(lambda: triad(a, b, c, np.float32(0.5)), repeat) / 1e9}


def floor_lines(rows, columns, bandwidth, width):
    """Lines for the workloads that have `floor_bytes`: the floor in ms and each column's median / floor."""
    import numba
    gbs = max(bandwidth.values())
    lines = [f"bandwidth floor = bytes that must move / {gbs:.1f} GB/s (best of copy {bandwidth['copy']:.1f}, "
             f"triad {bandwidth['triad']:.1f} GB/s; numba, {numba.get_num_threads()} threads, "
             f"{ARRAY_BYTES >> 20} MiB arrays); time / floor per column",
             f"{'workload':24s}{'MB':>8s}{'floor ms':>10s}" + "".join(f"{c:>{width}s}" for c in columns)]
    for w, res in rows:
        if not w.floor_bytes:
            continue
        floor = w.floor_bytes / (gbs * 1e9)
        cells = ["-" if res[c].failure or res[c].median is None else f"{res[c].median / floor:.2f}x"
                 for c in columns]
        lines.append(f"{w.id + ' ' + w.name:24s}{w.floor_bytes / 1e6:8.1f}{floor * 1e3:10.3f}"
                     + "".join(f"{c:>{width}s}" for c in cells))
    return lines
