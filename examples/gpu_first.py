"""First-contact GPU probe for tracegrad (~3-5 min on an H100/H200, no network), run from the repository root:

    PYTHONUNBUFFERED=1 PYTHONPATH=. timeout 260 python3 examples/gpu_first.py
    python3 examples/gpu_check.py --hard-limit 260          # then the full check and its table

Prints, in order (each step guarded: a failure prints its traceback head and the run goes on):
 E  environment: versions of numba, numba-cuda, llvmlite, cuda-bindings/core, torch; device, driver and
    runtime versions; where numba-cuda found NVVM/libdevice/nvrtc; which libcublas tracegrad loads
 S  smoke: eager add, compiled gelu, cuBLAS matmul, compiled softmax, layernorm fwd+bwd on small tensors
    vs NumPy (max rel err), with the wall time of each first call (= numba-cuda compile + link)
 L  launch overhead: numba-cuda's host cost (us) per launch of a kernel with 2 and with 8 array arguments
 K  per workload G1/G2/G3/G5 at gpu_check's sizes, three times per column: latency (CUDA events around one
    call, as gpu_check measures), pipelined (events around 20 back-to-back calls / 20: ~ the GPU time),
    and host-only (perf_counter, no sync); for tg compiled and torch eager (torch.compile skipped: slow)
 P  G4 at full size: tg compiled and torch eager steps (ms, TFLOP/s, pipelined x5), one 4096^3 SGEMM
 C  torch.compile G2 and G3 (the goals' peers): cold compile time, latency and pipelined ms
GPU_FIRST_SKIP=K,P,C skips steps; GPU_FIRST_N=4 shrinks S for the simulator, where K, P and C (real sizes)
are always skipped: `NUMBA_ENABLE_CUDASIM=1 GPU_FIRST_N=4 python examples/gpu_first.py` is the CI run.
Exit status 1 when a step failed (each failure is printed where it happened and listed at the end).
"""
import os
import statistics
import sys
import time
import traceback

import numpy as np
from numba import cuda      # a global: the simulator swaps the module a kernel reads as a global, not a closure's

sys.path.insert(1, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # this checkout's tracegrad
os.environ.setdefault("NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS", "0")
T0 = time.perf_counter()


SIM = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"
SKIP = os.environ.get("GPU_FIRST_SKIP", "").split(",") + (["K", "P", "C"] if SIM else [])
FAILED = []


def step(name):
    def deco(fn):
        if name.split()[0] in SKIP:
            print(f"\n== {name}: skipped ({'the simulator: real sizes need a GPU' if SIM else 'GPU_FIRST_SKIP'})")
            return fn
        t = time.perf_counter()
        print(f"\n== {name}  (t={t - T0:.0f} s)", flush=True)
        try:
            fn()
        except BaseException as e:           # noqa: BLE001 -- a probe: report and go on
            FAILED.append(name)
            print(f"  FAILED: {type(e).__name__}: {e}")
            print("  " + "".join(traceback.format_exc().splitlines(True)[-6:]).replace("\n", "\n  "))
        print(f"   ({time.perf_counter() - t:.1f} s)", flush=True)
        return fn
    return deco


@step("E environment")
def _env():
    import importlib.metadata as md
    for p in ("numba", "numba-cuda", "llvmlite", "cuda-bindings", "cuda-core", "cuda-pathfinder", "nvidia-cublas",
              "nvidia-cuda-nvrtc", "nvidia-nvjitlink", "torch", "numpy"):
        try:
            print(f"  {p} {md.version(p)}")
        except Exception as e:
            print(f"  {p}: {type(e).__name__}")
    from numba import cuda
    print("  numba.cuda:", cuda.__file__, getattr(cuda, "implementation", "?"))
    import tracegrad as tg
    from tracegrad.backends.cuda.eager import matmul
    print("  libcublas candidates:", matmul.candidates())
    info = tg.cuda.backend_info()
    for key, value in info.items():
        print(f"  {key}: {value}")
    if not info["available"]:
        raise RuntimeError("tg.cuda.is_available() is False: no GPU and no simulator")
    if not SIM:
        from numba.cuda.cudadrv import nvvm
        print("  NVVM version", nvvm.NVVM().get_version())
        if not info["cublas"]:
            raise RuntimeError(f"no cuBLAS loaded: {info['cublas_missing']}")


@step("S smoke (first calls = compile)")
def _smoke():
    import tracegrad as tg
    from tracegrad.bench.workloads import _gelu, _layernorm_loss, _softmax
    r = np.random.default_rng(0)

    def timed(label, fn, want):
        t = time.perf_counter()
        got = fn()
        got = [g.detach().cpu().numpy().astype(np.float64) for g in got]
        err = max(float(np.max(np.abs(g - w)) / max(1e-30, np.max(np.abs(w)))) for g, w in zip(got, want))
        print(f"  {label}: first call {time.perf_counter() - t:.2f} s, rel err {err:.1e}", flush=True)
    n = int(os.environ.get("GPU_FIRST_N", "256"))        # rows (2n columns); the simulator needs ~4
    x = r.standard_normal((n, 2 * n), np.float32)
    cx = tg.tensor(x, device="cuda")
    timed("eager add", lambda: [cx + cx], [2.0 * x])
    timed("compiled gelu", lambda: [tg.compile(lambda t: _gelu(t, lambda u: u.tanh()))(cx)],
          [_gelu(x.astype(np.float64), np.tanh)])
    timed("cuBLAS matmul", lambda: [cx @ cx.T], [x.astype(np.float64) @ x.T.astype(np.float64)])
    e = np.exp(x - x.max(1, keepdims=True))
    timed("compiled softmax", lambda: [tg.compile(_softmax)(cx)], [e / e.sum(1, keepdims=True)])
    xw = tg.tensor(x, device="cuda", requires_grad=True)
    w, b = (tg.tensor(np.ones(2 * n, np.float32), device="cuda", requires_grad=True) for _ in range(2))
    g = tg.tensor(r.standard_normal((n, 2 * n), np.float32), device="cuda")
    f = tg.compile(lambda x, w, b, g: _layernorm_loss(x, w, b, g, lambda u: u.sqrt()))
    t = time.perf_counter()
    f(xw, w, b, g).backward()
    tg.cuda.synchronize()
    print(f"  compiled layernorm fwd+bwd first call {time.perf_counter() - t:.2f} s", flush=True)


def ev_latency(run, sync, event, reps=10):
    out = []
    for _ in range(reps):
        s, e = event(), event()
        s.record(); run(); e.record(); e.synchronize()
        out.append(s.elapsed(e))
    return statistics.median(out)


@step("L launch overhead")
def _launch():
    @cuda.jit
    def k2(a, b):
        i = cuda.grid(1)
        if i < a.size:
            b[i] = a[i]

    @cuda.jit
    def k8(a, b, c, d, e, f, g, h):
        i = cuda.grid(1)
        if i < a.size:
            h[i] = a[i] + b[i] + c[i] + d[i] + e[i] + f[i] + g[i]
    arrs = [cuda.to_device(np.zeros(1024, np.float32)) for _ in range(8)]
    for k, args in ((k2, arrs[:2]), (k8, arrs)):
        k[4, 256](*args)
        cuda.synchronize()
        launches = 3 if SIM else 2000       # the simulator runs each of the 1024 threads in Python
        t = time.perf_counter()
        for _ in range(launches):
            k[4, 256](*args)
        dt = (time.perf_counter() - t) / launches
        cuda.synchronize()
        print(f"  numba-cuda launch, {len(args)} arrays: {dt * 1e6:.1f} us host per launch")


def workloads():
    import tracegrad as tg
    from tracegrad.bench.workloads import _chain, _gelu, _layernorm_loss, _softmax, _tg_fwd_bwd
    r = np.random.default_rng(1)
    x1 = r.standard_normal(64 << 20, np.float32)
    x2 = r.standard_normal((16384, 4096), np.float32)
    x5 = r.standard_normal(8, np.float32)
    w3 = np.ones(4096, np.float32)
    tgc = {}
    a = tg.tensor(x1, device="cuda")
    f1 = tg.compile(lambda x: _gelu(x, lambda u: u.tanh()))
    tgc["G1"] = lambda: f1(a)
    b2 = tg.tensor(x2, device="cuda")
    f2 = tg.compile(_softmax)
    tgc["G2"] = lambda: f2(b2)
    xs = [tg.tensor(x2, device="cuda", requires_grad=True), tg.tensor(w3, device="cuda", requires_grad=True),
          tg.tensor(0 * w3, device="cuda", requires_grad=True), tg.tensor(x2, device="cuda")]
    f3 = tg.compile(lambda x, w, b, g: _layernorm_loss(x, w, b, g, lambda u: u.sqrt()))
    tgc["G3"] = _tg_fwd_bwd(f3, xs, xs[:3])
    c5 = tg.tensor(x5, device="cuda", requires_grad=True)
    f5 = tg.compile(lambda x: _chain(x, lambda u: u.tanh(), lambda u: u.exp()))
    tgc["G5"] = _tg_fwd_bwd(f5, [c5], [c5])
    tgc["G5 eager"] = _tg_fwd_bwd(lambda x: _chain(x, lambda u: u.tanh(), lambda u: u.exp()), [c5], [c5])
    return tgc


@step("K workloads: latency (gpu_check's clock) / pipelined x20 / host-only, ms")
def _kernels():
    from numba import cuda
    import tracegrad as tg

    class Ev:
        def __init__(self):
            self.e = cuda.event(timing=True)

        def record(self):
            self.e.record()

        def synchronize(self):
            self.e.synchronize()

        def elapsed(self, other):
            return cuda.event_elapsed_time(self.e, other.e)
    for name, run in workloads().items():
        t = time.perf_counter()
        run()
        tg.cuda.synchronize()
        first = time.perf_counter() - t
        run(); run()
        lat = ev_latency(run, None, Ev)
        s, e = Ev(), Ev()
        s.record()
        for _ in range(20):
            run()
        e.record(); e.synchronize()
        pipe = s.elapsed(e) / 20
        tg.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(20):
            run()
        host = (time.perf_counter() - t) / 20 * 1e3
        tg.cuda.synchronize()
        print(f"  tg {name:9s} first call {first:6.2f} s  latency {lat:.4f}  pipelined {pipe:.4f}  host {host:.4f}",
              flush=True)
    try:
        import torch
        tf = torch.nn.functional
        x1 = torch.randn(64 << 20, device="cuda")
        x2 = torch.randn(16384, 4096, device="cuda")
        xr, w, b = x2.clone().requires_grad_(), torch.ones(4096, device="cuda", requires_grad=True), \
            torch.zeros(4096, device="cuda", requires_grad=True)
        x5 = torch.randn(8, device="cuda", requires_grad=True)
        from tracegrad.bench.workloads import _chain

        def g3():
            xr.grad = w.grad = b.grad = None
            (tf.layer_norm(xr, (4096,), w, b, 1e-5) * x2).sum().backward()

        def g5():
            x5.grad = None
            _chain(x5, torch.tanh, torch.exp).backward()
        runs = {"G1": lambda: tf.gelu(x1, approximate="tanh"), "G2": lambda: torch.softmax(x2, 1), "G3": g3,
                "G5": g5}

        class TEv:
            def __init__(self):
                self.e = torch.cuda.Event(enable_timing=True)

            def record(self):
                self.e.record()

            def synchronize(self):
                self.e.synchronize()

            def elapsed(self, other):
                return self.e.elapsed_time(other.e)
        for name, run in runs.items():
            run(); run(); torch.cuda.synchronize()
            lat = ev_latency(run, None, TEv)
            s, e = TEv(), TEv()
            s.record()
            for _ in range(20):
                run()
            e.record(); e.synchronize()
            print(f"  torch {name:6s} latency {lat:.4f}  pipelined {s.elapsed(e) / 20:.4f}", flush=True)
        src = torch.empty(1 << 28, device="cuda")
        dst = torch.empty_like(src)
        s, e = TEv(), TEv()
        dst.copy_(src); s.record()
        for _ in range(10):
            dst.copy_(src)
        e.record(); e.synchronize()
        print(f"  torch D2D copy of 1 GiB: {2 * src.nbytes * 10 / (s.elapsed(e) / 1e3) / 1e9:.0f} GB/s (read+write)")
    except ImportError as e:
        print("  torch:", e)


@step("P G4 MLP step 4096-4096-4096-1024 batch 4096 (ms, pipelined x5) and one SGEMM")
def _g4():
    from numba import cuda
    import tracegrad as tg
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import gpu_check as gc
    inp = gc.inputs("G4", ((4096, 4096, 4096, 1024), 4096), 4)
    for label, setup, clock in (("tg compiled", lambda: gc.tg_column("G4", inp, True), gc.tg_clock),
                                ("torch eager", lambda: gc.torch_column("G4", inp, False), None)):
        try:
            run = setup()
            t = time.perf_counter()
            run()
            first = time.perf_counter() - t
            run()
            if clock is None:
                import torch
                torch.cuda.synchronize()
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record(); [run() for _ in range(5)]; e.record(); e.synchronize()
                ms = s.elapsed_time(e) / 5
            else:
                ms = clock(lambda: [run() for _ in range(5)]) / 5
            print(f"  {label}: first call {first:.1f} s, {ms:.2f} ms/step = {gc.flops(inp) / ms / 1e9:.1f} TFLOP/s", flush=True)
        except Exception as ex:
            print(f"  {label}: {type(ex).__name__}: {ex}")
    a = tg.tensor(np.ones((4096, 4096), np.float32), device="cuda")
    (a @ a)
    ms = gc.tg_clock(lambda: [a @ a for _ in range(5)]) / 5
    print(f"  tg eager matmul 4096^3 fp32: {ms:.3f} ms = {2 * 4096 ** 3 / ms / 1e9:.1f} TFLOP/s")


@step("C torch.compile G2 and G3 (the goals' peers; cold compile time shown)")
def _tc():
    import torch
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import gpu_check as gc
    for wid in ("G2", "G3"):
        inp = gc.inputs(wid, (16384, 4096), int(wid[1]))
        t = time.perf_counter()
        run = gc.torch_column(wid, inp, True)
        run()
        torch.cuda.synchronize()
        first = time.perf_counter() - t
        run()
        lat = statistics.median(gc.torch_clock(run) for _ in range(10))
        pipe = gc.torch_clock(lambda: [run() for _ in range(20)]) / 20
        print(f"  torch.compile {wid}: cold compile+first call {first:.1f} s, latency {lat:.4f} ms, pipelined {pipe:.4f} ms",
              flush=True)


if __name__ == "__main__":
    print(f"\ntotal {time.perf_counter() - T0:.0f} s" + (f"; FAILED steps: {', '.join(FAILED)}" if FAILED else
                                                        "; every step run passed"))
    sys.exit(1 if FAILED else 0)
