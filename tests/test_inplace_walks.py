"""An input updated in place inside a row kernel whose phases run in walks (Schedule.walks: a later
phase may run in an earlier walk over the row). Writing the update straight into the input's
memory (lowering/slots.py inplace_slots) is safe only if every phase that reads the input runs
before the write in the order the phases actually run; fuzzing found log_softmax(x) followed by
x.data.mul_(0.5) returning the log_softmax of the halved x. Generated programs: a row computation
of x (and w), then an in-place update of x, compiled (llvm) against eager, values and gradients.

Oracle: eager tracegrad on copies of the same inputs."""
import os

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import tracegrad as tg
import tracegrad.nn.functional as F

EXAMPLES = int(os.environ.get("TRACEGRAD_HYPOTHESIS_EXAMPLES", "12"))

ROWS = {
    "log_softmax": lambda x, w: F.log_softmax(x, -1),
    "softmax": lambda x, w: F.softmax(x, -1) * w,
    "center": lambda x, w: x - x.mean(dim=-1, keepdim=True),
    "norm": lambda x, w: (x - x.mean(dim=-1, keepdim=True)) / (x.var(dim=-1, keepdim=True) + 1e-3).sqrt() * w,
    "sums": lambda x, w: x * x.sum(dim=-1, keepdim=True) + (x * w).sum(dim=-1, keepdim=True),
}
UPDATES = {
    "data.mul_": lambda x, w: x.data.mul_(0.5),
    "no_grad add_": lambda x, w: _no_grad(lambda: x.add_(w.detach() * 0.25)),
    "data.copy_": lambda x, w: x.data.copy_(x.data.exp() * 0.5),
}


def _no_grad(fn):
    with tg.no_grad():
        fn()


def program(row, update, before):
    def f(x, w):
        if before:
            y = ROWS[row](x, w)
            UPDATES[update](x, w)
            return y
        UPDATES[update](x, w)
        return ROWS[row](x, w)
    return f


def leaves(shape, seed):
    rng = np.random.default_rng(seed)
    x = tg.tensor(rng.standard_normal(shape).astype(np.float32), requires_grad=True)
    w = tg.tensor(rng.standard_normal(shape[-1:]).astype(np.float32), requires_grad=True)
    return x, w


def outcome(fn, shape, seed, calls=2):
    """Per call: the result, x after the call, the gradients of x and w; or the error's type where
    the call or its backward raises (eager's in-place error when the update hits a saved x)."""
    x, w = leaves(shape, seed)
    out = []
    for _ in range(calls):
        try:
            y = fn(x, w)
            y.sum().backward()
        except RuntimeError as e:
            out.append([type(e).__name__])
            continue
        out.append([y.detach().numpy().copy(), x.detach().numpy().copy()] +
                   [np.zeros(0) if t.grad is None else t.grad.numpy().copy() for t in (x, w)])
    return out


def assert_same(expected, got):
    for e_call, g_call in zip(expected, got):
        assert len(e_call) == len(g_call), (e_call, g_call)
        for e, g in zip(e_call, g_call):
            if isinstance(e, str):
                assert e == g
            else:
                np.testing.assert_allclose(g, e, rtol=2e-4, atol=2e-5)


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.sampled_from(sorted(ROWS)), st.sampled_from(sorted(UPDATES)), st.booleans(),
       st.tuples(st.integers(1, 19), st.integers(1, 9)), st.integers(0, 2 ** 16))
def test_inplace_update_after_row_computation(row, update, before, shape, seed):
    f = program(row, update, before)
    expected = outcome(f, shape, seed)
    assert_same(expected, outcome(tg.compile(f, backend="llvm"), shape, seed))


def test_the_fuzz_repro_runs_a_later_phase_in_an_earlier_walk():
    """The case fuzzing found: its kernel has walks that put the update's phase first, and the
    result is still eager's."""
    f = program("log_softmax", "data.mul_", True)
    x, w = leaves((17, 3), 0)
    assert "walks=" in tg.compile(f).ir(x, w, stage="kernels")
    assert_same(outcome(f, (17, 3), 0), outcome(tg.compile(f), (17, 3), 0))
