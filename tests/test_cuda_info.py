"""tg.cuda.backend_info() on a machine without a GPU, and the loud cuBLAS fallback (a GPU's part runs
in tests/cuda/test_gpu_first.py under the simulator)."""
import numpy as np
import pytest

import tracegrad as tg


def test_backend_info_without_a_gpu_reports_instead_of_raising():
    if tg.cuda.is_available():
        pytest.skip("a CUDA device (or the simulator) is present: tests/cuda covers it")
    info = tg.cuda.backend_info()
    assert info["available"] is False and info["numba"] and "numba-cuda" in info


def test_products_without_cublas_on_a_gpu_say_so_on_stderr(monkeypatch, capsys):
    """On a GPU (here pretended: simulated() is False) where no libcublas loaded, the first product prints an
    ERROR line that no warning filter hides, besides the warning."""
    from tracegrad.backends.cuda.eager import matmul
    monkeypatch.setattr(matmul, "simulated", lambda: False)
    monkeypatch.setattr(matmul, "_WARNED", [])
    with pytest.warns(RuntimeWarning, match="libcublas was not found"):
        matmul._warn_tiled(np.float32)
    err = capsys.readouterr().err
    assert err.startswith("tracegrad ERROR: no cuBLAS loaded (tried: ") and "10x slower" in err
    matmul._warn_tiled(np.float32)                 # once per process
    assert capsys.readouterr().err == ""


def test_an_integer_product_without_cublas_is_only_a_warning(monkeypatch, capsys):
    from tracegrad.backends.cuda.eager import matmul
    monkeypatch.setattr(matmul, "simulated", lambda: False)
    monkeypatch.setattr(matmul, "_WARNED", [])
    with pytest.warns(RuntimeWarning, match="no cuBLAS for int64"):
        matmul._warn_tiled(np.int64)
    assert capsys.readouterr().err == ""
