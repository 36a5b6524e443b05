"""examples/gpu_check.py (the script for a real GPU) runs end to end with --quick under the simulator,
so that it cannot rot: every correctness check passes and the table has every workload."""
import os
import re
import subprocess
import sys
from pathlib import Path

import hangs

ROOT = Path(__file__).resolve().parents[2]


def test_gpu_check_quick_runs_under_the_simulator():
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", PYTHONPATH=str(ROOT))
    # the script's time budgets and hard limit are for a real GPU: far out of reach here, so that a busy
    # machine only makes this slower
    p = subprocess.run([sys.executable, "examples/gpu_check.py", "--quick", "--reps", "1", "--scale", "1000",
                        "--hard-limit", "1e6"], cwd=ROOT, env=env, capture_output=True, text=True)
    out = p.stdout
    assert p.returncode == 0, f"exit {p.returncode}\n{out}\n{p.stderr[-4000:]}"
    n = re.search(r"correctness: (\d+)/(\d+) ok", out)
    assert n and n.group(1) == n.group(2) and int(n.group(2)) >= 8, out
    assert "copy bandwidth:" in out and "CUDA simulator" in out
    for wid in ("G1", "G2", "G3", "G4", "G5"):
        row = next(line for line in out.splitlines() if line.startswith(wid + " "))
        cells = row.split()[-5:]
        assert re.fullmatch(r"[\d.]+", cells[0]) and re.fullmatch(r"[\d.]+", cells[1]), row   # tg eager, compiled
        pipe = out.splitlines()[out.splitlines().index(row) + 1].split()
        assert pipe[:2] == ["pipe", "ms"] and re.fullmatch(r"[\d.]+", pipe[3]), pipe      # the pipelined time
    assert "cuBLAS: none: numba's CUDA simulator has no cuBLAS" in out
    assert "goals:" in out and "G4 tg compiled within 1.15x of torch eager" in out
    for peer in ("torch", "jax"):      # absent here: the column says why instead of failing the run
        assert re.search(rf"{peer}[^\n]*(not importable|is False|no GPU backend)", out), out


HANGS_AFTER_G5 = """
import sys, threading, time
sys.path.insert(0, "examples")
import gpu_check as g
measure = g.workload_section
def measured_then_hung(wid, size, reps, seconds, results, watchdog=None):
    measure(wid, size, reps, seconds, results, watchdog)
    watchdog.timer.cancel()                          # the limit falls now, inside a call that never returns
    threading.Timer(0.2, watchdog.fire).start()
    time.sleep(300)
g.workload_section = measured_then_hung
sys.exit(g.main(["--quick", "--reps", "1", "--only", "G5", "--scale", "1000"]))
"""


def test_a_run_past_its_hard_limit_prints_what_it_measured_and_exits_3():
    """A run that hangs (here: inside a call that never returns, once G5 is measured) is stopped by the
    watchdog thread, which prints the table with what was measured, and the goals, itself."""
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", PYTHONPATH=str(ROOT))
    p = subprocess.run([sys.executable, "-c", HANGS_AFTER_G5], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=hangs.limit(31))           # the watchdog is what is tested
    assert p.returncode == 3, f"exit {p.returncode}\n{p.stdout}\n{p.stderr[-3000:]}"
    assert "== HARD TIME LIMIT: the run was stopped after" in p.stdout
    after = p.stdout.split("HARD TIME LIMIT")[1]
    assert "GPU workloads, float32" in after and "goals:" in after
    assert re.search(r"G5 W5 20 ops fwd\+bwd \(8,\) +ms +[\d.]+ ", after), after


def test_a_workload_whose_inputs_fail_still_gets_its_row(capsys):
    sys.path.insert(0, str(ROOT / "examples"))
    import gpu_check as g
    results = {}
    g.workload_section("G1", "not a size", 1, 10, results)
    g.workload_section("G5", g.QUICK["G5"], 1, 60, results)
    assert results["G1"][0] is None and all(c.note.startswith("not run: inputs or reference failed")
                                            for c in results["G1"][1].values())
    g.report(results, None)
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("G1 "))
    assert row.split()[-5:] == ["n/a"] * 5
    assert "tg compiled: not run: inputs or reference failed (TypeError" in out
    assert re.search(r"G5 W5 20 ops fwd\+bwd \(8,\) +ms +[\d.]+ +[\d.]+", out), out
