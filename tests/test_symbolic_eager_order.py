"""Defects the sizes fuzz found (issue 26), each as a class over generated cases, compiled code against eager:
- data-dependent indices (labels, a `where` of them) raise eager's IndexError in eager's program order,
  at the trace (before a later shape error) and at calls that do not trace (an unused or empty gather);
- a mean over an empty batch and a pad of an empty batch are NaN / empty as eagerly, with no guard on the
  batch (one trace for every size, 0 included);
- the fuzzer's comparison: a float32 overflow inside a sum (a BLAS product) may give NaN or ±inf by the
  order the kernel adds in, so those agree only where the float64 run's value lies beyond float32's range."""
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tracegrad as tg
from tracegrad.fuzz.compare import compare_values

F = tg.nn.functional
SETTINGS = settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))


def _outcome(fn, *args):
    """('ok', arrays) or (error type, message)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = fn(*args)
    except (IndexError, RuntimeError, ValueError) as e:
        return type(e), str(e).splitlines()[0].split(" (while tracing")[0]
    outs = out if isinstance(out, tuple) else (out,)
    return "ok", [o.detach().numpy() for o in outs]


def _same(got, want):
    assert got[0] == want[0], (got, want)
    if got[0] != "ok":
        assert got[1] == want[1], (got, want)
        return
    for g, w in zip(got[1], want[1]):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6, equal_nan=True)


def _compiled(fn):
    return [tg.compile(fn, backend=b, dynamic=d) for b in ("llvm", "interpret") for d in (None, True)]


@SETTINGS
@given(n=st.integers(1, 5), classes=st.integers(2, 4), bad=st.booleans(), shape_error=st.booleans(),
       data=st.data())
def test_label_errors_come_before_later_shape_errors(n, classes, bad, shape_error, data):
    """cross_entropy's labels pass through a `where` (ignore_index) before the gather: an out-of-range label
    raises eager's IndexError before a shape error further on, in every compiled mode."""
    labels = data.draw(st.lists(st.integers(0, classes - 1), min_size=n, max_size=n))
    if bad:
        labels[data.draw(st.integers(0, n - 1))] = classes + data.draw(st.integers(0, 3))

    def f(x, t, y):
        loss = F.cross_entropy(x, t, reduction="none")
        return loss + y                   # y of another length: a shape error after the gather

    x = tg.tensor(np.random.default_rng(n).standard_normal((n, classes)))
    y = tg.ones(n + 1 if shape_error else n)
    want = _outcome(f, x, tg.tensor(labels), y)
    for c in _compiled(f):
        _same(_outcome(c, x, tg.tensor(labels), y), want)


@SETTINGS
@given(rows=st.lists(st.sampled_from([0, 1, 2, 4]), min_size=3, max_size=5),
       picks=st.lists(st.lists(st.integers(-6, 6), min_size=1, max_size=3), min_size=3, max_size=5))
def test_unused_and_empty_gathers_check_their_indices_at_every_call(rows, picks):
    """An unused gather (dead code), and one whose result is empty (0 rows beside the index), of indices
    passed in: the compiled calls raise eager's IndexError at every call, traced or not."""
    def unused(x, t):
        x[t]
        return x * 2.0

    def empty(x, t):
        return x[:, t].sum(0) + 1.0

    def computed(x, t):                    # the index computed from the input: clamped below only
        return (x.T[tg.where(t < -3, 0, t)] * 0.0).sum() + x.sum()

    for fn in (unused, empty, computed):
        compiled = _compiled(fn)
        for n, idx in zip(rows, picks):
            x, t = tg.tensor(np.ones((n, 3))), tg.tensor(idx)
            want = _outcome(fn, x, t)
            for c in compiled:
                _same(_outcome(c, x, t), want)


@SETTINGS
@given(sizes=st.lists(st.sampled_from([0, 1, 2, 3, 7]), min_size=3, max_size=6))
def test_an_empty_batch_takes_no_guard_in_mean_and_pad(sizes):
    """mean over the batch (NaN where it is empty, as eagerly), mse_loss, and a pad of the feature axis:
    compiled with dynamic=True, one trace serves every batch size, 0 included, with no guard on it."""
    fns = [lambda x: x.mean(0), lambda x: x.mean(), lambda x: F.mse_loss(x, x * 0.5),
           lambda x: F.pad(x, (1, 2), value=3.0), lambda x: F.pad(x, (0, 0, 1, 1))]
    for fn in fns:
        c = tg.compile(fn, backend="llvm", dynamic=True)
        for b in [5, *sizes]:
            x = tg.tensor(np.arange(b * 4, dtype=np.float32).reshape(b, 4))
            _same(_outcome(c, x), _outcome(fn, x))
        stats = c.stats()
        assert stats["traces"] == 1, stats["retrace_reasons"]
        assert not [g for d in stats["dynamic"] for g in d["guards"] if "B" in g], stats["dynamic"]


@pytest.mark.parametrize("e,c,r,agrees", [
    (np.nan, np.inf, 1e42, True),       # the float64 value overflows float32: any NaN or inf
    (np.nan, -np.inf, -1e39, True),
    (np.inf, np.nan, 1e300, True),
    (np.nan, np.inf, 1.0, False),       # a representable value: the same NaN or inf as eager
    (np.nan, np.inf, np.nan, False),    # NaN in float64 too: no overflow, NaN semantics
    (np.inf, -np.inf, np.inf, False),
    (np.nan, 3.0e38, 1e42, False),      # a finite value where eager overflowed
])
def test_overflowed_values_agree_only_where_float64_overflowed(e, c, r, agrees):
    got = compare_values(np.array([e], np.float32), np.array([c], np.float32), np.array([r]), "float32")
    assert (got is None) == agrees, got


@SETTINGS
@given(m=st.integers(1, 6), k=st.integers(2, 40), n=st.integers(1, 6), seed=st.integers(0, 99))
def test_an_overflowing_product_agrees_with_eager_under_the_fuzz_rule(m, k, n, seed):
    """x @ w and a linear layer with float32 products beyond float32's range (NaN, -inf or +inf by the BLAS
    kernel's order): compiled agrees with eager by the fuzzer's rule (compare_values, the float64 run as
    the reference), and exactly where nothing overflows."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((m, k)) * 1e20).astype(np.float32)
    w = (rng.standard_normal((n, k)) * 1e20).astype(np.float32)
    x[rng.random((m, k)) < 0.3] = 0.5
    for fn in (lambda a, b: a @ b.T, lambda a, b: F.linear(a, b, b[:, 0] * 0 + 1)):
        with np.errstate(all="ignore"):
            want = fn(tg.tensor(x), tg.tensor(w)).numpy()
            ref = fn(tg.tensor(x.astype(np.float64)), tg.tensor(w.astype(np.float64))).numpy()
            got = tg.compile(fn, backend="llvm")(tg.tensor(x), tg.tensor(w)).numpy()
        assert compare_values(want, got, ref, "float32") is None


@SETTINGS
@given(rows=st.lists(st.sampled_from([0, 1, 2, 3, 6]), min_size=3, max_size=5))
def test_jvp_of_a_compiled_function_making_an_arange_of_a_symbolic_size(rows):
    """tg.jvp of a compiled function whose cross_entropy makes arange(B) (an iota of symbolic length under
    forward mode): values and tangents as eager's, and no symbolic compile lost (was: AttributeError
    'Forward' object has no attribute 'iota', a warning and a compile per size)."""
    def f(x, t, y):
        return F.cross_entropy(x, t, reduction="none") * 2.0 + y.sum()

    compiled = [tg.compile(f, backend="llvm", dynamic=True), tg.compile(f, backend="llvm")]
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)        # a lost symbolic compile warns
        for n in [4, *rows]:
            rng = np.random.default_rng(n)
            args = (tg.tensor(rng.standard_normal((n, 3))), tg.tensor(rng.integers(0, 3, n)), tg.tensor(np.ones(2)))
            tangents = (tg.tensor(rng.standard_normal((n, 3))), tg.zeros(n, dtype=tg.int64), tg.tensor(np.ones(2)))
            want = tg.jvp(f, args, tangents)
            for c in compiled:
                for g, w in zip(tg.jvp(c, args, tangents), want):
                    np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-9, atol=1e-9)


@SETTINGS
@given(sizes=st.lists(st.sampled_from([0, 1, 2, 5]), min_size=2, max_size=5), dtype=st.sampled_from(["float32", "float64"]))
def test_a_mean_count_is_no_zero_constant_of_a_partial_backward(sizes, dtype):
    """A mean's count is a symbolic constant of the trace; a backward for some cotangents only (the first of
    two results), first built at a later size, must not take it for a literal 0 because the trace's size was 0
    (was: the gradient at the next sizes read uninitialized memory, 300 -> 0 -> 1 in fuzz --sizes seed 26 #515)."""
    def f(x):
        v = (x * 3.0).cumsum(-1)
        return v.sum(-1), v.tanh().mean()

    for c in (tg.compile(f, backend="llvm"), tg.compile(f, backend="llvm", dynamic=True)):
        for n in [6, 0, 1, *sizes]:
            x, xe = (tg.tensor(np.linspace(-1, 1, 2 * n).reshape(2, n), dtype=getattr(tg, dtype), requires_grad=True)
                     for _ in range(2))
            for _ in range(2):
                out, want = c(x), f(xe)
                if n == 0:              # no backward at the empty size: the next size builds it
                    break
                out[0].sum().backward()
                want[0].sum().backward()
                np.testing.assert_allclose(x.grad.numpy(), xe.grad.numpy(), rtol=1e-6)
                x.grad = xe.grad = None
