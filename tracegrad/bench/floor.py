"""The bandwidth floor of memory-bound workloads: bytes that must move / measured copy bandwidth.

Each memory-bound workload has `floor_bytes`, the bytes its whole call must move (read every input
once, write every output once; W7 reads x twice: its means must be known before the centered values
are written). Its floor is timed like a column, in the same interleaved rounds as the workload
itself (so under the same load): a copy of floor_bytes / 2 bytes into an existing array (it reads
and writes floor_bytes in all), numba-parallel on as many threads as tracegrad's kernels use
(TRACEGRAD_THREADS, default all cores), and NumPy's one-thread copy; the floor is the faster
median, as tracegrad's runtime runs a kernel on one thread when its workers are slower (a busy
machine). A kernel can beat the floor only where its data stays in cache across calls.
"""
import numpy as np

FLOOR = ("copy, threads", "copy, one thread")      # the pseudo-columns that time the floor


def floor_setup(floor_bytes, threaded=True):
    """run() copying floor_bytes / 2 bytes (float32) into an existing array: numba-parallel on
    tracegrad's thread count, or (threaded=False) NumPy's copy on this thread."""
    import numba

    from ..codegen.threads import threads

    @numba.njit(parallel=True, fastmath=True, cache=False)
    def copy(dst, src):
        for i in numba.prange(src.size):
            dst[i] = src[i]

    n = floor_bytes // 8
    src, dst = np.ones(n, np.float32), np.zeros(n, np.float32)
    if not threaded:
        return lambda: np.copyto(dst, src) or []
    numba.set_num_threads(min(threads(), numba.config.NUMBA_NUM_THREADS))

    def run():
        copy(dst, src)
        return []
    return run


def floor_lines(rows, columns, width):
    """Lines for the workloads that have `floor_bytes` and a timed floor: the floor in ms, the copy
    bandwidth it measured, and each column's median / floor."""
    from ..codegen.threads import threads
    lines = [f"bandwidth floor = bytes that must move / copy bandwidth (the same bytes copied in the same rounds: "
             f"numba on {threads()} threads or NumPy on one, the faster median); time / floor per column",
             f"{'workload':24s}{'MB':>8s}{'floor ms':>10s}{'GB/s':>7s}" + "".join(f"{c:>{width}s}" for c in columns)]
    for w, res in rows:
        times = [res[c].median for c in FLOOR if c in res and res[c].median]
        if not w.floor_bytes or not times:
            continue
        floor = min(times)
        cells = ["-" if res[c].failure or res[c].median is None else f"{res[c].median / floor:.2f}x"
                 for c in columns]
        lines.append(f"{w.id + ' ' + w.name:24s}{w.floor_bytes / 1e6:8.1f}{floor * 1e3:10.3f}"
                     f"{w.floor_bytes / floor / 1e9:7.1f}" + "".join(f"{c:>{width}s}" for c in cells))
    return lines
