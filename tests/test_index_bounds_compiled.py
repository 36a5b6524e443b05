"""Integer-tensor indexing out of range under a compiled function, static and symbolic: at every size
the compiled call raises what eager raises (same type, the message naming the index, the dimension and
its size) or gives eager's values — whether the gather's result is used, unused, or empty (an index into
an empty dimension beside it), and whether a shape error follows it in the program."""
import re
import warnings

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tracegrad as tg

SETTINGS = settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
SIZE = st.sampled_from([0, 1, 2, 3, 5])
INDEX = st.lists(st.integers(-6, 6), min_size=1, max_size=4)


def _run(f, *args):
    """The outputs and x's gradient as arrays, or (error type, message without the tracing suffix)."""
    x = tg.tensor(args[0], requires_grad=True)
    try:
        out = f(x, *(tg.tensor(a) for a in args[1:]))
        (out * 2.0).sum().backward()
    except (IndexError, RuntimeError, ValueError) as e:
        return type(e), re.sub(r" \(while tracing .*\)$", "", str(e).splitlines()[0])
    return out.detach().numpy(), (x.grad.numpy() if x.grad is not None else None)


def agree(fn, calls, which_index=True):
    """fn compiled with dynamic=True, with the default and with dynamic=False == eager at each call
    (`which_index` False: an error may name another index out of range than eager's first, as the
    kernel's check of an index passed in does at a call that does not trace)."""
    compiled = [tg.compile(fn, dynamic=d) for d in (True, None, False)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for args in calls:
            want = _run(fn, *args)
            for f in compiled:
                got = _run(f, *args)
                if isinstance(want[0], type):
                    if not which_index and isinstance(got[0], type):
                        got, want = [(e, re.sub(r"index -?\d+ ", "index i ", m)) for e, m in (got, want)]
                    assert isinstance(got[0], type) and got == want, ([np.shape(a) for a in args], got, want)
                    continue
                assert not isinstance(got[0], type), ([np.shape(a) for a in args], got, want)
                np.testing.assert_allclose(got[0], want[0])
                if want[1] is not None:
                    np.testing.assert_allclose(got[1], want[1])


def _x(*shape):
    return np.arange(float(np.prod(shape))).reshape(shape) + 1.0


@SETTINGS
@given(ns=st.lists(SIZE, min_size=3, max_size=6), idx=INDEX)
def test_a_constant_index_raises_where_eager_raises(ns, idx):
    """x[tensor(idx)] on a first dimension that takes 0, 1 and larger sizes along the sequence."""
    agree(lambda x: x[tg.tensor(idx)] * 3.0, [(_x(n, 2),) for n in ns])


@SETTINGS
@given(ns=st.lists(SIZE, min_size=3, max_size=6), idx=INDEX)
def test_an_unused_gather_still_checks_its_indices(ns, idx):
    """The gather's result is dead code: eager still raises for an index out of range."""
    def f(x):
        x[tg.tensor(idx)]
        return x * 2.0
    agree(f, [(_x(n),) for n in ns])


@SETTINGS
@given(ns=st.lists(SIZE, min_size=3, max_size=6), ms=st.lists(SIZE, min_size=3, max_size=6), idx=INDEX)
def test_an_index_beside_an_empty_dimension_is_checked(ns, ms, idx):
    """x[:, tensor(idx)] where x's first dimension may be empty: the result is empty, no kernel reads
    the index, yet eager raises for one out of range of the second dimension."""
    agree(lambda x: x[:, tg.tensor(idx)] + 1.0, [(_x(n, m),) for n, m in zip(ns, ms)])


@SETTINGS
@given(ns=st.lists(SIZE, min_size=3, max_size=6), k=st.integers(-3, 3))
def test_picks_per_row_with_an_arange(ns, k):
    """x[arange(n), tensor([k] * n)]: the arange is known (an iota), the picks a constant."""
    agree(lambda x: x[tg.arange(x.shape[0]), tg.tensor([k] * 3)], [(_x(n, 3),) for n in ns if n in (0, 3)] +
          [(_x(3, m),) for m in ns])


@SETTINGS
@given(ns=st.lists(SIZE, min_size=3, max_size=6), idx=INDEX)
def test_the_index_error_comes_before_a_later_shape_error(ns, idx):
    """Eager raises the first error of the program: an index out of range before the shape mismatch
    after it (was: the compiled call raised the shape error, found while tracing, before any kernel ran)."""
    def f(x, y):
        v = x[tg.tensor(idx)]
        return v + y
    agree(f, [(_x(n), _x(len(idx) if n % 2 else n + 1)) for n in ns])


@SETTINGS
@given(ns=st.lists(SIZE, min_size=3, max_size=6), i=st.integers(-6, 6))
def test_a_python_int_index_raises_where_eager_raises(ns, i):
    agree(lambda x: x[i] * 2.0, [(_x(n, 2),) for n in ns])


@SETTINGS
@given(ns=st.lists(SIZE, min_size=3, max_size=6), idx=INDEX)
def test_an_index_passed_in_raises_before_a_later_shape_error(ns, idx):
    """The index is an argument: at a call that traces (a new size), its values are checked while tracing,
    so an index out of range comes before the shape error after it, as eagerly."""
    def f(x, i, y):
        return x[i] + y
    agree(f, [(_x(n), np.array(idx), _x(len(idx) if n % 2 else n + 1)) for n in ns], which_index=False)
