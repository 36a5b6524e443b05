"""Peak memory of a workload's step, tg eager against tg compiled, with tracemalloc (NumPy's
allocations are traced), in bytes above the inputs: the first call (trace + compile + run) and a
steady-state call, counting what stays between calls (grads, a compiled program's buffers).
Issue 8, item 12: compiled at most eager on W3 and W4.

    python -m tracegrad.bench.peak_memory W3 W4
"""
import gc
import sys
import tracemalloc


def measure(w, col):
    inp = w.inputs()
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    run = w.columns[col](inp)
    out = run()
    first = tracemalloc.get_traced_memory()[1] - base
    del out
    out = run()
    del out
    gc.collect()
    held = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.reset_peak()
    out = run()
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    return first, peak, held


if __name__ == "__main__":
    import numpy as np

    import tracegrad as tg
    from tracegrad.bench import workloads
    tg.compile(lambda x: (x * 2.0).sum())(tg.from_numpy(np.ones(4, np.float32)))   # modules imported first
    M = 2 ** 20
    for wid in sys.argv[1:]:
        w = workloads.find(wid)
        for col in ("tg eager", "tg compiled"):
            f, p, h = measure(w, col)
            print(f"{wid} {col:12s} first call peak +{f / M:6.1f} MB   steady call peak +{p / M:6.1f} MB   "
                  f"held between calls {h / M:6.1f} MB", flush=True)
