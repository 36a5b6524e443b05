"""TRACEGRAD_LOG on cuda tensors: the stages of a cuda compile and each generated kernel's kind and ops."""
import re

import numpy as np

import tracegrad as tg


def test_cuda_compile_logs_its_stages_and_kernels(monkeypatch, capsys):
    monkeypatch.setenv("TRACEGRAD_LOG", "stages,kernels")
    x = tg.tensor(np.linspace(-1, 1, 32, dtype=np.float32).reshape(4, 8), device="cuda")
    f = tg.compile(lambda x: (x * 2).exp().sum(1))
    out = f(x).cpu().numpy()
    np.testing.assert_allclose(out, np.exp(2 * x.cpu().numpy()).sum(1), rtol=1e-5)
    err = capsys.readouterr().err
    stages = re.findall(r"^\[tracegrad\.stages\] <lambda>: (\S+)", err, re.M)
    assert stages == ["trace", "autodiff", "optimize", "protect", "fuse", "cuda", "finish", "compile:"]   # planned in "cuda"
    kernels = re.findall(r"^\[tracegrad\.kernels\] <lambda>: (.*)$", err, re.M)
    assert kernels and all(k.endswith(" on cuda") for k in kernels) and "exp" in kernels[0]
