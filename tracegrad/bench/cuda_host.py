"""`python -m tracegrad.bench.cuda_host [N]`: the host time of a compiled cuda call, without a GPU.

Under numba's CUDA simulator (set here), with every kernel launch replaced by a no-op, the G5 tiny
graph (W5's 20 elementwise ops on 8 elements, gpu_check's G5) is timed as a training step
(x.grad = None; f(x).backward(): two compiled calls, forward and backward), as a forward call
alone, and without grad; the same on the cpu beside it. What a no-op launch itself costs (the
simulator's call, not tracegrad's) is measured too and subtracted, per launch. Each figure: thread
CPU time (other processes on a shared machine count less than in wall time), N calls (default
5000), median of 5 interleaved rounds, in us per call.

What it leaves out: numba-cuda's own launch cost on a GPU, and the device arrays a GPU allocation
builds instead of the simulator's (examples/gpu_first.py measures both on a GPU). To compare two
checkouts, run this file as a script with PYTHONPATH set to each in turn: it imports tracegrad
absolutely.
"""
import os
import statistics
import sys
import time

os.environ["NUMBA_ENABLE_CUDASIM"] = "1"     # before numba is imported


def _timed(fn, n):
    t0 = time.thread_time_ns()
    for _ in range(n):
        fn()
    return (time.thread_time_ns() - t0) / n / 1e3


def cases():
    """{name: (fn, device, launches per call)}, kernel launches already no-ops."""
    import numpy as np
    from numba.cuda.simulator import kernel as sim

    import tracegrad as tg
    from tracegrad.bench.op_workloads import _chain, w5_inputs

    launches = [0]

    def no_op(self, *args):
        if self._device:                       # a device function called from a kernel: never, here
            raise RuntimeError("cuda_host: a device function ran outside a kernel")
        launches[0] += 1
    sim.FakeCUDAKernel.__call__ = no_op
    out = {}
    for dev in ("cpu", "cuda"):
        x = tg.tensor(w5_inputs()["x"], device=dev, requires_grad=True)
        y = tg.tensor(w5_inputs()["x"], device=dev)
        f = tg.compile(lambda x: _chain(x, lambda t: t.tanh(), lambda t: t.exp()))

        def step(x=x, f=f):
            x.grad = None
            f(x).backward()
        for name, fn in ((f"{dev} step (2 calls)", step), (f"{dev} forward call", lambda f=f, x=x: f(x)),
                         (f"{dev} forward, no grad", lambda f=f, y=y: f(y))):
            for _ in range(20):
                fn()
            launches[0] = 0
            fn()
            out[name] = (fn, launches[0])
    sim_kernel = sim.FakeCUDAKernel(lambda a, b: None, device=False)[1, 32, 0]
    a = np.zeros(8, np.float32)
    out["no-op launch (subtracted)"] = (lambda: sim_kernel(a, a), 0)
    out["empty"] = (lambda: None, 0)
    return out


def main(argv):
    from tracegrad.bench.load import Load
    n = int(argv[0]) if argv else 5000
    table = cases()
    samples = {name: [] for name in table}
    with Load() as load:
        for _ in range(5):
            for name, (fn, _) in table.items():
                samples[name].append(_timed(fn, n))
    med = {name: statistics.median(v) for name, v in samples.items()}
    base = med.pop("empty")
    launch = med["no-op launch (subtracted)"] - base
    print(f"us per call, thread CPU time, median of 5 rounds of {n}; an empty call's {base:.2f} us and "
          f"the simulator's no-op launch ({launch:.2f} us) subtracted per launch; load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores, other processes used "
          f"{'?' if load.others is None else f'{load.others:.0%}'} of the machine")
    for name, v in med.items():
        k = table[name][1]
        print(f"  {name:28s} {v - base - k * launch:8.2f}" + (f"   ({k} launches)" if k else ""))


if __name__ == "__main__":
    main(sys.argv[1:])
