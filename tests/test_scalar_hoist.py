"""Values constant along every loop axis of a kernel (0-d loads, constants, their transcendentals: Adam's
1 - beta ** step) computed once per call before the loops (backends/cpu/hoist.py, hoisted(kernel,
len(shape))), whatever the kernel's strategy: each strategy's kernel hoists them, and generated
elementwise trees mixing 0-d and full operands give compiled == interpret == eager, values and
gradients, under every strategy."""
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tracegrad as tg
from tracegrad.backends.cpu import hoist, llvm

RNG = np.random.default_rng(5)
X = RNG.standard_normal((40, 24)).astype(np.float32)
Y = RNG.standard_normal((24, 40)).astype(np.float32)
Z = RNG.standard_normal((6, 10, 16)).astype(np.float32)

# a strategy's program: (how to use the full-space value v of x, the lowering it is expected to get)
STRATEGIES = {
    "map": (lambda v, y, z: v * 1.5, "map in memory order"),
    "row sums": (lambda v, y, z: v.sum(1), "row reductions in memory order"),
    "row softmax": (lambda v, y, z: v.softmax(1), "online rows"),
    "column sums": (lambda v, y, z: v.sum(0), "column accumulation, natural order"),
    "column softmax": (lambda v, y, z: v.softmax(0), "online column walk"),
    "middle sums": (lambda v, y, z: (z * v[:6, :16].unsqueeze(1)).exp().permute(2, 0, 1).sum(1),
                    "column accumulation, tiled"),
    "permuted map": (lambda v, y, z: v.T + y, "permuted map"),
    "across rows": (lambda v, y, z: v.T.sum(1), "across rows"),
    "across tiles": (lambda v, y, z: (v.T + y).sum(1), "across tiles"),
}


def bias(s):
    return (1 - 0.9 ** s).float()


def lowerings(fn, x, s, t):
    """{lowering in words: whether that kernel hoisted a value constant along every axis} while
    compiling fn (llvm, no gradients)."""
    got, scalar = {}, []
    kernel = llvm.ModuleBuilder.kernel

    def spy_hoisted(k, axes):
        out, plan = hoist.hoisted(k, axes)
        if axes == len(k.shape) and plan:
            scalar.append(plan)
        return out, plan

    def spy_kernel(self, k, slots, name, stream=frozenset()):
        before = len(scalar)
        out = kernel(self, k, slots, name, stream)
        got[self.lowerings[name]] = got.get(self.lowerings[name], False) or len(scalar) > before
        return out
    with mock.patch.object(llvm, "hoisted", spy_hoisted), mock.patch.object(llvm.ModuleBuilder, "kernel", spy_kernel):
        tg.compile(fn)(tg.tensor(x), tg.tensor(np.float64(s)), tg.tensor(np.float32(t)))
    return got


def run(fn, backend, x, s, t, g_seed=0):
    """fn(x, s, t) and the gradients of (fn * g).sum() for x, s, t: compiled with `backend`, or eager (None)."""
    xs = tg.tensor(x, requires_grad=True)
    ss, ts = tg.tensor(np.float64(s), requires_grad=True), tg.tensor(np.float32(t), requires_grad=True)

    def loss(x, s, t):
        out = fn(x, s, t)
        g = tg.tensor(np.random.default_rng(g_seed).standard_normal(out.shape).astype(np.float32))
        return out, (out * g).sum()
    out, total = (tg.compile(loss, backend=backend) if backend else loss)(xs, ss, ts)
    total.backward()
    return [out.detach().numpy()] + [np.zeros(v.shape) if v.grad is None else v.grad.numpy() for v in (xs, ss, ts)]


def check(got, want):
    for a, b in zip(got, want):
        scale = max(1.0, float(np.abs(b).max()))
        np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-4 * scale)


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_every_strategy_computes_a_0d_pow_once_per_call(name):
    use, how = STRATEGIES[name]
    y, z = tg.tensor(Y), tg.tensor(Z)
    fn = lambda x, s, t: use(x * bias(s) + t.exp(), y, z)    # noqa: E731
    got = lowerings(fn, X, 3.0, 0.25)
    assert any(how in k and hoisted for k, hoisted in got.items()), got
    vals = run(fn, "llvm", X, 3.0, 0.25)
    check(vals, run(fn, "interpret", X, 3.0, 0.25))
    check(vals, run(fn, None, X, 3.0, 0.25))
    c1 = 1 - 0.9 ** 3.0                                          # an independent oracle for the map
    if name == "map":
        np.testing.assert_allclose(vals[0], (X * np.float32(c1) + np.exp(np.float32(0.25))) * 1.5, rtol=1e-6)


def test_a_kernel_of_one_element_or_cheap_scalars_is_left_alone():
    got = lowerings(lambda x, s, t: x[:1, :1] * bias(s), X, 3.0, 0.25)
    assert not any(got.values()), got
    got = lowerings(lambda x, s, t: x * (s.float() + t * 2), X, 3.0, 0.25)
    assert not any(got.values()), got


UNARY = {"exp": lambda a: (a * 0.25).exp(), "tanh": lambda a: a.tanh(), "sigmoid": lambda a: a.sigmoid(),
         "log": lambda a: (a.abs() + 1).log(), "sqrt": lambda a: (a.abs() + 0.5).sqrt(),
         "pow": lambda a: 0.9 ** a.tanh(), "neg": lambda a: -a}
BINARY = {"add": lambda a, b: a + b, "mul": lambda a, b: a * b, "sub": lambda a, b: a - b,
          "div": lambda a, b: a / (b.abs() + 1), "pow": lambda a, b: (a.abs() + 0.5) ** b.tanh()}


@st.composite
def trees(draw, depth=0):
    """A random elementwise tree over leaves x (full), s (0-d float64), t (0-d float32) and constants,
    as a nested tuple."""
    if depth >= 3 or draw(st.integers(0, 3)) == 0:
        return draw(st.sampled_from(["x", "s", "t", 0.5, 2.0]))
    if draw(st.booleans()):
        return (draw(st.sampled_from(sorted(UNARY))), draw(trees(depth + 1)))
    return (draw(st.sampled_from(sorted(BINARY))), draw(trees(depth + 1)), draw(trees(depth + 1)))


def build(tree, env):
    """The tensor of a tree (a constant leaf: a 0-d tensor of t's type, `t * 0 + c`)."""
    if not isinstance(tree, tuple):
        return env[tree] if isinstance(tree, str) else env["t"] * 0 + tree
    args = [build(a, env) for a in tree[1:]]
    return (UNARY if len(args) == 1 else BINARY)[tree[0]](*args)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trees(), trees(), st.sampled_from(sorted(STRATEGIES)), st.floats(0.5, 4.0), st.floats(-1.0, 1.0))
def test_generated_trees_of_0d_and_full_operands_match_interpret_and_eager(a, b, name, s, t):
    use, _ = STRATEGIES[name]
    y, z = tg.tensor(Y), tg.tensor(Z)

    def fn(x, s, t):
        env = {"x": x, "s": s, "t": t}
        v = build(a, env) * (x * 0.5 + build(b, env))             # full: it reads x
        return use(v.float(), y, z)
    vals = run(fn, "llvm", X, s, t)
    check(vals, run(fn, "interpret", X, s, t))
    check(vals, run(fn, None, X, s, t))
