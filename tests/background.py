"""Tests whose work is child processes that take minutes (the CUDA tests under numba's simulator, the
PTX check) start them as soon as collection has selected the test (tests/conftest.py), so that they
run beside the other tests instead of after them; the test, run last, waits for them and checks
their output:

    JOB = background.Job([background.Step(argv, env), ...])

    @background.runs(JOB)
    def test_x():
        first, second = JOB.results()       # a Result per step; None for a step not run

A job's steps run one after another in child processes, from a thread of this process; a step runs
only if the one before it exited with status 0 (and, for a `quiet` step, printed nothing). The
children, and what they start, are killed when the session ends (done, interrupted, stopped by -x),
on SIGTERM and, on Linux, when this process dies.
"""
import atexit
import os
import signal
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
POSIX = os.name == "posix"
LINUX = sys.platform.startswith("linux")      # where a child can ask to die with its parent (prctl)
_started = []


@dataclass
class Step:
    argv: list
    env: dict
    timeout: float = None      # seconds (hangs.limit) past which the step is killed (Result.returncode None);
                               # None: it takes as long as it takes (a hang is not what it tests)
    quiet: bool = False        # the next step runs only if this one printed nothing on stdout


@dataclass
class Result:
    returncode: object         # the exit status, or None: killed past the step's timeout
    stdout: str
    stderr: str


class Job:
    """Steps run one after another, from a thread of this process, started once."""

    def __init__(self, steps):
        self.steps, self._results, self._done = steps, [], threading.Event()
        self._lock, self._thread, self._proc, self._stopped = threading.Lock(), None, None, False

    def start(self):
        with self._lock:
            if self._thread is not None:
                return
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        if not _started:
            atexit.register(stop_all)
            _stop_on_sigterm()
        _started.append(self)

    def results(self):
        """Wait for the job (started now if it was not): a Result per step, None for a step not run."""
        self.start()
        self._done.wait()
        return self._results + [None] * (len(self.steps) - len(self._results))

    def stop(self):
        """Kill the running step's process group; no later step starts."""
        with self._lock:
            self._stopped, proc = True, self._proc
        if proc is not None and proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL) if POSIX else proc.kill()
            except ProcessLookupError:
                pass

    def _run(self):
        try:
            for step in self.steps:
                result = self._step(step)
                if result is None:
                    break
                self._results.append(result)
                if result.returncode != 0 or step.quiet and result.stdout.strip():
                    break
        finally:
            self._done.set()

    def _step(self, step):
        out, err = tempfile.TemporaryFile(), tempfile.TemporaryFile()
        with self._lock:
            if self._stopped:
                return None
            # a session of its own, so that stop() also kills what the step starts
            argv = [sys.executable, "-c", _DIE_WITH_PARENT, str(os.getpid()), *step.argv] if LINUX else step.argv
            self._proc = proc = subprocess.Popen(argv, cwd=ROOT, env=step.env, stdin=subprocess.DEVNULL,
                                                 stdout=out, stderr=err, start_new_session=POSIX)
        try:
            rc = proc.wait(timeout=step.timeout)        # None: no limit
        except subprocess.TimeoutExpired:
            self.stop()
            proc.wait()
            rc = None
        return Result(rc, _text(out), _text(err))


def runs(job):
    """Mark a test as the one that waits for `job`: conftest starts the job when the test is selected."""
    def mark(test):
        test.background_job = job
        return test
    return mark


def job_of(item):
    """The job a collected test waits for, or None."""
    return getattr(getattr(item, "function", None), "background_job", None)


def stop_all():
    for job in _started:
        job.stop()


def python(*args):
    """The argv of this Python running `args`."""
    return [sys.executable, *args]


def _text(fh):
    fh.seek(0)
    return fh.read().decode(errors="replace")


# The child's first act: SIGKILL when the thread that started it ends, which it outlives only if this
# process dies (PR_SET_PDEATHSIG, kept across exec), then exec the step. Done in the child rather than by
# a preexec_fn, so that CPython starts it with vfork, which runs no fork handlers: with fork, OpenBLAS's
# handler, run here while the main thread was inside a BLAS call, deadlocked both (a run hung for good).
_DIE_WITH_PARENT = ("import ctypes, os, signal, sys; ctypes.CDLL(None).prctl(1, signal.SIGKILL); "
                    "os.getppid() == int(sys.argv[1]) or os._exit(1); os.execv(sys.argv[2], sys.argv[2:])")


def _stop_on_sigterm():
    """A SIGTERM (a CI job cancelled) kills the children first, then ends this process as it would have."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) != signal.SIG_DFL:
        return

    def handler(signum, frame):
        stop_all()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)
    signal.signal(signal.SIGTERM, handler)
