"""No test fails because the machine is busy: a wall-clock limit appears in tests/ only as
hangs.limit(quiet seconds), where a hang is the failure being tested (tests/hangs.py); subprocesses,
background steps, thread joins, barrier waits, alarms and hypothesis examples otherwise take as long
as they take. Checked on the source of every test file (the scripts that tests run included)."""
import ast
import re
from pathlib import Path

from hypothesis import HealthCheck, settings

TESTS = Path(__file__).resolve().parent
FILES = sorted(p for p in TESTS.rglob("*.py") if p.name not in ("hangs.py", "test_wall_clock.py"))


def _is_limit(node):
    """hangs.limit(...), None, or a `timeout` parameter or field passed through."""
    return (isinstance(node, ast.Constant) and node.value is None
            or isinstance(node, ast.Name) and node.id == "timeout"
            or isinstance(node, ast.Attribute) and node.attr == "timeout"
            or isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "limit"
            and isinstance(node.func.value, ast.Name) and node.func.value.id == "hangs")


def _seconds(node):
    return isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool)


def _problems(path):
    text = path.read_text()
    out = []
    for node in ast.walk(ast.parse(text)):
        if not isinstance(node, ast.Call):
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        for kw in node.keywords:
            if kw.arg == "timeout" and not _is_limit(kw.value):
                out.append(f"{path.name}:{node.lineno}: {name}(timeout={ast.unparse(kw.value)})")
            if kw.arg == "deadline" and not (isinstance(kw.value, ast.Constant) and kw.value.value is None):
                out.append(f"{path.name}:{node.lineno}: hypothesis deadline={ast.unparse(kw.value)}")
        if name in ("join", "wait", "alarm", "setitimer", "communicate") and any(_seconds(a) for a in node.args):
            out.append(f"{path.name}:{node.lineno}: {name}({ast.unparse(node.args[0])})")
        if name == "Step" and len(node.args) > 2 and not _is_limit(node.args[2]):
            out.append(f"{path.name}:{node.lineno}: a background step limited to {ast.unparse(node.args[2])} s")
    for m in re.finditer(r"\b(alarm|setitimer)\(\s*(?:signal\.\w+,\s*)?\d|perf_counter\(\)\s*\+\s*\d", text):
        out.append(f"{path.name}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)} (in a script)")
    return out


def test_wall_clock_limits_only_guard_hangs():
    found = [p for path in FILES for p in _problems(path)]
    assert not found, "wall-clock limits outside hangs.limit():\n" + "\n".join(found)


def test_the_checker_finds_each_kind(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text('import subprocess, threading\nsubprocess.run(["x"], timeout=120)\nt = threading.Thread()\n'
                   't.join(60)\nsettings(deadline=200)\nbackground.Step(argv, env, 300)\n'
                   'SCRIPT = "signal.alarm(60)"\nt.wait(timeout=hangs.limit(2))\n", ".join(names)\n')
    found = _problems(bad)
    assert [f.split(":")[1] for f in found] == ["2", "4", "5", "6", "7"], found


def test_hypothesis_has_no_deadline_and_no_speed_health_check():
    """tests/conftest.py's profile: an example never fails for taking long, nor data generation."""
    assert settings.default.deadline is None
    assert HealthCheck.too_slow in settings.default.suppress_health_check
