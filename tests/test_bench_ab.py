"""`python -m tracegrad.bench.ab` needs the git checkout tracegrad runs from: elsewhere (an installed
wheel), without git, or for a revision the checkout lacks it exits with what to do, not a traceback."""
import subprocess
import sys

import pytest

from tracegrad.bench import ab


def test_outside_a_checkout_it_says_so(tmp_path, monkeypatch):
    monkeypatch.setattr(ab, "ROOT", str(tmp_path))
    with pytest.raises(SystemExit, match="not the top of a git checkout .*git clone of tracegrad"):
        ab._archive("main")


def test_without_git_it_says_so(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(SystemExit, match="git is not installed"):
        ab._archive("main")


def test_an_unknown_revision_is_named(tmp_path, monkeypatch):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    monkeypatch.setattr(ab, "ROOT", str(tmp_path))
    with pytest.raises(SystemExit, match="archive no-such-rev tracegrad` failed .*give --rev a revision"):
        ab._archive("no-such-rev")


def test_the_command_exits_with_the_message(tmp_path):
    """As a user runs it from a copy of the package outside any checkout: exit status 1, the text on stderr."""
    import shutil
    import tracegrad
    shutil.copytree(tracegrad.__path__[0], tmp_path / "tracegrad", ignore=shutil.ignore_patterns("__pycache__"))
    r = subprocess.run([sys.executable, "-m", "tracegrad.bench.ab", "--only", "W5"], cwd=tmp_path,
                       env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tmp_path)}, capture_output=True, text=True)
    assert r.returncode == 1 and "Traceback" not in r.stderr and "not the top of a git checkout" in r.stderr, r.stderr


def test_rounds_set_the_sides_up_in_both_orders():
    """Half the rounds after setting up old then new, half after new then old; each round times both."""
    made, calls = [], []

    def setup(side):
        made.append(side)
        return lambda: calls.append(side)
    ticks = iter(range(10_000))
    times = ab.rounds({"old": lambda: setup("old"), "new": lambda: setup("new")}, 5, 2, lambda: next(ticks))
    assert made == ["old", "new", "new", "old"]
    assert len(times["old"]) == len(times["new"]) == 5 and all(t == 0.5 for t in times["old"] + times["new"])   # one tick over 2 calls
    assert calls.count("old") == calls.count("new") == 2 * 3 + 5 * 2     # 3 warm-up calls per setup, 2 per round
    timed = calls[6:6 + 3 * 4]                                             # the first setup's 3 rounds, after warm-up
    assert timed == ["old"] * 2 + ["new"] * 2 + ["new"] * 2 + ["old"] * 2 + ["old"] * 2 + ["new"] * 2
