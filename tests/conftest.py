"""Test-wide settings: compiled code goes to a private disk cache, not the user's. The CUDA tests
(tests/cuda/) run in their own process under numba's simulator, started here as soon as collection
selects tests/test_cuda_sim.py's suite test (tests/cuda_sim_suite.py), beside the CPU tests: they are
collected only when NUMBA_ENABLE_CUDASIM=1 is set (or TRACEGRAD_CUDA_TESTS=1, on a GPU)."""
import os
import tempfile

import cuda_sim_suite

os.environ.setdefault("TRACEGRAD_CACHE_DIR", tempfile.mkdtemp(prefix="tracegrad-test-cache-"))

collect_ignore = [] if "1" in (os.environ.get("NUMBA_ENABLE_CUDASIM"), os.environ.get("TRACEGRAD_CUDA_TESTS")) \
    else ["cuda"]


def pytest_collection_modifyitems(items):
    """The simulator suite's test runs last: it only waits for the child process started below."""
    suite = [item for item in items if cuda_sim_suite.is_suite_test(item)]
    items[:] = [item for item in items if not cuda_sim_suite.is_suite_test(item)] + suite


def pytest_collection_finish(session):
    """Start the CUDA simulator suite at once if its test was selected (not for --collect-only)."""
    if not session.config.option.collectonly and any(map(cuda_sim_suite.is_suite_test, session.items)):
        cuda_sim_suite.start()


def pytest_sessionfinish():
    cuda_sim_suite.stop()
