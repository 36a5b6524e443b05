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


# loss and sum |grad| per input, of PyTorch 2.13 in float64 on the programs' inputs (rng seed 0)
TORCH_F64 = {
    "rotary_embed": (-2834.8192640344046, {"x": 1672675.0797923845}),
    "swiglu_mlp": (305.8648535572128, {"x": 160316.2189478303, "W1": 4709033.439006131, "W3": 4577679.086473168,
                                       "W2": 6104774.869564221}),
    "gqa_attention": (82.47256024517023, {"q": 63878.06500887683, "k": 27145.34469045972, "v": 29896.207740717593}),
    "conv_bn_relu": (-1077.290640181777, {"x": 420563.2275572452, "w": 1311547.8825569986,
                                          "gamma": 4412.960170798126, "beta": 4367.00775001439}),
    "llama_block": (-53.64254556733465, {
        "x": 147897.90863705322, "n1": 2621.378278541242, "Wq": 365329.90990665305, "Wk": 369425.88403138146,
        "Wv": 440719.4604104187, "Wo": 440799.8588751792, "n2": 3917.952326219273, "W1": 1194509.8509047495,
        "W3": 1150333.479801027, "W2": 1916922.4056425996}),
}


def test_model_programs_agree_with_pytorch_float64():
    for name, (loss, grads) in TORCH_F64.items():
        prog = find(name)
        inp = prog.inputs(np.random.default_rng(0))
        for col in ("tg eager", "tg compiled"):
            for _ in range(2):                              # the second call too: a cached program
                out = [np.asarray(o.detach().numpy(), np.float64) for o in survey.setup(prog, col, inp)()]
            assert abs(out[0] - loss) <= 2e-3 * max(1.0, abs(loss)) + 0.05, (name, col, out[0], loss)
            for k, g in zip(prog.grads, out[1:]):
                assert abs(np.abs(g).sum() - grads[k]) <= 1e-3 * grads[k], (name, col, k)


def test_cpu_time_asks_openmp_threads_to_sleep(monkeypatch, capsys):
    # spinning OpenMP workers (numba's floor copy, torch) count as CPU time of the column timed next
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    assert survey.main(["--cpu", "--quick", "--repeats", "1", "--programs", "one_element",
                        "--skip", "torch eager,torch.compile,jax.jit"]) == 0
    assert survey.os.environ["OMP_WAIT_POLICY"] == "PASSIVE"
    assert "one_element" in capsys.readouterr().out
