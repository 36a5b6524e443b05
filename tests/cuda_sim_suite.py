"""The CUDA tests (tests/cuda/) under numba's CUDA simulator, as a child pytest process.

The simulator is chosen when numba is imported (NUMBA_ENABLE_CUDASIM=1), so those tests cannot share
the main process. tests/conftest.py starts the child as soon as collection has selected
tests/test_cuda_sim.py's suite test, so that it runs beside the CPU tests instead of after them;
that test (run last) waits for it. The child, and what it starts, is killed when the session ends
(done, interrupted, stopped by -x) and, on Linux, when this process dies.
"""
import atexit
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT = 600           # seconds from the child's start
COMMAND = [sys.executable, "-m", "pytest", "tests/cuda", "-q", "-p", "no:cacheprovider"]
POSIX = os.name == "posix"
_run = None


def is_suite_test(item):
    return item.path.name == "test_cuda_sim.py" and item.name == "test_cuda_suite_under_the_simulator"


def _die_with_parent():
    """In the child before exec: SIGKILL it when the parent dies (Linux), so that no simulator outlives a crash."""
    if sys.platform.startswith("linux"):
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)     # PR_SET_PDEATHSIG


class _Run:
    def __init__(self):
        self.out, self.err = tempfile.TemporaryFile(), tempfile.TemporaryFile()
        self.started = time.monotonic()
        env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
        # a session of its own, so that stop() can kill the child's children (tests that start processes) too
        self.proc = subprocess.Popen(COMMAND, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=self.out,
                                     stderr=self.err, start_new_session=POSIX,
                                     preexec_fn=_die_with_parent if POSIX else None)

    def output(self):
        texts = []
        for fh in (self.out, self.err):
            fh.seek(0)
            texts.append(fh.read().decode(errors="replace"))
        return "".join(texts)


def start():
    """Start the child once; later calls return the same run."""
    global _run
    if _run is None:
        _run = _Run()
        atexit.register(stop)
        _stop_on_sigterm()
    return _run


def _stop_on_sigterm():
    """A SIGTERM (a CI job cancelled) kills the child first, then ends this process as it would have."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) != signal.SIG_DFL:
        return

    def handler(signum, frame):
        stop()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)
    signal.signal(signal.SIGTERM, handler)


def result():
    """Wait for the child (started now if it was not): (its exit status, or None if it ran past TIMEOUT
    seconds and was killed; its stdout then stderr)."""
    run = start()
    try:
        rc = run.proc.wait(timeout=max(0.0, run.started + TIMEOUT - time.monotonic()))
    except subprocess.TimeoutExpired:
        stop()
        rc = None
    return rc, run.output()


def stop():
    """Kill the child's process group if it is still running."""
    if _run is not None and _run.proc.poll() is None:
        try:
            os.killpg(_run.proc.pid, signal.SIGKILL) if POSIX else _run.proc.kill()
        except ProcessLookupError:
            pass
        _run.proc.wait()
