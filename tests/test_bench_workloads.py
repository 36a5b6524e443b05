"""The reference workloads' definitions (W7, W8), the per-output tolerance check, the bandwidth floor."""
import numpy as np

from tracegrad.bench import Result, check
from tracegrad.bench.floor import FLOOR, floor_lines, floor_setup
from tracegrad.bench.workloads import WORKLOADS, _np, find


def _errors(w, col):
    inp = w.inputs()
    refs = w.reference(inp)
    outs = [_np(o) for o in w.columns[col](inp)()]
    return check(outs, refs, w.tolerances)


def test_eight_workloads_with_ids_and_names():
    assert [w.id for w in WORKLOADS] == [f"W{i}" for i in range(1, 9)]
    assert find("column_center").id == "W7" and find("w8").name == "mlp_deep_narrow_adam"
    assert [w.id for w in WORKLOADS if w.floor_bytes] == ["W1", "W2", "W3", "W7"]


def test_w7_numpy_and_eager_match_the_float64_reference():
    w = find("W7")
    assert w.tolerances == (1e-5, 1e-4, 1e-4)
    for col in ("numpy", "tg eager"):
        err, failure = _errors(w, col)
        assert failure is None, (col, failure)


def test_w8_adam_step_matches_reference_and_advances():
    w = find("W8")
    inp = w.inputs()
    assert len([k for k in inp if k[0] in "Wb"]) == 24
    err, failure = _errors(w, "tg eager")
    assert failure is None, failure
    run = w.columns["tg eager"](inp)
    first = [_np(o) for o in run()]
    second = [_np(o) for o in run()]
    # Adam's first steps move each weight by about lr (m/sqrt(v) ~ sign(g)): the step count advances
    moved = np.abs(second[1] - first[1])
    assert 0 < np.median(moved) <= 2.1e-3, np.median(moved)


def test_check_names_each_output_over_its_tolerance():
    refs = [np.array(1.0), np.ones(3)]
    outs = [np.array(1.0 + 3e-5), np.ones(3)]
    err, failure = check(outs, refs, (1e-5, 1e-4))
    assert abs(err - 3e-5) < 1e-9 and "output 0: 3.00e-05 > 1e-05" in failure
    assert check(outs, refs)[1] is None                        # the default tolerance, 1e-3


def test_floor_lines_give_time_over_floor():
    w = find("W1")
    res = {"numpy": Result(), "tg compiled": Result(), FLOOR[0]: Result(), FLOOR[1]: Result()}
    res[FLOOR[0]].times = [w.floor_bytes / 10e9]                   # the faster copy: 10 GB/s
    res[FLOOR[1]].times = [w.floor_bytes / 5e9]
    res["numpy"].times = [w.floor_bytes / 10e9 * 3]               # 3x the floor
    res["tg compiled"].failure = "broken"
    lines = floor_lines([(w, res), (find("W4"), res)], ["numpy", "tg compiled"], 14)
    assert "copy bandwidth" in lines[0] and len(lines) == 3       # W4 has no floor
    assert lines[2].startswith("W1 gelu_fwd") and " 10.0" in lines[2] and "3.00x" in lines[2]
    assert lines[2].rstrip().endswith("-")


def test_floor_copies_move_the_workloads_bytes():
    for threaded in (True, False):
        assert floor_setup(1 << 20, threaded)() == []            # 512 KiB read, 512 KiB written
