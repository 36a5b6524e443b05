"""tg.cuda under numba's simulator: availability, device queries, synchronize, tg.backends.mps."""
import pytest

import tracegrad as tg


def test_the_simulator_is_a_cuda_device():
    assert tg.cuda.is_available()
    assert tg.cuda.device_count() == 1 and tg.cuda.current_device() == 0
    assert tg.cuda.get_device_name() == "numba CUDA simulator"
    tg.cuda.synchronize()


def test_mps_is_not_available():
    assert tg.backends.mps.is_available() is False and tg.backends.mps.is_built() is False
    device = "cuda" if tg.cuda.is_available() else "mps" if tg.backends.mps.is_available() else "cpu"
    assert device == "cuda"


def test_only_cuda_0_exists():
    with pytest.raises(RuntimeError, match="invalid device ordinal: cuda:1"):
        tg.cuda.require(tg.device("cuda:1"))
