"""Test-wide settings: compiled code goes to a private disk cache, not the user's. Tests whose work is
child processes that take minutes (tests/background.py: the CUDA tests under numba's simulator, the
PTX check) start them here as soon as collection selects them and run last, waiting for them. The
CUDA tests (tests/cuda/) are collected only when NUMBA_ENABLE_CUDASIM=1 is set (or
TRACEGRAD_CUDA_TESTS=1, on a GPU); otherwise tests/test_cuda_sim.py runs them in a process of their own."""
import os
import tempfile

from hypothesis import HealthCheck, settings

import background

os.environ.setdefault("TRACEGRAD_CACHE_DIR", tempfile.mkdtemp(prefix="tracegrad-test-cache-"))
# the documented thresholds (backends/cpu/machine.py), not this machine's: the same kernels on every machine
os.environ.setdefault("TRACEGRAD_CALIBRATION", "off")
# no example fails for its time on a busy machine (tests/test_wall_clock.py): a test's own settings() keep these
settings.register_profile("tracegrad", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("tracegrad")

collect_ignore = [] if "1" in (os.environ.get("NUMBA_ENABLE_CUDASIM"), os.environ.get("TRACEGRAD_CUDA_TESTS")) \
    else ["cuda"]


def pytest_collection_modifyitems(items):
    """Tests that wait for a background job run last: meanwhile the others run beside the job."""
    waiting = [item for item in items if background.job_of(item)]
    items[:] = [item for item in items if not background.job_of(item)] + waiting


def pytest_collection_finish(session):
    """Start the background jobs of the selected tests (none for --collect-only)."""
    if not session.config.option.collectonly:
        for item in session.items:
            job = background.job_of(item)
            if job:
                job.start()


def pytest_sessionfinish():
    background.stop_all()
