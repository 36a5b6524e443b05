"""Which maps over one space share a kernel (ir/passes/merge.py merge_rows): those that read what
another makes or a buffer another reads; unrelated ones (one optimizer update per parameter) stay
apart, and the LLVM module compiles their identical bodies once. Values against NumPy float64."""
import re

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import tracegrad as tg

RNG = np.random.default_rng(0)


def kernel_lines(fn, *arrays):
    ts = [tg.tensor(a) for a in arrays]
    return [line for line in tg.compile(fn).ir(*ts, stage="kernels").splitlines() if re.match(r"\s+k\d+ ", line)]


def test_unrelated_maps_stay_apart_and_related_ones_merge():
    a, b = RNG.standard_normal((2, 64, 48)).astype(np.float32)
    assert len(kernel_lines(lambda a, b: (a * 2, b * 3), a, b)) == 2
    assert len(kernel_lines(lambda a, b: (a * 2, (a + b) * 3), a, b)) == 1        # both read a
    assert len(kernel_lines(lambda a, b: (a.exp(), b * a.exp().sum(1, keepdim=True)), a, b)) == 1   # rows


def test_one_update_per_parameter_compiles_one_body():
    params = [tg.tensor(RNG.standard_normal((16, 16)).astype(np.float32), requires_grad=True) for _ in range(5)]
    opt = tg.optim.Adam(params, lr=1e-2)
    x = tg.tensor(RNG.standard_normal((4, 16)).astype(np.float32))

    def step(x):
        h = x
        for p in params:
            h = (h @ p).tanh()
        h.sum().backward()
        opt.step()
        opt.zero_grad()

    f = tg.compile(step)
    updates = [ln for ln in f.ir(x, stage="kernels").splitlines() if "space=16x16" in ln and "sqrt" in ln]
    assert len(updates) == 5, updates
    bodies = re.findall(r"define internal void @(\w+_body)\(", f.ir(x, stage="llvm"))
    assert len(bodies) < len(set(re.findall(r"k\d+", " ".join(updates)))) + 3, bodies

    ref = [p.detach().numpy().astype(np.float64) for p in params]
    f(x)
    eager_params = [tg.tensor(r.astype(np.float32), requires_grad=True) for r in ref]
    eager_opt = tg.optim.Adam(eager_params, lr=1e-2)
    h = x
    for p in eager_params:
        h = (h @ p).tanh()
    h.sum().backward()
    eager_opt.step()
    for p, q in zip(params, eager_params):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-5, atol=1e-6)


@settings(max_examples=25, deadline=None)
@given(reads=st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=3), min_size=2, max_size=5),
       shape=st.sampled_from([(7, 5), (33,), (3, 4, 9)]))
def test_maps_over_one_space_match_numpy(reads, shape):
    """Outputs over one space reading random subsets of four inputs: no kernel spans two groups of
    outputs that share no input (at least one kernel per such group), and every value matches NumPy."""
    xs = [RNG.standard_normal(shape) for _ in range(4)]

    def fn(*ts):
        return tuple(sum((ts[i] * (j + 1.5)).sin() for j, i in enumerate(r)) for r in reads)

    got = tg.compile(fn)(*[tg.tensor(x) for x in xs])
    for r, g in zip(reads, got):
        want = sum(np.sin(xs[i] * (j + 1.5)) for j, i in enumerate(r))
        np.testing.assert_allclose(g.numpy(), want, rtol=1e-12, atol=1e-12)
    group = list(range(4))                  # union-find over the inputs, joined through each output's reads

    def root(i):
        while group[i] != i:
            i = group[i]
        return i
    for r in reads:
        for i in r[1:]:
            group[root(i)] = root(r[0])
    components = {root(r[0]) for r in reads}
    assert len(components) <= len(kernel_lines(fn, *xs)) <= len(reads)
