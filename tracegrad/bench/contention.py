"""Compiled workloads under CPU load: TRACEGRAD_THREADS=1 against the default thread count, each in
its own warm process, taking turns (--slice seconds each, --rounds rounds) so that both see the
same background load, with one busy process (`python -c "while 1: pass"`) per core beside them.
Prints the medians and the median of the per-round ratios default/1 (issue 8, item 11: at most
1.10) and how many split kernels chose the workers. `--no-busy` leaves the busy processes out;
`--ab PATH_A,PATH_B` compares two checkouts (PYTHONPATH), both with the default thread count.

    python -m tracegrad.bench.contention [--rounds 20] [--slice 0.2] [--no-busy] W1 W3 W6
"""
import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import time


def child(wid):
    """Serve turns: read a duration per line, run the step that long, print the median step time."""
    from tracegrad.bench import workloads
    from tracegrad.backends.cpu.judge import Judge
    w = workloads.find(wid)
    run = w.columns["tg compiled"](w.inputs())
    for _ in range(3):
        run()
    print("ready", flush=True)
    for line in sys.stdin:
        times, end = [], time.perf_counter() + float(line)
        while time.perf_counter() < end or len(times) < 3:
            t0 = time.perf_counter()
            run()
            times.append(time.perf_counter() - t0)
        judges = [o for o in gc.get_objects() if type(o) is Judge]
        print(json.dumps({"median": statistics.median(times), "split": len(judges),
                          "parallel": sum(j.best for j in judges)}), flush=True)


def _spawn(wid, threads=None, path=None):
    env = dict(os.environ)
    env.pop("TRACEGRAD_THREADS", None)
    if threads:
        env["TRACEGRAD_THREADS"] = threads
    if path:
        env["PYTHONPATH"] = path
    p = subprocess.Popen([sys.executable, "-m", "tracegrad.bench.contention", "--child", wid], env=env,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "ready"
    return p


def _turn(p, seconds):
    p.stdin.write(f"{seconds}\n")
    p.stdin.flush()
    return json.loads(p.stdout.readline())


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("workloads", nargs="+")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--slice", type=float, default=0.2)
    ap.add_argument("--no-busy", action="store_true")
    ap.add_argument("--ab", help="PATH_A,PATH_B: two checkouts instead of two thread counts")
    args = ap.parse_args(argv)
    hogs = [] if args.no_busy else [subprocess.Popen([sys.executable, "-c", "while 1: pass"])
                                    for _ in range(os.cpu_count() or 1)]
    names = args.ab.split(",") if args.ab else ["threads=1", f"default ({os.cpu_count()})"]
    try:
        for wid in args.workloads:
            a, b = ((_spawn(wid, path=p) for p in names) if args.ab else (_spawn(wid, "1"), _spawn(wid)))
            ta, tb = [], []
            for _ in range(args.rounds):
                ta.append(_turn(a, args.slice)["median"])
                last = _turn(b, args.slice)
                tb.append(last["median"])
            for p in (a, b):
                p.stdin.close()
                p.wait()
            ratios = [y / x for x, y in zip(ta, tb)]
            q = statistics.quantiles(ratios, n=4)
            print(f"{wid}: {names[0]} {statistics.median(ta) * 1e3:.3f} ms, {names[1]} {statistics.median(tb) * 1e3:.3f} "
                  f"ms; median of per-round ratios {statistics.median(ratios):.2f} (quartiles {q[0]:.2f}-{q[2]:.2f}); "
                  f"split kernels on the workers: {last['parallel']} of {last['split']}", flush=True)
    finally:
        for h in hogs:
            h.kill()


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        child(sys.argv[2])
    else:
        main()
