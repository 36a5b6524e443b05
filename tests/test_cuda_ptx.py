"""Every kind of kernel tracegrad launches compiles to PTX for sm_90 (H100/H200) through the CUDA
toolkit's NVVM, without a GPU: the simulator tests run kernels as Python and never type them.

tests/cuda_ptx_programs.py runs under the simulator recording each distinct launch
(TRACEGRAD_RECORD_KERNELS); tracegrad/backends/cuda/ptxcheck.py then compiles each with numba.cuda's
compile_ptx in a process without the simulator. Skipped where no NVVM is found (CUDA_HOME, or a
toolkit under /usr/local/cuda*). The whole cuda suite's kernels: see ptxcheck's docstring. Those
steps start as soon as collection selects their test, so that they run beside the other tests
(tests/background.py).
"""
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

import background
from tracegrad.backends.cuda import ptxcheck

ROOT = Path(__file__).resolve().parent.parent
HOST_ENV = {k: v for k, v in os.environ.items() if k not in ("NUMBA_ENABLE_CUDASIM", ptxcheck.RECORD_ENV)}
NVVM_PROBE = "from tracegrad.backends.cuda.ptxcheck import nvvm_missing as m; print(m() or '')"
RECORDED = Path(tempfile.mkdtemp(prefix="tracegrad-ptx-")) / "kernels.jsonl"
PTX = background.Job([      # is there NVVM; the programs under the simulator, recording; their kernels compiled
    background.Step(background.python("-c", NVVM_PROBE), HOST_ENV, quiet=True),
    background.Step(background.python("tests/cuda_ptx_programs.py"),
                    dict(HOST_ENV, NUMBA_ENABLE_CUDASIM="1", **{ptxcheck.RECORD_ENV: str(RECORDED)})),
    background.Step(background.python("-m", "tracegrad.backends.cuda.ptxcheck", "--jobs", "2", str(RECORDED)), HOST_ENV)])


def _python(args, env):
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True)


def _no_nvvm(probe):
    """Why there is no PTX check here ("" where there is one), from NVVM_PROBE's run."""
    return probe.stdout.strip() or (probe.stderr.strip()[-500:] if probe.returncode else "")


@pytest.fixture(scope="module")
def nvvm():
    why = _no_nvvm(_python(["-c", NVVM_PROBE], HOST_ENV))
    if why:
        pytest.skip(f"no PTX check here: {why}")


def _families(path):
    """Which kernels were recorded: tracegrad's hand-written ones by name, generated ones by kind."""
    out = set()
    for line in path.read_text().splitlines():
        fn = json.loads(line)["fn"]
        if "source" in fn:
            out.add("generated " + ("eager" if fn["qualname"].startswith("eager_") else "compiled"))
        else:
            out.add(f"{fn['module'].rsplit('.', 1)[-1]}.{fn['qualname'].rsplit('.', 1)[-1]}")
    return out


@background.runs(PTX)
def test_every_kernel_kind_compiles_to_ptx_for_sm90():
    probe, r, check = PTX.results()
    if _no_nvvm(probe):
        pytest.skip(f"no PTX check here: {_no_nvvm(probe)}")
    assert r.returncode == 0, f"the programs failed under the simulator (status {r.returncode}):\n{r.stdout}\n{r.stderr[-6000:]}"
    want = {"generated eager", "generated compiled", "kernels._copy", "kernels._fill", "kernels._gather",
            "kernels._scatter_add", "kernels._put", "kernels._rand", "kernels._randn", "kernels._arange",
            "argreduce.scan", "argreduce.join", "rounding.kernel", "matmul.kernel", "scan._totals", "scan._running",
            "scan._finish", "blockscan.totals", "blockscan.carries", "blockscan.finish"}
    assert want <= _families(RECORDED), f"not recorded: {sorted(want - _families(RECORDED))}"
    assert check.returncode == 0, (f"kernels that do not compile for a real GPU (status {check.returncode}):\n"
                                   f"{check.stdout[-20000:]}\n{check.stderr[-3000:]}")
    assert "failed" not in check.stdout.splitlines()[-1]


def test_the_check_reports_a_kernel_numba_cuda_cannot_compile(nvvm, tmp_path):
    """The check can fail: a kernel the simulator runs (Python's min of two integers) but numba.cuda
    cannot type, and one that compiles, recorded as generated kernels are."""
    head = "from numba import cuda, int64\n"
    bad = head + "def k(out, n):\n    out[0] = min(int64(n), int64(out.shape[0]))\n"
    good = head + "def k(out, n):\n    out[0] = n if n < out.shape[0] else out.shape[0]\n"
    rec = tmp_path / "two.jsonl"
    args = [["array", "int64", 1, "C"], ["scalar", "int64"]]
    rec.write_text("".join(json.dumps({"fn": {"module": f"tracegrad_cuda_{name}", "qualname": "k", "line": 2,
                                              "cells": [], "source": src}, "args": args, "block": 1024}) + "\n"
                           for name, src in (("bad", bad), ("good", good))))
    r = _python(["-m", "tracegrad.backends.cuda.ptxcheck", str(rec)], HOST_ENV)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "FAILED tracegrad_cuda_bad.k(int64[1dC],int64)" in r.stdout and "good" not in r.stdout
    last = r.stdout.splitlines()[-1]
    assert last.startswith("1 of 2 distinct kernels compiled to PTX for sm_90 (") and last.endswith("; 1 failed")


def test_a_block_must_fit_the_registers_and_shared_memory_of_sm90():
    assert ptxcheck.launch_problem(64, 0, 1024) is None and ptxcheck.launch_problem(255, 0, 256) is None
    assert "65 registers per thread x 1024 threads" in ptxcheck.launch_problem(65, 0, 1024)
    assert 66 * 992 < 65536 and "66 registers" in ptxcheck.launch_problem(66, 0, 992)   # 72 a thread, by warp
    assert ptxcheck.launch_problem(57, 0, 1024) is None and ptxcheck.launch_problem(72, 0, 896) is None
    assert "threads per block" in ptxcheck.launch_problem(8, 0, 1056)
    assert ptxcheck.launch_problem(32, 48 << 10, 256) is None
    assert "static shared memory" in ptxcheck.launch_problem(32, (48 << 10) + 4, 256)


def test_argument_types_follow_numba_cudas_rule_for_device_arrays():
    a = np.zeros((3, 4), np.float32)
    assert ptxcheck._argtype(a) == ["array", "float32", 2, "C"]
    assert ptxcheck._argtype(a.T) == ["array", "float32", 2, "F"]
    assert ptxcheck._argtype(a[:, ::2]) == ["array", "float32", 2, "A"]
    assert ptxcheck._argtype(np.broadcast_to(a[:1], (3, 4))) == ["array", "float32", 2, "A"]
    assert ptxcheck._argtype((3, np.int64(2))) == ["tuple", [["scalar", "int64"], ["scalar", "int64"]]]
    assert [ptxcheck._argtype(v) for v in (1.5, True, np.float32(1))] == \
        [["scalar", "float64"], ["scalar", "bool"], ["scalar", "float32"]]
    assert str(ptxcheck.numba_type(["tuple", [["array", "int32", 1, "A"], ["scalar", "bool"]]])) == \
        "Tuple(array(int32, 1d, A), bool)"


def test_generated_kernels_of_blocks_past_256_threads_cap_their_registers():
    """So that a block of up to 1024 threads always launches (spilling, not failing): the cap goes to
    numba.cuda (max_registers) and, as the generated file's last line, to the PTX check's ptxas."""
    import re

    from tracegrad.backends.cuda import compile as build
    assert [build.max_registers(t) for t in (32, 256, 288, 512, 768, 1024)] == [None, None, 224, 128, 80, 64]
    body = "def k(out):\n    out[0] = 1.0"
    big, small = build.kernel(body, "k", 1024), build.kernel(body, "k", 256)
    assert big.targetoptions["max_registers"] == 64 and "max_registers" not in small.targetoptions
    assert small is build.kernel(body, "k")
    text = open(big.py_func.__code__.co_filename).read()
    assert re.search(build.REGISTER_NOTE.format(r"(\d+)"), text).group(1) == "64"
