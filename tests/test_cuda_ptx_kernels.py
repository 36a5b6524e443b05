"""The PTX of the kernels of the GPU goals' shapes (tests/cuda_ptx_kinds.py: gelu, softmax, a row
sum, layer norm forward and backward; generated under the simulator, compiled for sm_90 through the
toolkit's NVVM) has the properties that let them run at memory speed: no float64 arithmetic in a
float32 reduction (compensated float32 sums instead), softmax's exp computed once per element, and no
IEEE divide per element where a row's value divides every element (a reciprocal, hoisted). Skipped
where no NVVM is found."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tracegrad.backends.cuda import ptxcheck

ROOT = Path(__file__).resolve().parent.parent
HOST_ENV = {k: v for k, v in os.environ.items() if k not in ("NUMBA_ENABLE_CUDASIM", ptxcheck.RECORD_ENV)}
COMPILE = ("import json, sys\nfrom tracegrad.backends.cuda import ptxcheck\n"
           "recs = [json.loads(line) for line in open(sys.argv[1])]\n"
           "json.dump([dict(r, ptx=ptxcheck.compile_one(r['fn'], r['args'])) for r in recs], open(sys.argv[2], 'w'))\n")


def _python(args, env):
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=dict(env, PYTHONPATH=str(ROOT)),
                          capture_output=True, text=True)


@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
    """[{"kind", "name", "fn" (with the generated "source"), "ptx"}] of every launch."""
    probe = _python(["-c", "from tracegrad.backends.cuda.ptxcheck import nvvm_missing as m; print(m() or '')"], HOST_ENV)
    if probe.stdout.strip() or probe.returncode:
        pytest.skip(f"no PTX check here: {probe.stdout.strip() or probe.stderr[-500:]}")
    d = tmp_path_factory.mktemp("ptx")
    r = _python(["tests/cuda_ptx_kinds.py", str(d / "k.jsonl")], dict(HOST_ENV, NUMBA_ENABLE_CUDASIM="1"))
    assert r.returncode == 0, r.stdout + r.stderr[-5000:]
    r = _python(["-c", COMPILE, str(d / "k.jsonl"), str(d / "ptx.json")], HOST_ENV)
    assert r.returncode == 0, r.stdout + r.stderr[-5000:]
    return json.loads((d / "ptx.json").read_text())


def _of(kernels, kind):
    got = [k for k in kernels if k["kind"] == kind]
    assert got, f"no {kind} kernel recorded"
    return got


def test_float32_reductions_hold_no_float64(kernels):
    for k in _of(kernels, "row_sum") + _of(kernels, "softmax") + _of(kernels, "layernorm"):
        assert not re.search(r"\.f64\b", k["ptx"]), f"{k['kind']} {k['name']} computes in float64"
        assert "float64" not in k["fn"]["source"].split("\n", 4)[-1], k["fn"]["source"]


def test_softmax_computes_exp_once_per_element_and_divides_by_a_reciprocal(kernels):
    (k,) = _of(kernels, "softmax")                   # one row kernel: max, sum of exp, normalized exp
    body = k["fn"]["source"]
    assert body.count("math.exp(") == 1, body
    assert not re.search(r"div\.rn\.f32", k["ptx"]), "an IEEE divide per element"
    assert re.search(r"rcp\.rn\.f32", k["ptx"])


def test_layernorm_backward_row_kernel_divides_by_reciprocals(kernels):
    rows = [k for k in _of(kernels, "layernorm") if k["name"] == "backward_k0"]
    assert rows and not re.search(r"div\.rn\.f32", rows[0]["ptx"])


def test_elementwise_maps_load_and_store_16_bytes_at_a_time(kernels):
    """gelu over a contiguous float32 array of a multiple of 4 elements: 4 elements a thread, read and
    written by vector accesses (the scalar loop stays for arrays whose address is not 16-byte aligned)."""
    (k,) = _of(kernels, "gelu")
    assert re.search(r"ld\.global\.v4\.f32", k["ptx"]) and re.search(r"st\.global\.v4\.f32", k["ptx"])
    assert re.search(r"ld\.global\.f32", k["ptx"])


def test_layernorm_sums_over_rows_ride_in_persistent_row_kernels(kernels):
    """The loss sum (forward) and dW, db (backward) are added up by the row kernels' blocks as they
    take the rows, and joined from the blocks' partials: no second pass over x and g."""
    names = sorted(k["name"] for k in _of(kernels, "layernorm"))
    assert names == ["backward_k0", "backward_k0_join", "forward_k0", "forward_k0_join"], names
