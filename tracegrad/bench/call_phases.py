"""`python -m tracegrad.bench.call_phases [N]`: where the time of a small compiled call goes.

W5's step (x.grad = None; loss = f(x); loss.backward(), x of shape (8,), 20 elementwise ops) and
each phase of it run alone N times (default 100000), timed with this thread's CPU time (other
processes on a shared machine count less than in wall time); medians of 5 interleaved rounds, in
ns per call.
Compare phases within one run: absolute figures move with the machine's load.
"""
import statistics
import sys
import time


def phases():
    import tracegrad as tg
    from ..autograd import run_backward
    from .op_workloads import _chain, w5_inputs

    x = tg.tensor(w5_inputs()["x"], requires_grad=True)
    f = tg.compile(lambda x: _chain(x, lambda t: t.tanh(), lambda t: t.exp()))

    def step():
        x.grad = None
        f(x).backward()
    for _ in range(1000):
        step()
    entry = next(iter(f.cache.values()))
    fwd, bwd = entry.programs
    loss = f(x)
    one = loss._implicit_gradient(False)
    fwd_in, bwd_in = [x._data], [one._data, *loss.grad_fn.saved]
    native = [[s for s in p.plan if s[0] == "call"] for p in (fwd, bwd)]
    node_type, args = type(loss.grad_fn), (x,)

    def forward_backward():       # the step without Tensor.backward's checks and implicit gradient
        x.grad = None
        run_backward([f(x)], [one], False, False)
    return {
        "whole step": step,
        "x.grad = None": lambda: setattr(x, "grad", None),
        "f(x): forward call": lambda: f(x),
        "  signature check (LastCall)": lambda: f._last[0].matches(args),
        "  entry.call": lambda: entry.call(args),
        "    forward Program.run": lambda: fwd.run(fwd_in),
        "      native segments": lambda: [s[1](*s[2]) for s in native[0]],
        "    CompiledNode()": lambda: node_type.of_call(entry, args, fwd_in, [x], [loss]),
        "    Tensor._wrap": lambda: tg.Tensor._wrap(fwd_in[0], x._dtype, x._device),
        "x.grad = None; f(x); engine backward": forward_backward,
        "  implicit gradient (ones)": lambda: loss._implicit_gradient(False),
        "  backward Program.run": lambda: bwd.run(bwd_in),
        "    native segments": lambda: [s[1](*s[2]) for s in native[1]],
    }


def timed(fn, n):
    t0 = time.thread_time_ns()
    for _ in range(n):
        fn()
    return (time.thread_time_ns() - t0) / n


def main(argv):
    n = int(argv[0]) if argv else 100_000
    table = dict(phases(), empty=lambda: None)
    samples = {name: [] for name in table}
    for _ in range(5):                  # interleaved rounds: a change of load hits every phase alike
        for name, fn in table.items():
            samples[name].append(timed(fn, n))
    med = {name: statistics.median(v) for name, v in samples.items()}
    base = med.pop("empty")
    print(f"ns per call (thread CPU time, median of 5 interleaved rounds of {n}; an empty call's {base:.0f} "
          f"ns subtracted)")
    for name, v in med.items():
        print(f"{name:34s} {v - base:8.0f}")


if __name__ == "__main__":
    main(sys.argv[1:])
