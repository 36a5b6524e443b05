"""examples/gpu_first.py (the first-contact probe for a real GPU) runs under the simulator as CI runs it, so that
it cannot rot before the first GPU run: every step it runs passes, and tg.cuda.backend_info() says what the
backend runs on."""
import os
import subprocess
import sys
from pathlib import Path

import tracegrad as tg

ROOT = Path(__file__).resolve().parents[2]


def test_the_probe_passes_under_the_simulator():
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", GPU_FIRST_N="4", PYTHONPATH=str(ROOT))
    p = subprocess.run([sys.executable, "examples/gpu_first.py"], cwd=ROOT, env=env, capture_output=True, text=True)
    out = p.stdout
    assert p.returncode == 0, f"exit {p.returncode}\n{out}\n{p.stderr[-3000:]}"
    assert "FAILED" not in out and "every step run passed" in out
    for line in ("eager add: first call", "compiled gelu: first call", "cuBLAS matmul: first call",
                 "compiled softmax: first call", "compiled layernorm fwd+bwd first call",
                 "numba-cuda launch, 8 arrays", "simulated: True"):
        assert line in out, line
    for step in ("K", "P", "C"):
        assert f"== {step} " in out and "skipped (the simulator" in out


def test_backend_info_under_the_simulator():
    info = tg.cuda.backend_info()
    assert info["available"] is True and info["simulated"] is True
    assert info["device"] == "numba CUDA simulator"
    assert info["cublas"] is None and "simulator has no cuBLAS" in info["cublas_missing"]
