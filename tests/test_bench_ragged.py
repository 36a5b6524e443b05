"""The cold sequences R1 (ragged MLP batches) and R2 (GPT sequence lengths): their sizes, and at tiny sizes
that every tracegrad column runs them and agrees with the float64 run (no timing asserted)."""
from dataclasses import replace

import numpy as np

from tracegrad.bench import cold
from tracegrad.bench.ragged import SEQUENCES, find_sequence, max_rel_error, reference, run_sequence

TINY_MLP = replace(find_sequence("R1"), sizes=(5, 3, 1, 0, 7, 2), dims=(12, 8, 3))
TINY_GPT = replace(find_sequence("seqlen"), sizes=(8, 5, 9), dims=(2,))


def test_sequences_are_the_issues():
    r1, r2 = SEQUENCES
    assert len(r1.sizes) == len(set(r1.sizes)) == 24 and {0, 1} <= set(r1.sizes)
    assert all(17 <= s <= 256 for s in r1.sizes if s > 1) and r1.sizes != tuple(sorted(r1.sizes))
    assert len(r2.sizes) == len(set(r2.sizes)) == 8 and min(r2.sizes) == 8 and max(r2.sizes) == 64
    assert find_sequence("ragged") is r1 and find_sequence("R2") is r2 and find_sequence("W4") is None


def test_mlp_columns_agree_with_the_float64_run_empty_batch_included():
    refs = reference(TINY_MLP)
    assert np.isnan(refs[0][3]) and np.isfinite(np.delete(refs[0], 3)).all()     # the empty batch's loss
    traces = {}
    for col in ("numpy", "tg eager", "tg compiled", "tg dynamic=True"):
        got = run_sequence(TINY_MLP, col)
        assert max_rel_error(got["outputs"], refs) <= cold.TOLERANCES["R1"], col
        traces[col] = got["traces"]
    assert traces["numpy"] is None and traces["tg eager"] is None
    assert traces["tg dynamic=True"] == 1 and 1 <= traces["tg compiled"] <= 2       # issue 26's goals


def test_gpt_columns_agree_with_the_float64_run():
    refs = reference(TINY_GPT)
    for col in ("tg eager", "tg compiled", "tg dynamic=True"):
        assert max_rel_error(run_sequence(TINY_GPT, col)["outputs"], refs) <= cold.TOLERANCES["R2"], col
    assert run_sequence(TINY_GPT, "numpy") is None


def test_max_rel_error_wants_nan_where_the_reference_has_it():
    ref = [np.array([1.0, np.nan, 2.0])]
    assert abs(max_rel_error([np.array([1.0, np.nan, 2.002])], ref) - 0.001) < 1e-12
    assert max_rel_error([np.array([1.0, 0.5, 2.0])], ref) == np.inf


def test_a_cold_run_is_a_fresh_process_with_its_outputs(capsys):
    got = cold.run_cold(TINY_MLP, "tg eager")
    assert got["seconds"] >= 0 and max_rel_error(got["outputs"], reference(TINY_MLP)) <= 1e-3
    results, load = cold.measure(TINY_MLP, columns=("numpy", "jax.jit"), log=lambda *a: None)
    cold.print_table(TINY_MLP, results, load, 1, out=print)
    text = capsys.readouterr().out
    assert "numpy" in text and ("jax not installed" in text or results["jax.jit"]["times"])
