"""backend="cuda": real functions compiled for cuda tensors give what the interpret backend (the IR
run op by op with NumPy on the cpu) gives — values and gradients — under numba's simulator, with
tiny shapes (every GPU thread runs in Python)."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tracegrad as tg
import tracegrad.nn.functional as F

RNG = np.random.default_rng(11)


def host(t):
    return None if t is None else t.detach().cpu().numpy()


def compare(fn, arrays, grad=(), tol=2e-5, **compile_kw):
    """fn compiled on cuda tensors vs fn compiled with backend="interpret" on cpu tensors: outputs
    and the gradients of the inputs whose positions are in `grad` (after a seeded backward)."""
    results = {}
    for dev, backend in (("cuda", None), ("cpu", "interpret")):
        xs = [tg.tensor(a, device=dev, requires_grad=i in grad) for i, a in enumerate(arrays)]
        f = tg.compile(fn, backend=backend, **compile_kw)
        outs = f(*xs)
        outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
        if grad:
            terms = [(o * tg.tensor(np.linspace(-1, 1, o.numel()).reshape(o.shape).astype(np.float32), device=dev))
                     .sum() for o in outs if o.dtype.is_floating_point]
            tg.stack(terms).sum().backward()
        results[dev] = [host(o) for o in outs] + [host(xs[i].grad) for i in grad]
        if dev == "cuda":
            assert all(o.device == "cuda:0" for o in outs)
            assert f.stats()["kernels"] > 0
    for got, want in zip(results["cuda"], results["cpu"]):
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    return results["cuda"]


def r(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def test_gelu_both_forms_and_gradient():
    compare(lambda x: (F.gelu(x), F.gelu(x, approximate="tanh")), [r(3, 7)], grad=(0,))


def test_softmax_log_softmax_and_gradient():
    compare(lambda x: (F.softmax(x, 1), F.log_softmax(x, 0)), [r(4, 6)], grad=(0,))


def test_layer_norm_forward_and_backward():
    x, w, b = r(5, 8), 1 + 0.1 * r(8), 0.1 * r(8)
    compare(lambda x, w, b: F.layer_norm(x, (8,), w, b), [x, w, b], grad=(0, 1, 2), tol=1e-4)


def test_reductions_over_axes():
    def f(x):
        return (x.sum(), x.sum(0), x.mean(axis=(0, 2), keepdims=True), x.amax(1), x.amin(2), x.var(1),
                x.min(), (x * x).sum(axis=-1))
    compare(f, [r(3, 4, 5)], grad=(0,), tol=1e-4)


def test_reductions_of_no_elements_give_the_identity():
    compare(lambda x: (x.sum(1), (x * 2.0).sum(), x.mean(1), x.exp().sum(0)), [r(3, 0)], grad=(0,))
    compare(lambda x: (x.exp() * 2.0).sum(0), [r(0, 4)], grad=(0,))


def test_broadcasting_and_its_gradients():
    compare(lambda a, b, c: (a * b + c).tanh(), [r(3, 1, 4), r(5, 1), r(4)], grad=(0, 1, 2))


def test_views_transpose_slices_expand_reshape():
    def f(x):
        t = x.T
        return (t * 2.0 + 1.0, x[1:, ::2].exp(), x[:, None, :].expand(4, 3, 6).sum(0), x.reshape(3, 2, 4)[:, 1],
                (t.softmax(1) * x.T).sum(1))
    compare(f, [r(4, 6)], grad=(0,), tol=1e-4)


def test_matmul_linear_relu_and_gradient():
    compare(lambda x, w, b: F.linear(x, w, b).relu().sum(0), [r(5, 4), r(3, 4), r(3)], grad=(0, 1, 2), tol=1e-4)


def test_in_place_updates_are_written_back_on_the_device():
    p0, g0 = r(6), r(6)

    def step(p, g, m):
        with tg.no_grad():
            m.mul_(0.9).add_(g)
            p.sub_(0.1 * m)
        return (p * p).sum()
    results = {}
    for dev, backend in (("cuda", None), ("cpu", "interpret")):
        p, g, m = (tg.tensor(a, device=dev) for a in (p0, g0, np.zeros(6, np.float32)))
        f = tg.compile(step, backend=backend)
        losses = [host(f(p, g, m)) for _ in range(3)]
        results[dev] = losses + [host(p), host(m)]
        assert p.device == dev
    for got, want in zip(results["cuda"], results["cpu"]):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_int_and_bool_values():
    compare(lambda x: ((x > 0).sum(1), (x * 3).long() * 2 - 1, tg.where(x > 0, x, 0.0)), [r(3, 5)])


@settings(max_examples=4, deadline=None)
@given(st.lists(st.integers(1, 3), min_size=1, max_size=3), st.integers(0, 2**16),
       st.sampled_from(["add", "mul", "sub"]))
def test_generated_broadcast_chains(shape, seed, op):
    """Generated shapes: an operand broadcast along random axes, a chain of ops, gradients of both."""
    rng = np.random.default_rng(seed)
    other = [1 if rng.random() < 0.5 else n for n in shape][int(rng.integers(0, len(shape))):]
    a, b = rng.standard_normal(shape).astype(np.float32), rng.standard_normal(other or [1]).astype(np.float32)
    fn = {"add": lambda x, y: (x + y).sigmoid() * y, "mul": lambda x, y: (x * y).exp() - y,
          "sub": lambda x, y: ((x - y) ** 2).sum(-1)}[op]
    compare(fn, [a, b], grad=(0, 1), tol=1e-4)


def test_backward_from_one_of_two_outputs_on_the_device():
    """The backward of the present cotangent alone (ir/passes/cotangents.py), built for the device:
    no nan from a zero cotangent times inf, and None for an input only the other output reads."""
    def fn(a, b, c):
        s = b.sum()
        return s, (s.abs() + 0.5) ** (a.sigmoid() * a) + c

    got = {}
    for dev in ("cuda", "cpu"):
        xs = [tg.tensor(np.array(v, np.float32), device=dev, requires_grad=True)
              for v in ([np.inf, 0.5], [0.25, -1.5], [1.0, 2.0])]
        f = tg.compile(fn) if dev == "cuda" else fn
        f(*xs)[0].backward()
        got[dev] = [host(x.grad) for x in xs]
    assert got["cuda"][0] is None and got["cuda"][2] is None and got["cpu"][0] is None
    np.testing.assert_array_equal(got["cuda"][1], got["cpu"][1])


def test_cat_pad_and_slice_gradient_stay_on_the_gather_path():
    """The pieces of a cat, a pad and a slice's gradient: the CPU writes them box by box (backends/cpu/
    boxes.py); cuda evaluates the same kernels' selects (its planner and emitters do not split boxes)."""
    def fn(x, c, s):
        half = x.shape[-1] // 2
        rot = x * c + tg.cat([-x[..., half:], x[..., :half]], -1) * s
        return rot.tanh(), F.pad(x * 2, (1, 2, 0, 1), value=0.5), (x[:, 1:3].exp()).sum()
    compare(fn, [r(3, 4, 6), r(6), r(6)], grad=(0,))
