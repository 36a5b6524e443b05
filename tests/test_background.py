"""tests/background.py starts its children without fork(): a fork from its thread while the main thread
was inside an OpenBLAS call ran OpenBLAS's fork handler there and deadlocked both, hanging a whole run.
Started with vfork, no fork handler runs; the child still dies with this process (PR_SET_PDEATHSIG)."""
import os
import sys

import pytest

import background


def test_a_step_runs_no_fork_handler():
    forks = []
    os.register_at_fork(before=lambda: forks.append(1))
    job = background.Job([background.Step(background.python("-c", "print('ran')"), None)])
    (result,) = job.results()
    assert result.returncode == 0 and result.stdout.strip() == "ran" and not forks


@pytest.mark.skipif(not background.LINUX, reason="PR_SET_PDEATHSIG is Linux's")
def test_a_step_asks_to_die_with_its_parent(tmp_path):
    out = tmp_path / "pdeathsig"
    code = (f"import ctypes; v = ctypes.c_int(); ctypes.CDLL(None).prctl(2, ctypes.byref(v)); "
            f"open({str(out)!r}, 'w').write(str(v.value))")
    (result,) = background.Job([background.Step(background.python("-c", code), None)]).results()
    assert result.returncode == 0 and out.read_text() == "9", result.stderr     # SIGKILL


def test_the_steps_see_their_arguments_and_this_python():
    code = "import sys; print(sys.executable, sys.argv[1:])"
    (result,) = background.Job([background.Step(background.python("-c", code, "a b", "c"), None)]).results()
    assert result.stdout.strip() == f"{sys.executable} ['a b', 'c']", result.stdout
