"""Streamed (non-temporal) against normal stores of a compiled map's output, by size: the map's time
and a NumPy reduction reading the output right after it (a consumer that would find a normally
stored output in cache if it stayed there). The inputs are evicted between rounds (as a large input
of a real step would be). The size from which streaming wins both together is the rule of
backends/cpu/stream.py's stream_min_bytes (backends/cpu/machine.py).

    python -m tracegrad.bench.streaming [MiB ...]
"""
import sys
import time

import numpy as np


def measure(mib, rounds=15):
    """{"normal"|"stream": (median map seconds, median read seconds)} for an output of `mib` MiB."""
    import tracegrad as tg
    from tracegrad.backends.cpu import machine
    n = int(mib * (1 << 20)) // 4
    x = tg.from_numpy(np.random.default_rng(0).standard_normal(n).astype(np.float32))
    fns = {}
    for label, rule in (("normal", 1 << 40), ("stream", 1)):
        with machine.override(stream_min_bytes=rule):
            fns[label] = tg.compile(lambda x: x * 2.0 + 1.0)
            fns[label](x)
    evict = np.ones(16 << 20, np.float32)          # 64 MiB touched between rounds
    times = {k: ([], []) for k in fns}
    for _ in range(rounds):
        for label, f in fns.items():
            evict += 1.0
            t0 = time.perf_counter()
            y = f(x)
            t1 = time.perf_counter()
            np.add.reduce(y.numpy())
            t2 = time.perf_counter()
            times[label][0].append(t1 - t0)
            times[label][1].append(t2 - t1)
    return {k: (float(np.median(a)), float(np.median(b))) for k, (a, b) in times.items()}


def main(argv=None):
    sizes = [float(a) for a in (argv if argv is not None else sys.argv[1:])] or [1, 2, 4, 8, 16]
    print("MiB     normal: map + read ms      stream: map + read ms   stream/normal")
    for mib in sizes:
        r = measure(mib)
        (nm, nr), (sm, sr) = r["normal"], r["stream"]
        print(f"{mib:<7g} {nm * 1e3:8.3f} + {nr * 1e3:8.3f}       {sm * 1e3:8.3f} + {sr * 1e3:8.3f}      "
              f"{(sm + sr) / (nm + nr):.2f}")


if __name__ == "__main__":
    main()
