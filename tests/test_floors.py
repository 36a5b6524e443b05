"""The declared dependency floors work (pyproject.toml; issue: numba 0.60 + llvmlite 0.43 and 0.61 +
0.44 crashed at the first compile, numpy 1.26 lacks np.reshape(copy=), llvmlite 0.45-0.47 leave row
reductions unvectorized), and CI tests them: .ci/run installs exactly the floors in a venv of their
own and runs this file (with a compiled training step and the disk cache tests) there, before the
README's test command. Here: what is installed meets the floors, and a compile and a backward agree
with eager and NumPy."""
import importlib.metadata
import importlib.util
import re
from pathlib import Path

import numpy as np

import tracegrad as tg

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("ci_floors", ROOT / ".ci" / "floors.py")
floors = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(floors)
WORKS = {"numpy": "2.1", "llvmlite": "0.48", "numba": "0.66"}     # the lowest versions seen to pass


def _version(text):
    return tuple(int(p) for p in re.match(r"\d+(?:\.\d+)*", text).group(0).split("."))


def test_declared_floors_are_the_ones_that_work():
    assert floors.floors() == WORKS


def test_installed_versions_meet_the_floors():
    for name, floor in floors.floors().items():
        assert _version(importlib.metadata.version(name)) >= _version(floor), (name, floor)


def test_ci_runs_the_floor_smoke_tests_then_the_readme_command():
    run = (ROOT / ".ci" / "run").read_text()
    lines = [ln.strip() for ln in run.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    readme = (ROOT / "README.md").read_text().split("```")[1].strip().splitlines()
    assert lines[-1] == readme[-1].split("  #")[0].strip() == "python -m pytest -q -p no:cacheprovider"
    venv = run.index("python -m venv")
    floor_install = run.index("-m pip install -q $(python .ci/floors.py)")
    smoke = run.index("tests/test_floors.py")
    assert venv < floor_install < smoke < run.index("python -m pip install -q -e '.[test]'")


def test_a_compile_and_a_backward_agree_with_eager_and_numpy():
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((16, 8)).astype(np.float32), rng.standard_normal((8, 4)).astype(np.float32)

    def loss(x, w):
        return (tg.nn.functional.softmax(x @ w, axis=-1) * (x @ w).tanh()).sum()
    grads = []
    for f in (loss, tg.compile(loss)):
        wt = tg.tensor(w, requires_grad=True)
        out = f(tg.tensor(x), wt)
        out.backward()
        grads.append((out.item(), wt.grad.numpy()))
    z = x.astype(np.float64) @ w
    e = np.exp(z - z.max(-1, keepdims=True))
    np.testing.assert_allclose(grads[1][0], (e / e.sum(-1, keepdims=True) * np.tanh(z)).sum(), rtol=1e-5)
    np.testing.assert_allclose(grads[1][0], grads[0][0], rtol=1e-5)
    np.testing.assert_allclose(grads[1][1], grads[0][1], rtol=1e-4, atol=1e-5)
