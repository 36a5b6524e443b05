"""Kernels that take their sizes at the call (backends/cpu/sizes.py): a function compiled with symbolic sizes
(dynamic=True) builds its LLVM module once, and later calls with other sizes, 0 and 1 among them, run the
same machine code: compiled == eager == the interpret backend over generated size sequences, for maps,
row, column and full reductions, matrix products (batched too), reshapes over B*T, slices of T-1, and a
training step's gradients; the count of LLVM modules built stays at the count of traces (1 where the
trace decides nothing on the sizes)."""
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tracegrad as tg
from tracegrad.backends.cpu import build
from tracegrad.ir.kernels import Kernel, Load, Phase
from tracegrad.backends.cpu.plan import schedule
from tracegrad.ops import PRIMS
from tracegrad.symint import ShapeEnv, using

RNG = np.random.default_rng(0)
SETTINGS = settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck))
SIZES = st.lists(st.sampled_from([0, 1, 2, 3, 5, 8, 17, 33]), min_size=3, max_size=5)


@pytest.fixture
def modules(monkeypatch):
    """The LLVM modules built (each build_programs call compiles one)."""
    built = []
    real = build.compile_module

    def counting(text):
        built.append(len(text))          # (not the text: hypothesis prints its arguments)
        return real(text)
    monkeypatch.setattr(build, "compile_module", counting)
    return built


def _arrays(shapes):
    return [RNG.standard_normal(s).astype(np.float32) for s in shapes]


def _same(fn, shapes_seq, modules, compiles=1, grads=False):
    """fn compiled (dynamic=True) and through the interpret backend == eager for each shape list of
    `shapes_seq`; the LLVM modules built stay at `compiles` (None: at the number of traces)."""
    llvm = tg.compile(fn, dynamic=True)
    oracle = tg.compile(fn, dynamic=True, backend="interpret")
    for shapes in shapes_seq:
        arrays = _arrays(shapes)
        results = []
        for f in (fn, llvm, oracle):
            ts = [tg.tensor(a, requires_grad=grads) for a in arrays]
            out = f(*ts)
            outs = list(out) if isinstance(out, tuple) else [out]
            if grads:
                sum(o.sum() for o in outs).backward()
                outs = outs + [t.grad for t in ts]
            results.append([o.detach().numpy() for o in outs])
        for got in results[1:]:
            for g, want in zip(got, results[0]):
                assert g.shape == want.shape, (shapes, g.shape, want.shape)
                np.testing.assert_allclose(g, want, rtol=2e-4, atol=2e-5, err_msg=str(shapes))
    want = llvm.stats()["traces"] if compiles is None else compiles
    assert len(modules) == want, (len(modules), llvm.stats())
    return llvm


@SETTINGS
@given(bs=SIZES, ts=SIZES)
def test_maps_and_reductions_compile_once(bs, ts, modules):
    def f(x, y, b):
        h = (x * 2.0 + y).tanh() * b
        return h, h.sum(1), h.sum(0), h.sum() * 0.5, (h * h).sum(1, keepdim=True) - h.sum(0).sum()
    seq = [[(b, t), (b, t), (t,)] for b, t in zip(bs, ts)]
    modules.clear()       # (a size-1 T retraces: b then stretches; the trace's guard, not the kernels')
    _same(f, [[(4, 6), (4, 6), (6,)]] + seq, modules, compiles=None)


@SETTINGS
@given(bs=SIZES)
def test_row_softmax_and_cross_entropy_gradients(bs, modules):
    w = tg.tensor(RNG.standard_normal((7, 5)).astype(np.float32), requires_grad=True)

    def f(x):
        logits = x @ w
        return logits.log_softmax(1), logits.softmax(1).sum(0), logits.logsumexp(1).mean()
    modules.clear()
    _same(f, [[(9, 7)]] + [[(b, 7)] for b in bs], modules, compiles=None, grads=True)


@SETTINGS
@given(bs=SIZES, ts=SIZES)
def test_matmuls_reshapes_and_slices(bs, ts, modules):
    w = tg.tensor(RNG.standard_normal((4, 3)).astype(np.float32))

    def f(x, y):
        a = x @ w                                         # [B,T,3]: BLAS with M = B*T
        flat = a.reshape(x.shape[0] * x.shape[1], 3)      # a view over B*T rows
        att = x @ y.transpose(1, 2)                       # batched [B,T,T]
        diff = x[:, 1:] - x[:, :-1]                       # slices of T-1
        return flat.sum(0), att, diff.sum(1), (att @ x).mean(0)
    seq = [[(b, t, 4), (b, t, 4)] for b, t in zip(bs, ts)]
    modules.clear()
    _same(f, [[(3, 5, 4), (3, 5, 4)]] + seq, modules, compiles=None)


def _sgd(loss, params, lr):
    """loss.backward(), then an SGD update of `params`; the loss."""
    loss.backward()
    with tg.no_grad():
        for p in params:
            p -= lr * p.grad
            p.grad = None
    return loss


def test_mlp_training_step_compiles_once(modules):
    """forward, cross entropy, backward and an SGD update over batches of 24 sizes, 1 and 0 among them:
    one trace, one LLVM module, the parameters as eager's after every step."""
    def params():
        r = np.random.default_rng(1)
        return [tg.tensor(r.standard_normal(s).astype(np.float32) * 0.3, requires_grad=True)
                for s in ((6, 8), (8,), (8, 3), (3,))]
    compiled, eager = params(), params()

    def step(ps, x, y):
        w1, b1, w2, b2 = ps
        return _sgd(tg.nn.functional.cross_entropy((x @ w1 + b1).relu() @ w2 + b2, y), ps, 0.1)
    f = tg.compile(step, dynamic=True)
    modules.clear()
    for b in [32, 17, 1, 5, 64, 2, 3, 40, 9, 33, 7, 12, 25, 50, 4, 6, 11, 13, 19, 8, 21, 30, 16, 10]:
        x, y = RNG.standard_normal((b, 6)).astype(np.float32), RNG.integers(0, 3, b)
        lc = f(compiled, tg.tensor(x), tg.tensor(y))
        le = step(eager, tg.tensor(x), tg.tensor(y))
        np.testing.assert_allclose(lc.detach().numpy(), le.detach().numpy(), rtol=1e-4, atol=1e-6)
        for p, q in zip(compiled, eager):
            np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-4, atol=1e-6)
    assert f.stats()["traces"] == 1 and len(modules) == 1, (f.stats(), len(modules))


def test_symbolic_kernel_ir_and_no_guards():
    """A kernel over [B, T] lowered with symbolic sizes reads them from its sizes array (no size is a
    literal of the IR) and records no guard; its loads keep the symbolic strides."""
    from tracegrad import dtypes as D
    from tracegrad.backends.cpu.llvm import ModuleBuilder
    from tracegrad.backends.cpu.plan import plan
    from tracegrad.backends.cpu.sizes import Symbols
    from tracegrad.ir.graph import Graph
    env = ShapeEnv()
    with using(env):
        B, T = env.sym("B", 64, source=("x", 0)), env.sym("T", 48, source=("x", 1))
        g = Graph("f")
        x = g.add_input("x", (B, T), D.float32)
        out = g.add("neg", [x], {}, (B,), D.float32)
        k = Kernel("loop", (B, T), 1, [Phase("reduce", [(out, Load(x, (T, 1)))], "sum", (1,), PRIMS["sum"].lower,
                                             "cheap")])
        schedule([k])
        mb = ModuleBuilder(Symbols([g]))
        _, _, sized = mb.kernel(k, {id(x): 0, id(out): 1}, "k", plan(k))
    assert sized and env.guards == []
    text = mb.text()        # its generic copy; a copy for the traced row of 48 where T == 48 (llvm.py's _body)
    body = re.search(r"define internal void @k_body\.any\(.*?\n}", text, re.S).group(0)
    assert "%sizes" in body and not re.search(r"\b(64|48|3072)\b", body)
    assert "icmp eq i64 %ext, 48" in text


def test_sized_strategies_pin_their_kernel_with_a_guard(modules):
    """Sums over the rows of a transposed view keep a vector over the whole kept axis (Schedule.rows): the
    kept axis's symbol is compiled in at ONE place (backends/cpu/plan/sized.py's pin), with the guard `S == hint` in the
    entry's ShapeEnv, while the rows stay symbolic: another batch runs the same module, another width
    fails the guard and retraces, naming it; values as eager's."""
    def f(x):
        return x.t().sum(1) * 0.5
    cf = tg.compile(f, dynamic=True)
    modules.clear()
    for shape in ((4096, 64), (2048, 64), (3000, 64), (4096, 32)):
        x = RNG.standard_normal(shape).astype(np.float32)
        np.testing.assert_allclose(cf(tg.tensor(x)).numpy(), x.sum(0) * 0.5, rtol=1e-4, atol=1e-4)
    s = cf.stats()
    assert s["traces"] == 2 and len(modules) == 2, s
    assert any(g.endswith("== 64 (vectors over the kept axis compiled in)") for d in s["dynamic"]
               for g in d["guards"]), s
    assert any("== 64 (vectors over the kept axis compiled in) failed" in r for r in s["retrace_reasons"]), s


def test_transformer_step_compiles_once(modules):
    """An attention block's training step (embedding, layer norm, causal attention over heads, an MLP,
    cross entropy over B*T rows, backward, SGD) over batches and sequence lengths with 1 among them: one
    LLVM module; losses and parameters as eager's."""
    C, H, V = 8, 2, 7

    def params():
        r = np.random.default_rng(2)
        return [tg.tensor(r.standard_normal(s).astype(np.float32) * 0.3, requires_grad=True)
                for s in ((V, C), (C, C), (C, C), (C, C), (C, 2 * C), (2 * C, C), (C,), (C,))]

    def step(ps, idx, tgt):
        emb, wq, wk, wv, w1, w2, g, b = ps
        B, T = idx.shape
        x = tg.nn.functional.layer_norm(emb[idx], (C,), g, b)
        q, k, v = ((x @ w).reshape(B, T, H, C // H).transpose(1, 2) for w in (wq, wk, wv))
        att = (q @ k.transpose(-2, -1)) * (C // H) ** -0.5
        att = att.masked_fill(tg.tril(tg.ones(T, T)) == 0, float("-inf")).softmax(-1)
        x = x + (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + (x @ w1).relu() @ w2
        return _sgd(tg.nn.functional.cross_entropy((x @ emb.T).reshape(B * T, V), tgt.reshape(B * T)), ps, 0.05)
    compiled, eager = params(), params()
    f = tg.compile(step, dynamic=True)
    modules.clear()
    for B, T in [(3, 5), (4, 8), (2, 17), (5, 2), (1, 9), (4, 1), (1, 1), (2, 12)]:   # (first: no size of a weight)
        idx, tgt = RNG.integers(0, V, (B, T)), RNG.integers(0, V, (B, T))
        lc = f(compiled, tg.tensor(idx), tg.tensor(tgt))
        le = step(eager, tg.tensor(idx), tg.tensor(tgt))
        np.testing.assert_allclose(lc.detach().numpy(), le.detach().numpy(), rtol=1e-4, atol=1e-5)
        for p, q in zip(compiled, eager):
            np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-3, atol=1e-5)
    assert len(modules) == 1, (f.stats()["retrace_reasons"], f.stats()["dynamic"])
