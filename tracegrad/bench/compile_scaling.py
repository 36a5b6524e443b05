"""`python -m tracegrad.bench.compile_scaling [N ...]`: the first call's time against the number of ops.

For each N (default 250 500 1000 2000) a function of N elementwise and reducing ops on (64, 32)
float32 tensors (forward and backward: the backward graph has about as many ops again) is traced,
optimized, fused and compiled in a fresh process with an empty disk cache, then called once. Prints
the process CPU seconds of that first call, split into LLVM (optimization and machine code) and the
rest, and the seconds per 1000 ops: a compile path linear in the ops keeps that last column flat.
"""
import json
import os
import subprocess
import sys
import tempfile

CHILD = r"""
import json, sys, time
import numpy as np
import tracegrad as tg
import tracegrad.backends.cpu
from tracegrad.backends.cpu import engine

llvm = [0.0]
real = engine.optimize, engine.Engine.__init__
def timed(fn):
    def run(*a, **k):
        t0 = time.process_time()
        try:
            return fn(*a, **k)
        finally:
            llvm[0] += time.process_time() - t0
    return run
engine.Engine.__init__ = timed(real[1])      # optimization and machine code (Engine calls optimize)

n = int(sys.argv[1])

def f(x, w):
    v = x
    for i in range(n):
        k = i % 5
        if k == 0:
            v = v * w + 0.1
        elif k == 1:
            v = v.tanh()
        elif k == 2:
            v = v - v.mean(dim=1, keepdim=True)
        elif k == 3:
            v = (v * 0.5).exp() * 0.9
        else:
            v = v + x * 0.01
    return (v * v).sum()

rng = np.random.default_rng(0)
x = tg.tensor(rng.standard_normal((64, 32)).astype(np.float32), requires_grad=True)
w = tg.tensor(rng.standard_normal(32).astype(np.float32) * 0.1, requires_grad=True)
g = tg.compile(f)
t0 = time.process_time()
g(x, w).backward()
total = time.process_time() - t0
print(json.dumps({"total": total, "llvm": llvm[0], "kernels": g.stats()["kernels"]}))
"""


def measure(n):
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, TRACEGRAD_CACHE_DIR=cache)
        out = subprocess.run([sys.executable, "-c", CHILD, str(n)], env=env, capture_output=True, text=True,
                             check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv):
    sizes = [int(a) for a in argv] or [250, 500, 1000, 2000]
    print(f"{'ops':>6s} {'kernels':>8s} {'first call s':>13s} {'LLVM s':>8s} {'other s':>8s} {'s per 1000 ops':>15s}")
    for n in sizes:
        r = measure(n)
        print(f"{n:6d} {r['kernels']:8d} {r['total']:13.2f} {r['llvm']:8.2f} {r['total'] - r['llvm']:8.2f} "
              f"{1000 * r['total'] / n:15.2f}")


if __name__ == "__main__":
    main(sys.argv[1:])
