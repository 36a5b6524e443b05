"""Per-column values computed once per call (backends/cpu/hoist.py): a kernel walked row by row that reads
costly values constant along its rows (log(s_j) of a log-softmax over dim 0, a column norm, a
channels-last normalization's 1 / sqrt(var_c + eps)) reads them from a stack array filled before the
rows. Which subtrees are hoisted, and compiled == NumPy (float64 oracle) == interpret, with
gradients, on permuted and strided views of odd sizes, float32 and float64."""
from unittest import mock

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tracegrad as tg
from tracegrad.backends.cpu import hoist, llvm
from tracegrad.ir.kernels import Op, postorder

RNG = np.random.default_rng(11)


def plans(fn, *arrays):
    """The ops of every tree hoisted while compiling fn's forward and backward for `arrays`."""
    got = []

    def spy(kernel, k):
        out, plan = hoist.hoisted(kernel, k)
        if plan:
            got.append({t.op for _, tree in plan for t in postorder(tree) if isinstance(t, Op)})
        return out, plan
    with mock.patch.object(llvm, "hoisted", spy):
        xs = [tg.tensor(a, requires_grad=True) for a in arrays]
        tg.compile(fn)(*xs).backward()
    return got


def test_a_log_of_column_sums_is_computed_once_per_column():
    x = RNG.standard_normal((40, 30)).astype(np.float32)
    got = plans(lambda x: (x.log_softmax(dim=0) * 1.5).sum(), x)
    assert any("log" in ops for ops in got), got


def test_few_rows_or_cheap_column_terms_are_not_hoisted():
    x = RNG.standard_normal((hoist.HOIST_ROWS - 1, 30)).astype(np.float32)
    assert plans(lambda x: (x.log_softmax(dim=0) * 1.5).sum(), x) == []
    y = RNG.standard_normal((40, 30)).astype(np.float32)
    assert plans(lambda x: (x * x.sum(0)).sum(), y) == []       # column sums read as they are: cheap


PROGRAMS = {
    "log_softmax0": (lambda x: x.log_softmax(dim=0), lambda x: x - x.max(0) - np.log(np.exp(x - x.max(0)).sum(0))),
    "colnorm": (lambda x: x / (x * x).sum(0, keepdim=True).sqrt(), lambda x: x / np.sqrt((x * x).sum(0))),
    "channels_last": (lambda x: (x - x.mean(0, keepdim=True)) / (x.var(0, keepdim=True) + 1e-5).sqrt(),
                      lambda x: (x - x.mean(0)) / np.sqrt(x.var(0, ddof=1) + 1e-5)),
}


@st.composite
def cases(draw):
    n, m = draw(st.sampled_from([8, 9, 33])), draw(st.sampled_from([2, 3, 17, 33]))
    return (draw(st.sampled_from(sorted(PROGRAMS))), n, m, draw(st.booleans()), draw(st.sampled_from([1, 2])),
            draw(st.sampled_from([np.float32, np.float64])))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_hoisted_column_values_match_numpy_and_interpret(case):
    name, n, m, transposed, step, dtype = case
    fn, ref = PROGRAMS[name]
    shape = (m, n * step) if transposed else (n, m * step)
    x = (RNG.standard_normal(shape) + 0.5).astype(dtype)
    g = RNG.standard_normal((n, m)).astype(dtype)

    def view(a):
        return a[:, ::step].T if transposed else a[:, ::step]

    def loss(x, g):
        return (fn(view(x)) * g).sum()

    xv = view(x).astype(np.float64)
    results = []
    for backend in ("llvm", "interpret"):
        xs = tg.tensor(x, requires_grad=True)
        out = tg.compile(loss, backend=backend)(xs, tg.tensor(g))
        out.backward()
        results.append((out.detach().numpy(), xs.grad.numpy()))
    expect = (ref(xv) * g).sum()
    h, grad = 1e-6, np.zeros_like(xv)                 # central differences in float64
    for i in range(n):
        for j in range(m):
            e = np.zeros_like(xv)
            e[i, j] = h
            grad[i, j] = ((ref(xv + e) * g).sum() - (ref(xv - e) * g).sum()) / (2 * h)
    full = np.zeros(shape)
    if transposed:
        full[:, ::step] = grad.T
    else:
        full[:, ::step] = grad
    tol = 2e-3 if dtype == np.float32 else 1e-6
    np.testing.assert_allclose(results[0][0], expect, rtol=tol, atol=tol * n * m ** 0.5, err_msg=str(case))
    np.testing.assert_allclose(results[0][1], full, rtol=0, atol=tol * max(1.0, np.abs(full).max()), err_msg=str(case))
    for got, want in zip(results[0], results[1]):
        np.testing.assert_allclose(got, want, rtol=1e-5 if dtype == np.float32 else 1e-12,
                                   atol=(1e-5 if dtype == np.float32 else 1e-12) * max(1.0, np.abs(want).max()) * n,
                                   err_msg=str(case))
