"""The command line: `python -m tracegrad bench ...` and `python -m tracegrad dump SCRIPT.py ...`.

    python -m tracegrad bench                    # W1-W8: numpy, tracegrad eager/compiled, peers if installed
    python -m tracegrad bench --quick --workload W5
    python -m tracegrad bench --dynamic          # adds the column tg dynamic=True beside tg compiled
    python -m tracegrad bench --workload R1      # the ragged MLP training sequence, every column cold
    python -m tracegrad bench --eager            # eager op overhead vs NumPy (1M elements, 8 elements)
    python -m tracegrad bench --cpu x86-64-v3    # compiled code built for an AVX2 CPU (TRACEGRAD_CPU)
    python -m tracegrad bench --cpu native --cpu x86-64-v3   # the bench once per build, one after the other
    python -m tracegrad bench --cpu native,x86-64-v3         # one table: a compiled column per build
    python -m tracegrad dump examples/mlp_train.py --quick
    python -m tracegrad broadcast 3,1 4          # how the shapes line up (exit status 1 if they do not)
    python -m tracegrad fuzz --n 500 --seed 1    # random programs: eager vs interpret vs llvm (tracegrad/fuzz)
    python -m tracegrad calibrate                # measure this machine's code-generation thresholds again
    python -m tracegrad fuzz --n 200 --sizes     # each across a sequence of sizes, compiled once (dynamic)
"""
import argparse
import os
import runpy
import sys

DUMP_STAGES = "traced,forward,backward,kernels"


def _bench(args):
    """The bench once per --cpu build (each name checked before any runs), else once as it is;
    `--cpu a,b`: one table with a compiled column per build, each build in a process of its own."""
    from .backends.cpu import host
    builds = [c for spec in args.cpu or [] for c in _builds(spec)]
    if builds and (len(args.cpu) > 1 or args.eager or args.plot):
        print("tracegrad bench --cpu: give several builds as one comma-separated list of CPU names, without "
              "--eager or --plot", file=sys.stderr)
        return 2
    for cpu in builds or args.cpu or []:
        os.environ["TRACEGRAD_CPU"] = cpu
        try:
            host.current()
        except ValueError as e:
            print(f"tracegrad bench --cpu: {e}", file=sys.stderr)
            return 2
    if builds:
        from .bench.builds import main as bench_builds
        os.environ.pop("TRACEGRAD_CPU", None)
        return bench_builds(builds, workload=args.workload, quick=args.quick, repeats=args.repeats)
    rc = 0
    for k, cpu in enumerate(args.cpu or [None]):
        if cpu is not None:
            os.environ["TRACEGRAD_CPU"] = cpu
            print(("\n" if k else "") + f"== build {cpu}", flush=True)
        rc = max(rc, _bench_once(args))
    return rc


def _builds(spec):
    """The builds of a --cpu value that lists CPU names (native,x86-64-v3); [] for one build (a name,
    or a name and feature changes such as skylake,-avx512f)."""
    items = [s.strip() for s in spec.split(",") if s.strip()]
    return items if len(items) > 1 and not any(s[0] in "+-" for s in items) else []


def _bench_once(args):
    if args.eager:
        from .bench import eager_overhead
        return eager_overhead.main(quick=args.quick, repeats=args.repeats)
    from . import bench
    return bench.main(workload=args.workload, quick=args.quick, repeats=args.repeats, plot=args.plot,
                      dynamic=args.dynamic)


def _dump(args):
    os.environ["TRACEGRAD_DUMP"] = args.stages
    if args.dir:
        os.environ["TRACEGRAD_DUMP_DIR"] = args.dir
    if not os.path.isfile(args.script):
        print(f"tracegrad dump: no such script: {args.script}", file=sys.stderr)
        return 2
    sys.argv = [args.script, *args.args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(args.script)))
    try:
        runpy.run_path(args.script, run_name="__main__")
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    return 0


def _broadcast(args):
    from .viz import explain
    try:
        return explain.main(args.shapes)
    except (ValueError, TypeError) as e:
        print(f"tracegrad broadcast: {e}", file=sys.stderr)
        return 2


def _fuzz(args):
    import json

    from .fuzz import fuzz
    from .fuzz.runner import format_summary, merge
    if args.merge:
        summaries = []
        for path in args.merge:
            with open(path) as fh:
                summaries.append(json.load(fh))
        print(format_summary(merge(summaries)))
        return 0
    backends = [b for spec in args.backend or ["interpret,llvm"] for b in spec.split(",") if b]
    try:
        s = fuzz(args.n, args.seed, backends=backends, out=args.out, start=args.start,
                 kinds=args.kind.split(",") if args.kind else None, dtype=args.dtype, do_shrink=not args.no_shrink,
                 log=print if args.verbose else (lambda *a: None), sizes=args.sizes)
    except ValueError as e:
        print(f"tracegrad fuzz: {e}", file=sys.stderr)
        return 2
    if not args.verbose:
        print(format_summary(s))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(s, fh, indent=1)
    return 1 if s["mismatch_programs"] or s["error_programs"] or s.get("traces_programs") else 0


def _calibrate(args):
    from .backends.cpu import machine
    try:
        print(machine.describe(remeasure=not args.show))
    except ValueError as e:
        print(f"tracegrad calibrate: {e}", file=sys.stderr)
        return 2
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m tracegrad", description="tracegrad command line")
    sub = ap.add_subparsers(dest="command", required=True)

    b = sub.add_parser("bench", help="run the reference workloads W1-W13 (or --eager: eager op overhead)")
    b.add_argument("--workload", metavar="NAME", help="only this workload: W1..W13 or its name, e.g. softmax_fwd; "
                   "R1/R2 (ragged, seqlen): a cold sequence of changing batch sizes or sequence lengths")
    b.add_argument("--dynamic", action="store_true",
                   help="add the column 'tg dynamic=True' (every tg.compile given dynamic=True) beside tg compiled")
    b.add_argument("--quick", action="store_true",
                   help="fewer, shorter rounds, one cold repeat: with torch's columns and empty caches about 6 "
                        "CPU-minutes, most of it compiling (measured: 5.6 CPU-minutes, 21 minutes of wall time on "
                        "2 cores while other processes used ~88%% of them); the table says how busy the machine was")
    b.add_argument("--repeats", type=int, metavar="N", help="interleaved rounds (default 9, 5 with --quick)")
    b.add_argument("--plot", metavar="FILE.svg", help="also draw the table as grouped bars into this SVG file")
    b.add_argument("--eager", action="store_true", help="eager elementwise/reduction cost and per-op overhead vs NumPy")
    b.add_argument("--cpu", metavar="NAME", action="append",
                   help="build compiled code for this CPU (TRACEGRAD_CPU): native (default), an LLVM CPU name such "
                        "as x86-64-v3 (AVX2, no AVX-512), or features such as +avx2,+fma,-avx512f; repeat it to run "
                        "the bench once per build, or list CPU names (native,x86-64-v3) for one table with a compiled column "
                        "per build, each timed in a process of its own")
    b.set_defaults(func=_bench)

    d = sub.add_parser("dump", help="run a script with every compiled function's IR stages printed to stderr")
    d.add_argument("script", help="the Python script to run")
    d.add_argument("args", nargs=argparse.REMAINDER, help="arguments passed on to the script")
    d.add_argument("--stages", default=DUMP_STAGES, help=f"TRACEGRAD_DUMP stages (default {DUMP_STAGES})")
    d.add_argument("--dir", help="write the stages as files into this folder (TRACEGRAD_DUMP_DIR)")
    d.set_defaults(func=_dump)

    bc = sub.add_parser("broadcast", help="show how shapes broadcast, aligned from the right (e.g. 3,1 4)")
    bc.add_argument("shapes", nargs="+", help="shapes as comma-separated sizes: 3,1  4  () for a scalar")
    bc.set_defaults(func=_broadcast)

    fz = sub.add_parser("fuzz", help="random programs run eagerly and compiled; values and gradients compared")
    fz.add_argument("--n", type=int, default=200, help="how many programs (default 200)")
    fz.add_argument("--seed", type=int, default=0, help="the program stream (program i of a seed is always the same)")
    fz.add_argument("--start", type=int, default=0, help="first program number (to split a run into chunks)")
    fz.add_argument("--backend", action="append", metavar="NAME",
                    help="backend(s) compared with eager: interpret, llvm, cuda (repeat or comma-separate; default "
                         "interpret,llvm; cuda needs a GPU or NUMBA_ENABLE_CUDASIM=1)")
    fz.add_argument("--kind", help="only these kinds: graph,inplace,mutate,alias,train,state,reads,numeric,jvp,penalty")
    fz.add_argument("--dtype", choices=["float32", "float64"], help="only this dtype (default: both)")
    fz.add_argument("--out", default="fuzz-failures", help="folder for the failing programs' .py files")
    fz.add_argument("--no-shrink", action="store_true", help="write failing programs as generated")
    fz.add_argument("--json", metavar="PATH", help="also write the summary as JSON")
    fz.add_argument("--sizes", action="store_true",
                    help="run each program across a sequence of input sizes (1, 0 and others in each dimension), "
                         "compiled once with dynamic=True and with the default, against eager: values, gradients "
                         "and the traces")
    fz.add_argument("-v", "--verbose", action="store_true", help="print each failing program as it is found")
    fz.add_argument("--merge", nargs="+", metavar="JSON", help="print one summary of several --json files and exit")
    fz.set_defaults(func=_fuzz)

    c = sub.add_parser("calibrate", help="measure this machine's code-generation thresholds again and show them")
    c.add_argument("--show", action="store_true", help="show the values in use without measuring again")
    c.set_defaults(func=_calibrate)

    args = ap.parse_args(argv)
    if getattr(args, "plot", None) and args.eager:
        ap.error("--plot draws the workload table; it does not apply to --eager")
    if getattr(args, "plot", None) and len(getattr(args, "cpu", None) or []) > 1:
        ap.error("--plot draws one table: give one --cpu with it")
    if getattr(args, "repeats", None) is not None and args.repeats < 1:
        ap.error("--repeats must be >= 1")
    if getattr(args, "workload", None):
        from .bench.ragged import find_sequence
        from .bench.workloads import find
        try:
            find_sequence(args.workload) or find(args.workload)
        except KeyError as e:
            ap.error(e.args[0])
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
