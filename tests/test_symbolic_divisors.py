"""Divisions by a count over symbolic sizes: var/std divide by max(N - correction, 0), which PyTorch (and
NumPy's ddof) compute for every N, so an empty or one-row batch gives inf/nan, not a retrace: compiled with
dynamic=True, one trace over sizes with 0 and 1 and no guard on the count, values == NumPy's var and
gradients == eager's at each size. Running statistics (n / (n - 1)) keep their count symbolic too, and
a test of the form x.shape == y.shape between kernel spaces (a reduction's keepdims, a column walk) no
longer records a guard between unrelated sizes (T != 1, T != B)."""
import warnings

import numpy as np
import pytest

import tracegrad as tg
import tracegrad.nn.functional as F

CORRECTIONS = [{}, {"unbiased": False}, {"correction": 2}, {"correction": 0.5}]


def _np_var(a, axis, kw):
    ddof = kw.get("correction", 0 if kw.get("unbiased") is False else 1)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.var(a, axis=axis, ddof=ddof)


def _call(f, a):
    x = tg.tensor(a, requires_grad=True)
    y = f(x)
    y.sum().backward()
    return y.detach().numpy(), x.grad.numpy()


@pytest.mark.parametrize("axis", [0, None])
def test_var_and_std_over_symbolic_counts_one_trace(axis):
    """Rows 5, 0, 1, 2, 7, 1 (and columns 4, 3, 1, 0, 2, 4 where every axis is reduced: a kept axis may be
    pinned by the CPU planner's by-rows schedule, a guard that names it)."""
    rng = np.random.default_rng(0)
    rows, cols = [5, 0, 1, 2, 7, 1], [4, 3, 1, 0, 2, 4] if axis is None else [4] * 6
    for kw, root in [(kw, False) for kw in CORRECTIONS] + [({}, True)]:
        fn = (lambda x: x.std(axis, **kw)) if root else (lambda x: x.var(axis, **kw))
        f = tg.compile(fn, dynamic=True)
        for b, t in zip(rows, cols):
            a = rng.standard_normal((b, t))
            got, grad = _call(f, a)
            want = _np_var(a, axis, kw)
            np.testing.assert_allclose(got, np.sqrt(want) if root else want, rtol=1e-12, atol=1e-12)
            with np.errstate(all="ignore"):
                np.testing.assert_allclose(grad, _call(fn, a)[1], rtol=1e-12, atol=1e-12)
        stats = f.stats()
        assert stats["traces"] == 1, (axis, kw, stats["retrace_reasons"])
        guards = [g for d in stats["dynamic"] for g in d["guards"]]
        assert all(g == "T == 4 (vectors over the kept axis compiled in)" for g in guards) and \
            (axis == 0 or not guards), guards            # none on the count


def test_var_of_an_empty_and_a_one_row_batch_is_nan_as_in_pytorch():
    """torch.var(torch.zeros(0, 3), 0) and torch.var(torch.ones(1, 3), 0): nan; correction=2 over 2 rows
    of (0, 1): 0.5 / 0 = inf. The same compiled after a trace at 5 rows, in the one trace."""
    for c, cases in [(1, [(np.zeros((0, 3)), np.nan), (np.ones((1, 3)), np.nan)]),
                     (2, [(np.array([[0.0] * 3, [1.0] * 3]), np.inf), (np.ones((1, 3)), np.nan)])]:
        f = tg.compile(lambda x: x.var(0, correction=c), dynamic=True)
        f(tg.tensor(np.ones((5, 3))))
        for rows, want in cases:
            np.testing.assert_array_equal(f(tg.tensor(rows)).numpy(), np.full(3, want))
            np.testing.assert_array_equal(tg.tensor(rows).var(0, correction=c).numpy(), np.full(3, want))
        assert f.stats()["traces"] == 1, f.stats()["retrace_reasons"]


def test_instance_norm_running_var_keeps_its_count_symbolic():
    """instance_norm's running_var takes var * n / (n - 1) over the spatial count n: symbolic, no pin (the
    guard n > 1 stays: eager raises below it)."""
    def step(x, rm, rv):
        return F.instance_norm(x, rm, rv)
    f = tg.compile(step, dynamic=True)
    rng = np.random.default_rng(3)
    for length in [5, 7, 2, 3, 9]:
        a = rng.standard_normal((2, 3, length)).astype(np.float32)
        state = [(tg.zeros(3), tg.ones(3)) for _ in range(2)]
        want = step(tg.tensor(a), *state[0]).numpy()
        np.testing.assert_allclose(f(tg.tensor(a), *state[1]).numpy(), want, rtol=1e-5, atol=1e-6)
        for e, c in zip(*state):
            np.testing.assert_allclose(c.numpy(), e.numpy(), rtol=1e-6)
    assert f.stats()["traces"] == 1, f.stats()["retrace_reasons"]


def test_shape_tests_between_kernel_spaces_record_no_guard():
    """A row statistic read back (logsumexp's shift, T == 1 tested against the reduced shape), a column
    statistic of a square batch (T == B): the passes compare shapes as expressions, so sizes 1 and B == T
    run the one trace; values == NumPy's."""
    fns = [(lambda x: x.logsumexp(1, keepdims=True),
            lambda a: np.log(np.exp(a - a.max(1, keepdims=True)).sum(1, keepdims=True)) + a.max(1, keepdims=True)),
           (lambda x: x - x.mean(0, keepdims=True), lambda a: a - a.mean(0, keepdims=True))]
    rng = np.random.default_rng(4)
    for fn, ref in fns:
        f = tg.compile(fn, dynamic=True)
        for shape in [(4, 3), (4, 1), (3, 3), (1, 5), (2, 2)]:
            a = rng.standard_normal(shape)
            np.testing.assert_allclose(f(tg.tensor(a)).numpy(), ref(a), rtol=1e-12, atol=1e-12)
        assert f.stats()["traces"] == 1, f.stats()["retrace_reasons"]
