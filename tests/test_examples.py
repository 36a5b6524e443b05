"""The example and the command line run end to end, in a subprocess, as a user would run them (the
training example, the longest, starts when collected and runs beside the other tests: tests/background.py)."""
import os
import re
import subprocess
import sys
from pathlib import Path

import background
import tracegrad as tg

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
MLP_TRAIN = background.Job([background.Step(background.python("examples/mlp_train.py", "--quick"), ENV)])


def run(*args):
    p = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, env=ENV)
    return p.returncode, p.stdout, p.stderr


@background.runs(MLP_TRAIN)
def test_mlp_train_quick_reaches_target():
    (r,) = MLP_TRAIN.results()
    rc, out, err = r.returncode, r.stdout, r.stderr
    assert rc == 0, f"exit {rc}\nstdout:\n{out}\nstderr:\n{err}"
    accs = re.search(r"final accuracy: ([\d.]+)%(?: eager, ([\d.]+)% compiled)?", out)
    assert accs, out
    assert float(accs.group(1)) >= 95.0, out
    if hasattr(tg, "compile"):
        assert accs.group(2) is not None and float(accs.group(2)) >= 95.0, out
        assert "compiled" in out and "speed-up" in out, out
    assert "median step" in out


def test_bench_quick_w5():
    rc, out, err = run("-m", "tracegrad", "bench", "--quick", "--workload", "W5")
    assert rc == 0, f"exit {rc}\nstdout:\n{out}\nstderr:\n{err}"
    row = next(line for line in out.splitlines() if line.startswith("W5 tiny_overhead"))
    assert "(1.00)" in row and "FAILED" not in row, out
    header = next(line for line in out.splitlines() if line.startswith("workload"))
    assert "numpy" in header and "tg eager" in header
    assert ("tg compiled" in header) == hasattr(tg, "compile"), out
    assert "geomean" in out and "max rel error" in out


def test_bench_rejects_unknown_workload():
    rc, out, err = run("-m", "tracegrad", "bench", "--workload", "W99")
    assert rc == 2 and "unknown workload" in err


def test_dump_runs_script_with_env_and_args(tmp_path):
    script = tmp_path / "s.py"
    script.write_text("import os, sys\nprint('DUMP=' + os.environ['TRACEGRAD_DUMP'], sys.argv[1:])\nsys.exit(3)\n")
    rc, out, err = run("-m", "tracegrad", "dump", str(script), "--flag", "x")
    assert rc == 3, err
    assert "DUMP=traced,forward,backward,kernels ['--flag', 'x']" in out
