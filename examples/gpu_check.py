"""The GPU check: correctness on real sizes, the device's copy bandwidth, then the GPU workloads G1-G5
of tracegrad (eager and compiled) beside torch eager, torch.compile and jax.jit, in one table.

On a machine with an NVIDIA GPU and numba-cuda (`pip install -e '.[gpu]'`, or a python that has numba,
numba-cuda and nvidia-cublas; torch, jax, CuPy optional), from this checkout (installed or not):

    python examples/gpu_check.py                  # real sizes, under 8 minutes
    python examples/gpu_check.py --only G2,G4     # some workloads
    NUMBA_ENABLE_CUDASIM=1 python examples/gpu_check.py --quick    # tiny sizes, numba's simulator

Times are medians of CUDA-event timings after warm-up (jax: wall clock to block_until_ready; the
simulator: wall clock, meaningless as speed), two per cell: the latency of one call ("ms": the host's
time before the kernels start counts too) and the pipelined time ("pipe ms": 20 calls back to back
between the events, / 20: about the GPU's time per call). Rates and the goals are read from the
pipelined time. GB/s = bytes the workload must move / time; "xcopy" is
that rate over the measured device-to-device copy bandwidth. Every section has a time budget; a
column that fails, is missing or runs out of time says why and the rest goes on. A hard limit
(--hard-limit, 465 s from the start) stops a run that hangs (a kernel or driver call that never
returns): a thread of its own then prints the table of what was measured and ends the process with
exit status 3. Exit status 1 when a correctness check fails.
"""
import argparse
import os
import signal
import statistics
import sys
import threading
import time

import numpy as np

STARTED = time.perf_counter()
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")   # jax beside torch and numba
os.environ.setdefault("NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS", "0")     # G5's 8 elements: a warning per launch
SIM = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"
if SIM:     # the simulator's block manager polls its threads (one per GPU thread) holding the GIL: hand it over sooner
    sys.setswitchinterval(2e-4)
sys.path.insert(1, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # this checkout's tracegrad

import tracegrad as tg  # noqa: E402
import tracegrad.nn.functional as F  # noqa: E402
from gpu_peers import LR, fwd_bwd, jax_clock, jax_column, mlp_logits, params, torch_clock, torch_column  # noqa: E402
from tracegrad.bench.workloads import _chain, _gelu, _layernorm_loss, _softmax, w3_numpy, w5_numpy  # noqa: E402
from tracegrad.bench.workloads import _tg_train_step as mlp_step_tg  # noqa: E402

FULL = {"G1": 64 << 20, "G2": (16384, 4096), "G3": (16384, 4096), "G4": ((4096, 4096, 4096, 1024), 4096),
        "G5": 8, "copy": 1 << 30, "check": {"n": 1 << 22, "rows": (4096, 1000), "mlp": ((784, 256, 256, 10), 256),
                  "scan": (64, 100003)}}
QUICK = {"G1": 64, "G2": (4, 16), "G3": (4, 16), "G4": ((8, 8, 4), 4), "G5": 8, "copy": 1 << 12,
         "check": {"n": 96, "rows": (3, 20), "mlp": ((6, 5, 3), 4), "scan": (2, 20)}}
BUDGET = {"check": 75, "copy": 10, "G1": 50, "G2": 50, "G3": 70, "G4": 75, "G5": 40}   # seconds, 370 in all
TOTAL = 420          # seconds for the whole run: later workloads are skipped past it (8 minutes with start-up)
HARD_LIMIT = 465     # seconds from the start: a run still going then is stopped, its table printed
COLUMNS = ("tg eager", "tg compiled", "torch eager", "torch.compile", "jax.jit")


class TimeUp(BaseException):
    """A section or column ran past its budget (BaseException: no library's `except Exception` eats it)."""


class Limit:
    """`with Limit(seconds):` raises TimeUp in the main thread when the time is spent."""

    def __init__(self, seconds):
        self.seconds = max(0.01, seconds)

    def __enter__(self):
        def fire(*_):
            raise TimeUp(f"time budget of {self.seconds:.0f} s spent")
        self.old = signal.signal(signal.SIGALRM, fire)
        signal.setitimer(signal.ITIMER_REAL, self.seconds)

    def __exit__(self, *exc):
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, self.old)


class Watchdog:
    """Past `seconds` from the start, print the report of what was measured (`report()`) from a thread
    of its own and end the process with status 3: the main thread cannot be interrupted inside a
    driver call or a kernel that never returns, and the run must still print its table.
    `current` is the (workload, column) being measured: its cell says it was stopped."""

    def __init__(self, seconds, report):
        self.report, self.current, self.lock = report, None, threading.Lock()
        self.timer = threading.Timer(max(0.0, seconds - (time.perf_counter() - STARTED)), self.fire)
        self.timer.daemon = True
        self.timer.start()

    def fire(self):
        with self.lock:
            print(f"\n== HARD TIME LIMIT: the run was stopped after {time.perf_counter() - STARTED:.0f} s "
                  f"(still running: {self.current or 'no measurement'}); what was measured:", flush=True)
            try:
                self.report(self.current)
            finally:
                sys.stdout.flush()
                os._exit(3)

    def cancel(self):
        """Called when the run's own report starts: it prints the table itself."""
        self.timer.cancel()
        self.lock.acquire()


# ------------------------------------------------------------------ clocks and framework glue
def cuda_sync():
    from numba import cuda
    cuda.synchronize()


def tg_clock(run):
    """ms of one call of run(): CUDA events around it on the default stream (wall clock on the simulator)."""
    from numba import cuda
    if SIM:
        cuda_sync()
        t0 = time.perf_counter()
        run()
        cuda_sync()
        return (time.perf_counter() - t0) * 1e3
    start, end = cuda.event(timing=True), cuda.event(timing=True)
    start.record()
    run()
    end.record()
    end.synchronize()
    return cuda.event_elapsed_time(start, end)


def host(x):
    """A NumPy float64 copy of a result of any framework (tracegrad, torch, jax; None stays None)."""
    if x is None:
        return None
    if isinstance(x, tg.Tensor):
        return x.detach().cpu().numpy().astype(np.float64)
    if hasattr(x, "detach"):
        return x.detach().cpu().double().numpy()
    return np.asarray(x, dtype=np.float64)


def worst(got, want):
    """Largest error relative to the reference's scale, over a list of results."""
    err = 0.0
    for g, w in zip(got, want):
        g, w = host(g), np.asarray(w, np.float64)
        if g is None or g.shape != w.shape:
            return float("inf")
        err = max(err, float(np.max(np.abs(g - w), initial=0.0)) / max(1e-30, float(np.max(np.abs(w), initial=0.0))))
    return err


# ------------------------------------------------------------------ the workloads' inputs and references
def inputs(wid, size, seed):
    r = np.random.default_rng(seed)
    if wid == "G3":
        return {"x": r.standard_normal(size, np.float32),
                "w": (1 + 0.1 * r.standard_normal(size[1])).astype(np.float32),
                "b": (0.1 * r.standard_normal(size[1])).astype(np.float32), "g": r.standard_normal(size, np.float32)}
    if wid == "G4":
        sizes, batch = size
        inp = {"x": r.standard_normal((batch, sizes[0]), np.float32), "y": r.integers(0, sizes[-1], batch)}
        for i, (fi, fo) in enumerate(zip(sizes[:-1], sizes[1:])):
            bound = 1.0 / np.sqrt(fi)                    # PyTorch's nn.Linear init
            inp[f"W{i}"] = r.uniform(-bound, bound, (fo, fi)).astype(np.float32)
            inp[f"b{i}"] = r.uniform(-bound, bound, fo).astype(np.float32)
        return inp
    return {"x": r.standard_normal(size, np.float32)}         # G1, G2, G5



def mlp_loss_np(inp):
    """The MLP's cross-entropy at its initial parameters (float32 NumPy forward: G4 at real sizes)."""
    h = mlp_logits(inp["x"], [inp[k] for k in params(inp)], lambda a: np.maximum(a, 0)).astype(np.float64)
    z = h - h.max(axis=1, keepdims=True)
    return -(z[np.arange(len(z)), inp["y"]] - np.log(np.exp(z).sum(axis=1))).mean()


def reference(wid, inp):
    """What the first call of each column must give (float64 NumPy)."""
    x = inp["x"].astype(np.float64)
    if wid == "G1":
        return [_gelu(x, np.tanh)]
    if wid == "G2":
        e = np.exp(x - x.max(axis=1, keepdims=True))
        return [e / e.sum(axis=1, keepdims=True)]
    if wid == "G3":
        return w3_numpy({k: v.astype(np.float64) for k, v in inp.items()})()
    if wid == "G4":
        return [mlp_loss_np(inp)]
    return w5_numpy({"x": x})()


def moved(wid, inp):
    """Bytes a workload must move at the least (None where it is compute- or overhead-bound)."""
    x = inp["x"].nbytes
    return {"G1": 2 * x, "G2": 2 * x, "G3": 3 * x}.get(wid)     # G3: read x and g, write dx


def flops(inp):
    """Matrix-product flops of one G4 training step (forward, and both products of the backward)."""
    return sum(3 * 2 * len(inp["x"]) * inp[k].size for k in params(inp) if k[0] == "W")


# ------------------------------------------------------------------ the columns
def tg_column(wid, inp, compiled):
    wrap = tg.compile if compiled else (lambda f: f)
    ts = {k: tg.tensor(v, device="cuda", requires_grad=k in ("x", "w", "b") and wid in ("G3", "G5"))
          for k, v in inp.items()}
    if wid == "G1":
        f = wrap(lambda x: _gelu(x, lambda t: t.tanh()))
        return lambda: [f(ts["x"])]
    if wid == "G2":
        f = wrap(_softmax)
        return lambda: [f(ts["x"])]
    if wid == "G3":
        f = wrap(lambda x, w, b, g: _layernorm_loss(x, w, b, g, lambda t: t.sqrt()))
        return fwd_bwd(f, [ts[k] for k in "xwbg"], [ts[k] for k in "xwb"])
    if wid == "G4":
        model = mlp_tg(inp, "cuda")
        opt = tg.optim.SGD(model.parameters(), lr=LR)
        step = wrap(mlp_step_tg)                     # compiled: forward, backward and update in one call
        return lambda: [step(model, opt, ts["x"], ts["y"])]
    f = wrap(lambda x: _chain(x, lambda t: t.tanh(), lambda t: t.exp()))
    return fwd_bwd(f, [ts["x"]], [ts["x"]])


def mlp_tg(inp, dev):
    """nn.Sequential of Linear layers with ReLU between, holding the parameters of `inp`, on `dev`."""
    layers = []
    for k in params(inp)[::2]:
        lin = tg.nn.Linear(*inp[k].shape[::-1])
        lin.load_state_dict({"weight": tg.tensor(inp[k]), "bias": tg.tensor(inp["b" + k[1:]])})
        layers += [lin, tg.nn.ReLU()]
    return tg.nn.Sequential(*layers[:-1]).to(dev)


SETUPS = {"tg eager": (tg_column, False, tg_clock), "tg compiled": (tg_column, True, tg_clock),
          "torch eager": (torch_column, False, torch_clock), "torch.compile": (torch_column, True, torch_clock),
          "jax.jit": (jax_column, True, jax_clock)}
ORDER = {w: ("tg compiled", "torch eager", "tg eager", "jax.jit", "torch.compile") for w in ("G1", "G2", "G4", "G5")}
ORDER["G3"] = ("tg compiled", "torch.compile", "torch eager", "jax.jit", "tg eager")   # the goals' columns first
TOL = {"G1": 1e-5, "G2": 1e-5, "G3": 1e-4, "G4": 1e-3, "G5": 1e-5}
NAMES = {"G1": "gelu fwd", "G2": "row softmax", "G3": "layernorm fwd+bwd", "G4": "MLP train step SGD",
         "G5": "W5 20 ops fwd+bwd"}


# ------------------------------------------------------------------ measuring
class Cell:
    """A table cell: the median latency and pipelined ms, or the note saying why there are none."""

    def __init__(self, ms=None, note=None, pipe=None):
        self.ms, self.note, self.pipe = ms, note, pipe


PIPELINE = 2 if SIM else 20     # calls back to back for the pipelined time


def measure(wid, inp, want, column, reps, seconds):
    """Cell of one column: set up, check the first call against `want`, then time warm calls."""
    setup, compiled, clock = SETUPS[column]
    try:
        with Limit(seconds):
            run = setup(wid, inp, compiled)
            first = run()                               # traces / compiles
            err = worst(first, want)
            if not err <= TOL[wid]:
                return Cell(note=f"WRONG: relative error {err:.2e} > {TOL[wid]:.0e}")
            if reps >= 5:
                run()                                   # one more warm-up call
            times, t_end = [], time.perf_counter() + seconds / 4
            while len(times) < reps and (len(times) < min(3, reps) or time.perf_counter() < t_end):
                times.append(clock(run))
            pipes = [clock(lambda: [run() for _ in range(PIPELINE)]) / PIPELINE for _ in range(min(3, reps))]
            return Cell(statistics.median(times), pipe=statistics.median(pipes))
    except TimeUp as e:
        return Cell(note=f"skipped: {e}")
    except ImportError as e:
        return Cell(note=f"not importable ({e})")
    except Exception as e:
        return Cell(note=f"failed: {type(e).__name__}: {str(e).splitlines()[0][:150] if str(e) else ''}")


def copy_bandwidth(n_bytes, reps=20):
    """GB/s of a device-to-device copy (cuMemcpyDtoD through numba.cuda, CUDA events): 2 bytes moved
    per byte copied."""
    from numba import cuda
    src = cuda.to_device(np.ones(n_bytes // 4, np.float32))
    dst = cuda.device_array_like(src)
    dst.copy_to_device(src)
    times = [tg_clock(lambda: dst.copy_to_device(src)) for _ in range(reps)]
    ok = bool(np.array_equal(dst.copy_to_host()[:1000], np.ones(min(1000, n_bytes // 4), np.float32)))
    return 2 * n_bytes / (statistics.median(times) / 1e3) / 1e9, ok


# ------------------------------------------------------------------ correctness on real sizes
def correctness(sizes, deadline, out=None):
    """[(name, error, tolerance)]: compiled cuda (and eager cuda) against float64 NumPy or the cpu,
    appended to `out` as they finish (error None: not run, past `deadline`)."""
    r = np.random.default_rng(0)
    n, rows = sizes["n"], sizes["rows"]
    x = r.standard_normal(n, np.float32)
    xr = r.standard_normal(rows, np.float32)
    cx, cxr = tg.tensor(x, device="cuda"), tg.tensor(xr, device="cuda")
    out = [] if out is None else out

    def check(name, tol, fn):
        if time.perf_counter() > deadline:
            out.append((name, None, tol))
            return
        try:
            out.append((name, fn(), tol))
        except TimeUp:
            raise
        except Exception as e:
            out.append((name, f"{type(e).__name__}: {e}", tol))

    gelu = tg.compile(lambda t: _gelu(t, lambda u: u.tanh()))
    check("gelu compiled cuda vs NumPy", 1e-5, lambda: worst([gelu(cx)], [_gelu(x.astype(np.float64), np.tanh)]))
    check("gelu eager cuda vs NumPy", 1e-5, lambda: worst([_gelu(cx, lambda u: u.tanh())],
                                                          [_gelu(x.astype(np.float64), np.tanh)]))
    check("sum of squares compiled cuda vs NumPy", 1e-5,
          lambda: worst([tg.compile(lambda t: (t * t).sum())(cx)], [np.sum(x.astype(np.float64) ** 2)]))
    ref = reference("G2", {"x": xr})
    check("softmax compiled cuda vs NumPy", 1e-5, lambda: worst([tg.compile(_softmax)(cxr)], ref))
    check("softmax over a transposed view, compiled cuda", 1e-5,
          lambda: worst([tg.compile(lambda t: F.softmax(t.T, 1))(cxr.T.contiguous())], ref))
    ln = inputs("G3", rows, 3)
    for compiled in (True, False):
        check(f"layernorm fwd+bwd {'compiled' if compiled else 'eager'} cuda vs NumPy (loss, dx, dw, db)", 1e-4,
              lambda: worst(tg_column("G3", ln, compiled)(), reference("G3", ln)))
    check("W5 chain fwd+bwd compiled cuda vs NumPy", 1e-5,
          lambda: worst(tg_column("G5", inputs("G5", 8, 5), True)(), reference("G5", inputs("G5", 8, 5))))
    a, b = r.standard_normal((rows[0], 256), np.float32), r.standard_normal((256, rows[1]), np.float32)
    check("matmul cuda vs NumPy (float64)", 1e-5, lambda: worst(
        [tg.tensor(a, device="cuda") @ tg.tensor(b, device="cuda")], [a.astype(np.float64) @ b]))
    check("MLP 2 SGD steps, compiled cuda vs compiled cpu (losses, params)", 1e-4,
          lambda: mlp_cpu_vs_cuda(sizes["mlp"]))
    check("cumsum, its gradient (reverse cumsum), prod and its gradient over long rows, eager cuda vs NumPy", 1e-3,
          lambda: long_scans(sizes["scan"], r))
    return out


def long_scans(shape, r):
    """Errors of the scans over rows of `shape` (block scans past 1024 elements a row) against NumPy."""
    x = (1 + 1e-4 * r.standard_normal(shape)).astype(np.float32)          # products stay near 1
    w = r.standard_normal(shape).astype(np.float32)
    a, b = (tg.tensor(x, device="cuda", requires_grad=True) for _ in range(2))
    c, p = a.cumsum(1), b.prod(1)
    (c * tg.tensor(w, device="cuda")).sum().backward()
    p.sum().backward()
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    want = [np.cumsum(x64, 1), np.cumsum(w64[:, ::-1], 1)[:, ::-1], np.prod(x64, 1),
            np.prod(x64, 1, keepdims=True) / x64]
    return worst([c, a.grad, p, b.grad], want)


def mlp_cpu_vs_cuda(size, steps=2):
    inp = inputs("G4", size, 4)
    got = {}
    for dev in ("cpu", "cuda"):
        model = mlp_tg(inp, dev)
        opt = tg.optim.SGD(model.parameters(), lr=0.1)
        step = tg.compile(mlp_step_tg)
        x, y = tg.tensor(inp["x"], device=dev), tg.tensor(inp["y"], device=dev)
        losses = [step(model, opt, x, y) for _ in range(steps)]
        got[dev] = losses + list(model.parameters())
    return worst(got["cuda"], [host(v) for v in got["cpu"]])


# ------------------------------------------------------------------ the report
def rates(wid, inp, copy_gbs):
    """[(metric, cell's time -> ms, fn(ms) -> text)] of a workload's table lines: the latency, the
    pipelined time and the rates of the pipelined time (the times alone without inputs)."""
    out = [("ms", lambda c: c.ms, lambda ms: f"{ms:.4f}"), ("pipe ms", lambda c: c.pipe, lambda ms: f"{ms:.4f}")]
    if inp is None:
        return out
    nbytes = moved(wid, inp)
    if nbytes:
        out.append(("GB/s", lambda c: c.pipe, lambda ms: f"{nbytes / ms / 1e6:.1f}"))
        if copy_gbs:
            out.append(("xcopy", lambda c: c.pipe, lambda ms: f"{nbytes / ms / 1e6 / copy_gbs:.3f}"))
    if wid == "G4":
        out.append(("TFLOP/s", lambda c: c.pipe, lambda ms: f"{flops(inp) / ms / 1e9:.2f}"))
    return out


def table(results, copy_gbs):
    """The table's lines, and the notes of the cells without a time (grouped by note)."""
    lines, notes = [f"{'workload':34s}{'':8s}" + "".join(f"{c:>15s}" for c in COLUMNS)], {}
    for wid, (inp, cells) in results.items():
        label = f"{wid} {NAMES[wid]} " + ("" if inp is None else f"{inp['x'].shape}" if wid != "G4" else
                                          f"batch {len(inp['x'])}")
        for k, (metric, time_of, fmt) in enumerate(rates(wid, inp, copy_gbs)):
            texts = [fmt(time_of(c)) if time_of(c) is not None else "n/a"
                     for c in (cells.get(col, Cell()) for col in COLUMNS)]
            lines.append(f"{label if k == 0 else '':34s}{metric:8s}" + "".join(f"{t:>15s}" for t in texts))
        for col, c in cells.items():
            if c.note:
                notes.setdefault(f"{col}: {c.note}", []).append(wid)
    return lines, [f"  {text} ({', '.join(wids)})" for text, wids in notes.items()]


GOALS = [("G1", "tg compiled >= 85 % of the copy bandwidth", None, 0.85),
         ("G2", "tg compiled >= 75 % of the copy bandwidth", None, 0.75),
         ("G2", "tg compiled faster than torch's built-in softmax", "torch eager", 1.0),
         ("G3", "tg compiled faster than torch.compile", "torch.compile", 1.0),
         ("G4", "tg compiled within 1.15x of torch eager", "torch eager", 1.15),
         ("G5", "tg compiled per call <= 1/4 of torch eager's", "torch eager", 0.25)]


def goals(results, copy_gbs):
    """[(goal, met: True/False/None when not measured, figure)]: share of the copy bandwidth, or the
    time ratio tracegrad compiled / peer, from the pipelined times."""
    out = []
    for wid, text, peer, bound in GOALS:
        if wid not in results:
            continue
        inp, cells = results[wid]
        ms, other = cells.get("tg compiled", Cell()).pipe, cells.get(peer, Cell()).pipe if peer else None
        if peer is None:
            value = None if ms is None or not copy_gbs or inp is None else moved(wid, inp) / ms / 1e6 / copy_gbs
            out.append((f"{wid} {text}", None if value is None else value >= bound, value))
        else:
            value = None if ms is None or other is None else ms / other
            out.append((f"{wid} {text} (time ratio)", None if value is None else
                        value < 1.0 if bound == 1.0 else value <= bound, value))
    return out


def environment():
    lines = [f"tracegrad {getattr(tg, '__version__', '?')} ({os.path.dirname(tg.__file__)}), numpy {np.__version__}, "
             f"python {sys.version.split()[0]}"]
    import numba
    try:
        device = tg.cuda.get_device_name()
    except Exception as e:
        device = f"unknown ({type(e).__name__}: {e})"
    lines.append(f"numba {numba.__version__}, device {device}" +
                 (" (NUMBA_ENABLE_CUDASIM=1: timings meaningless)" if SIM else ""))
    for mod in ("numba_cuda", "torch", "jax", "cupy"):
        try:
            m = __import__(mod)
            lines.append(f"{mod} {getattr(m, '__version__', '?')}")
        except Exception as e:
            lines.append(f"{mod}: not importable ({type(e).__name__}: {e})")
    lines.append(cublas_line())
    lines.append("TF32 off everywhere (G4): torch allow_tf32=False + matmul precision 'highest'; jax "
                 "default_matmul_precision 'highest'; tracegrad: " + tf32_note())
    return lines


def cublas_line():
    """Which libcublas the products use; an ERROR line on a GPU where none loaded (the slow fallback)."""
    info = tg.cuda.backend_info()
    path, missing = info["cublas"], info["cublas_missing"]
    if path:
        return f"cuBLAS: {path}"
    return ("cuBLAS: none: " if SIM else "ERROR: ") + (missing or "")


def tf32_note():
    mm = getattr(getattr(getattr(tg, "backends", None), "cuda", None), "matmul", None)
    if mm is not None and hasattr(mm, "allow_tf32"):
        mm.allow_tf32 = False
        return "tg.backends.cuda.matmul.allow_tf32=False"
    return "float32 products (cuBLAS default math mode, or the tiled kernel)"


def why_no_cuda():
    """What numba.cuda says when it finds no GPU."""
    try:
        from numba import cuda
        cuda.current_context()
    except Exception as e:
        return f"{type(e).__name__}: {str(e)[:300]}"
    return "numba.cuda.is_available() is False"


def check_section(sizes, seconds):
    """Run and print the correctness checks; the number that failed."""
    print(f"\n== correctness (budget {seconds:.0f} s)", flush=True)
    checks = []
    try:
        with Limit(seconds + 5):
            correctness(sizes, time.perf_counter() + seconds, checks)
    except TimeUp:                # a check ran past the section's budget: the rest are not run
        checks.append(("the check running when the section's budget ran out, and those after it", None, 0))
    except Exception as e:        # the section's own set-up (uploads, ...): reported, the run goes on
        checks.append(("correctness section", f"{type(e).__name__}: {e}", 0))
    failed = skipped = 0
    for name, err, tol in checks:
        verdict = ("skipped: time budget" if err is None else f"FAILED ({err})" if isinstance(err, str)
                   else "ok" if err <= tol else "FAILED")
        failed += verdict.startswith("FAILED")
        skipped += err is None
        print(f"  {name}: {verdict}" + (f"  rel err {err:.2e} (tol {tol:.0e})" if isinstance(err, float) else ""))
    print(f"correctness: {len(checks) - failed - skipped}/{len(checks)} ok" +
          (f", {skipped} skipped (time budget)" if skipped else ""), flush=True)
    return failed


def workload_section(wid, size, reps, seconds, results, watchdog=None):
    """Measure one workload's columns in ORDER within `seconds` into results[wid] = (inputs,
    {column: Cell}); inputs None (and every cell saying why) when its inputs or reference fail."""
    end = time.perf_counter() + seconds
    print(f"== {wid} {NAMES[wid]}", end="", flush=True)
    cells = {}
    try:
        with Limit(seconds):
            inp = inputs(wid, size, int(wid[1]))
            want = reference(wid, inp)
    except (TimeUp, Exception) as e:
        results[wid] = (None, {col: Cell(note=f"not run: inputs or reference failed ({type(e).__name__}: "
                                              f"{str(e)[:120]})") for col in COLUMNS})
        print(f"  inputs or reference failed: {type(e).__name__}: {e}", flush=True)
        return
    results[wid] = (inp, cells)
    for k, col in enumerate(ORDER[wid]):
        left = end - time.perf_counter()
        share = left if k == len(ORDER[wid]) - 1 else max(0.6 * left, min(left, 20))  # leave the rest some time
        if watchdog is not None:
            watchdog.current = (wid, col)
        cell = measure(wid, inp, want, col, reps, share) if left > 1 else Cell(note="skipped: section budget spent")
        cells[col] = cell
        print(f"  {col} {'%.4f ms' % cell.pipe if cell.pipe is not None else '-'}", end="", flush=True)
    if watchdog is not None:
        watchdog.current = None
    print(flush=True)


def report(results, copy_gbs):
    lines, notes = table(results, copy_gbs)
    clock = "(simulator: wall clock)" if SIM else "of CUDA events after warm-up (jax.jit: wall clock to block_until_ready)"
    print(f"\nGPU workloads, float32: median ms {clock}" + (f"; xcopy = GB/s / {copy_gbs:.1f} GB/s copy" if copy_gbs else ""))
    print("\n".join(lines))
    if not SIM and not tg.cuda.backend_info()["cublas"]:
        print(cublas_line())
    print("torch eager uses torch's built-ins where they exist (F.gelu tanh, torch.softmax, F.layer_norm); "
          "the compilers get the same formulas as tracegrad")
    if notes:
        print("notes:\n" + "\n".join(notes))
    print("goals:")
    for text, met, value in goals(results, copy_gbs):
        state = "not measured" if met is None else "MET" if met else "NOT MET"
        print(f"  {text}: {state}" + ("" if value is None else f" ({value:.3f})"))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="tiny sizes (the simulator, CI)")
    ap.add_argument("--only", default="G1,G2,G3,G4,G5", help="workloads, e.g. G2,G4")
    ap.add_argument("--reps", type=int, default=30, help="timed calls per column (at most)")
    ap.add_argument("--scale", type=float, default=1.0, help="multiply every section's time budget")
    ap.add_argument("--hard-limit", type=float, default=HARD_LIMIT,
                    help="seconds from the start after which a run still going is stopped and its table printed")
    args = ap.parse_args(argv)
    wanted = [w.strip().upper() for w in args.only.split(",") if w.strip()]
    if any(w not in NAMES for w in wanted):
        ap.error(f"--only: unknown workload in {args.only!r}; choose from {', '.join(NAMES)}")
    if not tg.cuda.is_available():
        print(f"no CUDA device ({why_no_cuda()}): install the gpu extra on a GPU machine, or set "
              "NUMBA_ENABLE_CUDASIM=1", file=sys.stderr)
        return 2
    sizes, t_start = (QUICK if args.quick else FULL), time.perf_counter()
    budget = {k: v * args.scale for k, v in BUDGET.items()}
    results, state = {}, {"copy": None}

    def stopped(current):
        if current is not None and current[0] in results:
            results[current[0]][1][current[1]] = Cell(note="stopped: the hard time limit (hung or too slow)")
        report(results, state["copy"])
    watchdog = Watchdog(args.hard_limit, stopped)
    print("\n".join(environment()), flush=True)
    failed = check_section(sizes["check"], budget["check"])
    copy_gbs = None
    try:
        with Limit(budget["copy"]):
            copy_gbs, ok = copy_bandwidth(sizes["copy"])
        print(f"\n== copy bandwidth: {copy_gbs:.1f} GB/s (device-to-device copy of {sizes['copy'] / 2**20:g} MiB, "
              f"CUDA events, median of 20){'' if ok else ' COPY WRONG'}", flush=True)
    except (TimeUp, Exception) as e:
        print(f"\n== copy bandwidth: not measured ({type(e).__name__}: {e})", flush=True)
    state["copy"] = copy_gbs
    for wid in wanted:
        left = TOTAL * args.scale - (time.perf_counter() - t_start)
        if left < 5:
            print(f"== {wid}: skipped, the whole run's budget ({TOTAL * args.scale:.0f} s) is spent")
            continue
        workload_section(wid, sizes[wid], args.reps, min(budget[wid], left), results, watchdog)
    watchdog.cancel()
    report(results, copy_gbs)
    print(f"total {time.perf_counter() - t_start:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
