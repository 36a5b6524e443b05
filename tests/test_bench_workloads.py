"""The reference workloads' definitions (W7, W8), the per-output tolerance check, the third-call
check and the load measure."""
import numpy as np

from tracegrad.bench import bench_workload, check, third_call
from tracegrad.bench.load import BUSY, Load
from tracegrad.bench.workload_base import _np
from tracegrad.bench.workloads import WORKLOADS, find


def _errors(w, col):
    inp = w.inputs()
    refs = w.reference(inp)
    outs = [_np(o) for o in w.columns[col](inp)()]
    return check(outs, refs, w.tolerances)


def test_the_workloads_with_ids_and_names():
    assert [w.id for w in WORKLOADS] == ["W1", "W2", "W3", "W4", "W5", "W6", "W7", "W8", "W9", "W10", "W11", "W12",
                                         "W13"]
    assert find("lenet").id == "W9" and find("w10").name == "cifar_cnn_train_step"
    assert find("gpt").id == "W12" and find("w13").name == "adam_multi_tensor"
    assert find("column_center").id == "W7" and find("w8").name == "mlp_deep_narrow_adam"
    assert [w.id for w in WORKLOADS if w.traffic] == ["W1", "W2", "W3", "W7"]


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


def test_cnn_steps_match_the_float64_reference_and_update():
    """W9 (LeNet) and W10 (CIFAR-style CNN with batch norms): the NumPy-by-hand step, tg eager and (W9) tg
    compiled against the float64 reference, checked through the gradients their SGD updates imply."""
    for wid, cols in (("W9", ("numpy", "tg eager", "tg compiled")), ("W10", ("tg eager",))):
        w = find(wid)
        inp = w.inputs()
        refs = w.implied(inp, w.reference(inp))
        assert len(refs) == 1 + (2 * 5 if wid == "W9" else 3 * 3 + 2) and np.abs(refs[1]).max() > 0
        for col in cols:
            err, failure = check(w.implied(inp, [_np(o) for o in w.columns[col](inp)()]), refs, w.tolerances)
            assert failure is None, (wid, col, failure)


def test_w11_lstm_hand_written_backward_matches_tracegrad_autograd():
    w = find("lstm")
    assert w.id == "W11" and w.name == "lstm_train_step" and len(w.inputs()) == 2 + 10
    inp = w.inputs()
    refs = w.implied(inp, w.reference(inp))          # gradients from the NumPy backward through time
    outs = w.implied(inp, [_np(o) for o in w.columns["tg eager"](inp)()])
    err, failure = check(outs, refs)                 # against tracegrad's autograd, in float32
    assert failure is None and err > 0, failure


def test_check_names_each_output_over_its_tolerance():
    refs = [np.array(1.0), np.ones(3)]
    outs = [np.array(1.0 + 3e-5), np.ones(3)]
    err, failure = check(outs, refs, (1e-5, 1e-4))
    assert abs(err - 3e-5) < 1e-9 and "output 0: 3.00e-05 > 1e-05" in failure
    assert check(outs, refs)[1] is None                        # the default tolerance, 1e-3


def test_the_third_call_is_checked_as_well_as_the_first():
    """A column whose later calls go wrong fails the run, though its first call is right."""
    w = find("W6")
    calls = []
    good = w.columns["tg eager"]

    def drifting(inp):
        run = good(inp)

        def wrong_later():
            calls.append(1)
            outs = run()
            return outs if len(calls) == 1 else [_np(o) * 1.01 for o in outs]
        return wrong_later
    w.columns["drifting"] = drifting
    try:
        res, _ = bench_workload(w, ["numpy", "tg eager", "drifting"], 1, 0.001)
    finally:
        del w.columns["drifting"]
    assert res["tg eager"].failure is None and res["tg eager"].later_error < 1e-5
    assert res["drifting"].error < 1e-4 and res["drifting"].failure.startswith("the third call's result differs")


def test_a_training_steps_third_call_is_its_update():
    w = find("W4")
    inp = w.inputs()
    run = w.columns["tg eager"](inp)
    run()
    loss, *deltas = third_call(run, True)
    assert np.ndim(loss) == 0 and all(0 < np.abs(d).max() < 1e-2 for d in deltas)   # lr 0.01 times a gradient


def test_load_sees_another_process():
    import subprocess
    import sys
    spin = subprocess.Popen([sys.executable, "-c", "import time\nt = time.time()\nwhile time.time() - t < 3: pass"])
    try:
        with Load() as load:
            spin.wait()
    finally:
        spin.kill()
    assert load.others is not None and load.others > BUSY / 2 and "not meaningful" in load.note()


def test_w12_transformer_numpy_backward_matches_tracegrads_autograd():
    """The hand-written NumPy backward of the GPT step against tracegrad's autograd, both in float64, over two
    steps (the second after an Adam update): the NumPy erf is good to ~1e-7, so that bounds the match."""
    from tracegrad.bench import transformer as gpt
    inp = {k: v.astype(np.float64) if v.dtype.kind == "f" else v for k, v in gpt.inputs().items()}
    ref, got = gpt.numpy_step(inp), gpt.tg_step(inp, compiled=False)
    for tol in (1e-6, 1e-4):
        want, have = ref(), [_np(o) for o in got()]
        err, failure = check(have, [np.asarray(w) for w in want], [tol] * len(want))
        assert failure is None, failure


def test_w13_adam_update_matches_numpy_for_three_steps():
    w = find("W13")
    inp = w.inputs()
    want, have = w.columns["numpy"](inp), w.columns["tg eager"](inp)
    for _ in range(3):
        err, failure = check([_np(o) for o in have()], [np.asarray(a, np.float64) for a in want()], [1e-6] * 60)
        assert failure is None, failure
