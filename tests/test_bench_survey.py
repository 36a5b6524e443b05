"""The survey (bench/survey.py): each column checked against eager float64 before it is timed."""
import numpy as np

from tracegrad.bench import survey
from tracegrad.bench.survey_programs import PROGRAMS, find


def test_programs_have_unique_names_and_known_kinds():
    names = [p.name for p in PROGRAMS]
    assert len(names) == len(set(names)) >= 15
    assert {p.kind for p in PROGRAMS} == {"grad", "fwd", "step", "train"}
    assert all(p.grads for p in PROGRAMS if p.kind == "grad")


def test_floor_bytes_count_inputs_outputs_and_optimizer_state():
    p = find("adam")
    inp = p.inputs(np.random.default_rng(0))
    refs = survey.reference(p, inp)
    n = 2048 * 2048 * 4
    assert survey.floor_bytes(p, inp, refs) == 7 * n            # reads p, g, m, v; writes p, m, v


def test_a_program_runs_checked_and_timed():
    res, nbytes = survey.bench_program(find("mlp_infer_b1"), ["tg eager", "tg compiled"], 1, 1e-4)
    assert nbytes is None
    for col in ("tg eager", "tg compiled"):
        assert res[col].failure is None and res[col].error < 1e-5 and len(res[col].times) == 1


def test_a_wrong_answer_fails_and_is_not_timed(monkeypatch):
    right = survey.setup

    def wrong(prog, col, inp):
        run = right(prog, col, inp)
        return (lambda: [o * 1.01 for o in run()]) if col == "tg compiled" else run
    monkeypatch.setattr(survey, "setup", wrong)
    res, _ = survey.bench_program(find("mlp_infer_b1"), ["tg eager", "tg compiled"], 1, 1e-4, log=lambda s: None)
    assert res["tg eager"].failure is None
    assert "differs from the float64 reference" in res["tg compiled"].failure and not res["tg compiled"].times
