"""The CUDA tests (tests/cuda/) under numba's CUDA simulator, in a process of their own
(tests/cuda_sim_suite.py: tests/conftest.py starts it when collection selects the suite test, so it
runs beside the CPU tests). The README's single test command runs them through this test; no GPU and
no gpu extra are needed."""
import cuda_sim_suite


def test_cuda_suite_under_the_simulator():
    rc, out = cuda_sim_suite.result()
    assert rc is not None, (f"the CUDA tests under the simulator ran past {cuda_sim_suite.TIMEOUT} s and were "
                            f"killed; their output so far:\n{out[-20000:]}")
    assert rc == 0, f"the CUDA tests under the simulator failed (rc {rc}):\n{out[-20000:]}"
    assert " passed" in out, out[-5000:]


def test_asking_for_cuda_without_it_says_what_to_install():
    import pytest

    import tracegrad as tg
    if tg.cuda.is_available():
        pytest.skip("this machine has CUDA (or runs the simulator)")
    for make in (lambda: tg.zeros(2, device="cuda"), lambda: tg.ones(2).cuda(), lambda: tg.nn.Linear(2, 2).cuda()):
        with pytest.raises(RuntimeError) as e:
            make()
        msg = str(e.value)
        assert "CUDA is not available" in msg and "pip install -e '.[gpu]'" in msg and "NUMBA_ENABLE_CUDASIM=1" in msg
    assert tg.cuda.device_count() == 0 and tg.backends.mps.is_available() is False
