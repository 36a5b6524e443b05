"""The broadcast explainer: its text for matching, stretched, mismatched and three-shape cases, colours,
the BroadcastError picture, and `python -m tracegrad broadcast`."""
import doctest
import io
import re
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tracegrad as tg
from tracegrad.__main__ import main
from tracegrad.viz import explain

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def test_matching_shapes():
    assert tg.explain_broadcast((2, 3), (2, 3), color=False) == (
        "(2, 3) and (2, 3) broadcast to (2, 3)\n"
        "  dim     -2  -1\n"
        "  (2, 3)   2   3\n"
        "  (2, 3)   2   3\n"
        "  result   2   3")


def test_stretched_from_one_and_missing():
    assert tg.explain_broadcast((3, 1), (4,), color=False) == (
        "(3, 1) and (4,) broadcast to (3, 4)\n"
        "  dim       -2    -1\n"
        "  (3, 1)     3  1->4\n"
        "  (4,)    .->3     4\n"
        "  result     3     4\n"
        "  1->n stretched from size 1; .->n missing dimension (counts as 1) stretched")


def test_mismatch_names_the_first_dimension_from_the_right():
    assert tg.explain_broadcast((2, 3), (3, 2), color=False) == (
        "shapes (2, 3) and (3, 2) cannot be broadcast: dimension -1 has sizes 3 and 2\n"
        "  dim     -2  -1\n"
        "  (2, 3)  2!  3!\n"
        "  (3, 2)  3!  2!\n"
        "  result   ?   ?\n"
        "  n! sizes differ and neither is 1")


def test_three_shapes():
    assert tg.explain_broadcast((5, 1, 4), (3, 1), (), color=False) == (
        "(5, 1, 4) and (3, 1) and () broadcast to (5, 3, 4)\n"
        "  dim          -3    -2    -1\n"
        "  (5, 1, 4)     5  1->3     4\n"
        "  (3, 1)     .->5     3  1->4\n"
        "  ()         .->5  .->3  .->4\n"
        "  result        5     3     4\n"
        "  1->n stretched from size 1; .->n missing dimension (counts as 1) stretched")
    text = tg.explain_broadcast((2, 1), (1, 4), (3, 1, 5), color=False)
    assert text.splitlines()[0] == ("shapes (2, 4) and (3, 1, 5) cannot be broadcast: "
                                    "dimension -1 has sizes 4 and 5")
    assert text.splitlines()[3] == "  (1, 4)     .->3  1->2  4!"


def test_tensors_and_arrays_stand_for_their_shapes():
    import numpy as np
    assert (tg.explain_broadcast(tg.ones(3, 1), np.ones(4), color=False)
            == tg.explain_broadcast((3, 1), (4,), color=False))


def test_colours_only_when_asked_or_on_a_terminal(monkeypatch):
    coloured = tg.explain_broadcast((2, 3), (3, 1), (2, 1, 1), color=True)
    assert "\x1b[33m" in coloured and "\x1b[1;31m" in coloured and "\x1b[32m" in coloured
    assert ANSI.sub("", coloured) == tg.explain_broadcast((2, 3), (3, 1), (2, 1, 1), color=False)

    class Tty(io.StringIO):
        def isatty(self):
            return True
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.delenv("TERM", raising=False)
    assert explain.use_color(Tty()) and not explain.use_color(io.StringIO())
    monkeypatch.setenv("NO_COLOR", "1")
    assert not explain.use_color(Tty())
    monkeypatch.setattr(sys, "stdout", Tty())
    assert "\x1b[" not in tg.explain_broadcast((3, 1), (4,))


def test_broadcast_error_carries_the_picture_under_its_summary():
    with pytest.raises(tg.BroadcastError) as e:
        tg.ones(2, 3) + tg.ones(3, 2)
    lines = str(e.value).splitlines()
    assert lines[0] == "shapes (2, 3) and (3, 2) cannot be broadcast: dimension -1 has sizes 3 and 2"
    assert "\n".join(lines[1:]) == tg.explain_broadcast((2, 3), (3, 2), color=False).split("\n", 1)[1]
    assert "\x1b[" not in str(e.value)


def test_traced_error_keeps_the_summary_first_and_the_picture():
    def f(a, b):
        return a + b
    with pytest.raises(tg.BroadcastError) as e:
        tg.make_ir(f)(tg.ones(2, 3), tg.ones(3, 2))
    first, *rest = str(e.value).splitlines()
    assert first.startswith("shapes (2, 3) and (3, 2) cannot be broadcast: dimension -1 has sizes 3 and 2")
    assert rest[0].split() == ["dim", "-2", "-1"]


def test_command_line(capsys):
    assert main(["broadcast", "3,1", "4"]) == 0
    assert capsys.readouterr().out == tg.explain_broadcast((3, 1), (4,), color=False) + "\n"
    assert main(["broadcast", "2,3", "(3, 2)"]) == 1
    assert "dimension -1 has sizes 3 and 2" in capsys.readouterr().out
    assert main(["broadcast", "2,a"]) == 2
    assert "cannot read the shape '2,a'" in capsys.readouterr().err


def test_command_line_in_a_subprocess_respects_no_color():
    r = subprocess.run([sys.executable, "-m", "tracegrad", "broadcast", "3,1", "4"], capture_output=True,
                       text=True, env={"NO_COLOR": "1", "PATH": ""})
    assert r.returncode == 0 and r.stdout.startswith("(3, 1) and (4,) broadcast to (3, 4)\n  dim")


def test_docstring_example_runs():
    result = doctest.testmod(explain, globs={"tg": tg}, report=False)
    assert result.attempted >= 1 and result.failed == 0


def test_warning_points_at_the_explainer():
    with pytest.warns(tg.BroadcastWarning, match=r"tg\.explain_broadcast\(\(5, 1\), \(5,\)\)"):
        tg.ones(5, 1) - tg.ones(5)


_shape = st.lists(st.sampled_from([1, 1, 2, 3, 4]), max_size=4).map(tuple)


@settings(max_examples=150, deadline=None)
@given(st.lists(_shape, min_size=1, max_size=3))
def test_picture_agrees_with_numpy_cell_by_cell(shapes):
    """Each cell is the size kept, 1->n, .->n or n!, as NumPy's broadcasting of that column says; the
    first line is the result shape or the BroadcastError's own summary."""
    lines = tg.explain_broadcast(*shapes, color=False).splitlines()
    n = max(len(s) for s in shapes)
    try:
        result = np.broadcast_shapes(*shapes)
    except ValueError:
        with pytest.raises(tg.BroadcastError) as e:
            tg.broadcast_shapes(*shapes)
        assert lines[0] == e.value.args[0]
        result = None
    else:
        assert lines[0] == f"{' and '.join(map(str, shapes))} broadcast to {result}"
    assert lines[1].split() == ["dim"] + [str(d) for d in range(-n, 0)]
    for k, s in enumerate(shapes):
        cells = lines[2 + k].split()[-n:] if n else []
        for d in range(n):
            i = d - (n - len(s))
            column = {t[d - (n - len(t))] for t in shapes if d - (n - len(t)) >= 0} - {1}
            size = s[i] if i >= 0 else None
            if len(column) > 1:
                expected = "." if size is None else "1" if size == 1 else f"{size}!"
            else:
                r = column.pop() if column else 1
                expected = (f".->{r}" if r != 1 else ".") if size is None else f"1->{r}" if size != r else str(r)
            assert cells[d] == expected, (s, d, cells)
    if result is not None and n:
        assert lines[2 + len(shapes)].split()[1:] == [str(r) for r in result]
