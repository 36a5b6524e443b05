"""Silent wrong answers the 10,000-program fuzz run found (issue 8), kept as regression tests.

Each test states the rule: compiled equals eager, or refuses with a clear TraceError. (The generated
cases of these classes are in test_trace_layout_alias_rng.py.)"""
import numpy as np
import tracegrad as tg
from tracegrad.tensor import TraceError


def _agree(f, make_args):
    want = f(*make_args()).detach().numpy()
    for backend in ("interpret", "llvm"):
        try:
            got = tg.compile(f, backend=backend)(*make_args())
        except TraceError:
            continue                    # a clear refusal is allowed; a different value is not
        np.testing.assert_array_equal(got.detach().numpy(), want, err_msg=backend)


def test_contiguous_of_a_contiguous_input_aliases_it():
    def f(x):
        v = x.contiguous().view(2, 2)
        x.mul_(2.0)
        return v * 1.0
    _agree(f, lambda: (tg.tensor([0., 1., 2., 3.]),))


def test_view_of_a_detached_alias_sees_an_update_of_its_source():
    def f(x0, x1):
        v = x1.reshape(2, 2)
        with tg.no_grad():
            x0.mul_(2.0)
        return v * 1.0

    def args():
        a = tg.tensor([0., 1., 2., 3.], requires_grad=True)
        return a, a.detach()
    _agree(f, args)
