"""examples/gpu_check.py (the script for a real GPU) runs end to end with --quick under the simulator,
so that it cannot rot: every correctness check passes and the table has every workload."""
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_gpu_check_quick_runs_under_the_simulator():
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", PYTHONPATH=str(ROOT))
    p = subprocess.run([sys.executable, "examples/gpu_check.py", "--quick", "--reps", "1"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=400)
    out = p.stdout
    assert p.returncode == 0, f"exit {p.returncode}\n{out}\n{p.stderr[-4000:]}"
    n = re.search(r"correctness: (\d+)/(\d+) ok", out)
    assert n and n.group(1) == n.group(2) and int(n.group(2)) >= 8, out
    assert "copy bandwidth:" in out and "CUDA simulator" in out
    for wid in ("G1", "G2", "G3", "G4", "G5"):
        row = next(line for line in out.splitlines() if line.startswith(wid + " "))
        cells = row.split()[-5:]
        assert re.fullmatch(r"[\d.]+", cells[0]) and re.fullmatch(r"[\d.]+", cells[1]), row   # tg eager, compiled
    assert "goals:" in out and "G4 tg compiled within 1.15x of torch eager" in out
    for peer in ("torch", "jax"):      # absent here: the column says why instead of failing the run
        assert re.search(rf"{peer}[^\n]*(not importable|is False|no GPU backend)", out), out
