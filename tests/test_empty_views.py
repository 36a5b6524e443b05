"""Views of arrays with empty and size-1 axes compile like eager code: integer (negative too) and
sliced indexing, permutes and reshapes, then a fused elementwise op, a host op (floordiv), a
matmul and reductions. The class: a view's loads carry the offset its index would have on a
non-empty array (x[-5] of a (17, 0) array reads at 12 of a 0-element buffer), which the
host kernels' NumPy views and the matmuls must never see.

Oracles: eager tracegrad (values and gradients) and NumPy indexing for the forward values."""
import os

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import tracegrad as tg

EXAMPLES = int(os.environ.get("TRACEGRAD_HYPOTHESIS_EXAMPLES", "12"))
SIZES = st.integers(0, 3)


@st.composite
def view_chains(draw):
    """(shape, [view steps]) where each step is ("index", dim, i), ("slice", dim, start, stop,
    step), ("permute", perm), ("expand", shape) or
    ("flatten",), valid for the shape it is applied to."""
    shape = tuple(draw(st.lists(SIZES, min_size=1, max_size=3)))
    cur, steps = list(shape), []
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["index", "slice", "slice", "permute", "flatten", "expand"]))
        if kind == "index" and any(cur):
            d = draw(st.sampled_from([d for d, n in enumerate(cur) if n]))
            steps.append(("index", d, draw(st.integers(-cur[d], cur[d] - 1))))
            del cur[d]
        elif kind == "slice" and cur:
            d = draw(st.integers(0, len(cur) - 1))
            n = cur[d]
            start, stop = draw(st.integers(-n - 2, n + 2)), draw(st.integers(-n - 2, n + 2))
            step = draw(st.sampled_from([1, 1, 2]))
            steps.append(("slice", d, start, stop, step))
            cur[d] = len(range(*slice(start, stop, step).indices(n)))
        elif kind == "permute" and len(cur) > 1:
            perm = draw(st.permutations(range(len(cur))))
            steps.append(("permute", tuple(perm)))
            cur = [cur[p] for p in perm]
        elif kind == "expand" and 1 in cur:
            to = tuple(n if n != 1 else draw(st.sampled_from([0, 1, 2])) for n in cur)
            steps.append(("expand", to))
            cur = list(to)
        elif kind == "flatten":
            steps.append(("flatten",))
            cur = [int(np.prod(cur))]
    return shape, steps


def apply(x, steps):
    """The view chain on a tracegrad tensor (traced or eager) or a NumPy array."""
    for s in steps:
        if s[0] == "index":
            x = x[(slice(None),) * s[1] + (s[2],)]
        elif s[0] == "slice":
            x = x[(slice(None),) * s[1] + (slice(*s[2:]),)]
        elif s[0] == "permute":
            x = x.transpose(s[1]) if isinstance(x, np.ndarray) else x.permute(*s[1])
        elif s[0] == "expand":
            x = np.broadcast_to(x, s[1]) if isinstance(x, np.ndarray) else x.expand(*s[1])
        else:
            x = x.reshape(-1)
    return x


def program(steps):
    def f(x, w):
        v = apply(x, steps)
        e = v * 1.5 - 0.25              # fused into a loop kernel
        h = v // 0.7                    # a host kernel on a strided view of x
        outs = [e, h, (e * v).sum()]
        if v.ndim:
            outs += [e.sum(dim=-1), (h * e).sum(dim=0)]      # a row reduction; one over a leading axis
        if v.ndim == 2:
            outs.append(v @ w[: v.shape[1]])       # a matmul reading the view
        return tuple(outs)
    return f


@pytest.mark.parametrize("backend", ["llvm", "interpret"])
@settings(max_examples=EXAMPLES, deadline=None)
@given(chain=view_chains(), seed=st.integers(0, 2**31 - 1))
@example(chain=((17, 0), [("index", 0, -5)]), seed=0)                       # the fuzzer's repro
@example(chain=((2, 3, 3), [("index", 0, -1), ("slice", 0, 3, None, 1), ("slice", 1, 3, None, 1)]), seed=0)
def test_views_of_empty_and_unit_axes_compile_like_eager(backend, chain, seed):
    shape, steps = chain
    rng = np.random.default_rng(seed)
    xa, wa = rng.standard_normal(shape), rng.standard_normal((4, 2))
    f = program(steps)
    runs = {}
    for mode in ("eager", backend):
        x, w = tg.tensor(xa, requires_grad=True), tg.tensor(wa, requires_grad=True)
        outs = (f if mode == "eager" else tg.compile(f, backend=mode))(x, w)
        diff = [o for o in outs if o.requires_grad]            # not floordiv's result
        cots = [tg.tensor(np.random.default_rng(k).standard_normal(o.shape)) for k, o in enumerate(diff)]
        grads = tg.grad(diff, [x, w], grad_outputs=cots, allow_unused=True)
        runs[mode] = ([o.detach().numpy() for o in outs],
                      [np.zeros_like(a) if g is None else g.numpy() for g, a in zip(grads, (xa, wa))])
    np.testing.assert_array_equal(runs["eager"][0][0], apply(xa, steps) * 1.5 - 0.25)
    for got, want in zip(runs[backend][0] + runs[backend][1], runs["eager"][0] + runs["eager"][1]):
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("backend", ["llvm", "interpret"])
def test_negative_index_of_an_empty_axis_then_a_host_op(backend):
    """The fuzzer's repro: x[-5] of a (17, 0) array, then floordiv (a host kernel)."""
    x = tg.tensor(np.zeros((17, 0)), requires_grad=True)
    y, z = tg.compile(lambda x: (x[-5] // 0.7, x[-5].exp()), backend=backend)(x)
    assert y.shape == z.shape == (0,)
    (g,) = tg.grad([z.sum()], [x])
    assert g.shape == (17, 0)


@settings(max_examples=EXAMPLES, deadline=None)
@given(shape=st.lists(SIZES, min_size=1, max_size=3), dim=st.integers(0, 2), start=st.integers(-3, 4),
       op=st.sampled_from(["zero_", "fill_", "add_", "mul_"]), seed=st.integers(0, 2 ** 16))
def test_in_place_updates_of_empty_or_unit_slices_compile_like_eager(shape, dim, start, op, seed):
    """An in-place update of a slice of a clone inside the function (the slice often empty: its
    index tensor inside the trace has 0 or 1 elements): values and gradients as eager's."""
    dim = dim % len(shape)
    a = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)

    def f(x):
        y = (x * 1.5).clone()
        view = y[(slice(None),) * dim + (slice(start, None),)]
        getattr(view, op)(*{"zero_": (), "fill_": (2.0,), "add_": (1.0,), "mul_": (3.0,)}[op])
        return (y * y).sum()

    def run(fn):
        x = tg.tensor(a, requires_grad=True)
        out = fn(x)
        out.backward()
        return out.item(), x.grad.numpy()
    want = run(f)
    for backend in ("llvm", "interpret"):
        got = run(tg.compile(f, backend=backend))
        np.testing.assert_allclose(got[0], want[0], rtol=1e-5)
        np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-6)


def test_integer_tensors_of_zero_or_one_element_made_inside_a_trace():
    def f(x):
        return x.sum() + tg.tensor(np.zeros(0, np.int64)).sum() + tg.tensor(np.array([3], np.int64)).sum()
    x = tg.tensor(np.ones(4, np.float32))
    assert tg.compile(f)(x).item() == f(x).item() == 7.0
