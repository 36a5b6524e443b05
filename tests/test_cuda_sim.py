"""The CUDA tests (tests/cuda/) under numba's CUDA simulator, in a process of their own: the simulator
is chosen when numba is imported (NUMBA_ENABLE_CUDASIM=1), so they cannot share this process. The
process starts as soon as collection selects the suite's test, so that it runs beside the other tests
(tests/background.py). The README's single test command runs them through this test; no GPU and no
gpu extra are needed."""
import os

import background

SUITE = background.Job([background.Step(
    background.python("-m", "pytest", "tests/cuda", "-q", "-p", "no:cacheprovider"),
    dict(os.environ, NUMBA_ENABLE_CUDASIM="1"))])


@background.runs(SUITE)
def test_cuda_suite_under_the_simulator():
    (r,) = SUITE.results()
    out = r.stdout + r.stderr
    assert r.returncode == 0, f"the CUDA tests under the simulator failed (rc {r.returncode}):\n{out[-20000:]}"
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
