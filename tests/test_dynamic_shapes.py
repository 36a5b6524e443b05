"""Symbolic sizes in tg.compile (dynamic=None|True, mark_dynamic): compiled == eager across sizes
(including 1 and 0), values and gradients; how many traces; the guards and the retrace reasons; the
IR text with symbols and its round trip through the parser."""
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tracegrad as tg
import tracegrad.nn as nn
import tracegrad.nn.functional as F
from tracegrad.ir import print_graph
from tracegrad.ir.parser import parse

F32 = tg.float32


def _data(b, seed, features=6, classes=3):
    rng = np.random.default_rng(seed)
    return (tg.tensor(rng.standard_normal((b, features)).astype(np.float32)),
            tg.tensor(rng.integers(0, classes, b)))


def _mlp(seed=0):
    tg.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))


def _sgd_step(m, loss_of=F.cross_entropy):
    """A training step of model m: zero_grad, loss, backward, SGD step; returns the loss."""
    opt = tg.optim.SGD(m.parameters(), lr=0.1)

    def step(x, y):
        opt.zero_grad()
        loss = loss_of(m(x), y)
        loss.backward()
        opt.step()
        return loss
    return step


def _close(a, b):
    a, b = (v.detach().numpy() if isinstance(v, tg.Tensor) else v for v in (a, b))
    np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-6, equal_nan=True)


batches = st.lists(st.sampled_from([0, 1, 2, 3, 5, 17, 31, 64]), min_size=2, max_size=7)


@settings(max_examples=12, deadline=None)
@given(batches, st.sampled_from([None, True]))
def test_mlp_loss_and_gradients_match_eager_across_batch_sizes(sizes, dynamic):
    model = _mlp()
    loss_fn = lambda x, y: F.cross_entropy(model(x), y)     # noqa: E731
    cf = tg.compile(loss_fn, backend="interpret", dynamic=dynamic)
    for i, b in enumerate(sizes):
        x, y = _data(b, i)
        eager = loss_fn(x, y)
        eager.backward()
        want = [p.grad.numpy().copy() for p in model.parameters()]
        model.zero_grad()
        got = cf(x, y)
        got.backward()
        _close(got, eager)          # an empty batch's mean is nan, as eagerly
        for p, w in zip(model.parameters(), want):
            _close(p.grad, w)
        model.zero_grad()
    # dynamic=True: a first batch of 1 is a fixed size (it could broadcast), the next size retraces
    want = 1 if dynamic and sizes[0] != 1 else min(len(set(sizes)), 2)
    assert cf.stats()["traces"] == want, cf.stats()["retrace_reasons"]


@pytest.mark.parametrize("dynamic", [None, True])
def test_mlp_training_step_over_batch_sizes_llvm(dynamic):
    """A training step (zero_grad, backward, SGD step) compiled with llvm equals the eager one over
    ragged batches including 1 and 0: dynamic=True traces once, the default twice (the first call's
    sizes are fixed). zero_grad() assigns every .grad before the trace reads one: the first call's
    .grad being None makes no second trace."""
    models = [_mlp(), _mlp()]
    eager, compiled = _sgd_step(models[0]), tg.compile(_sgd_step(models[1]), dynamic=dynamic)
    sizes = [17, 33, 1, 64, 0, 20, 5]
    for i, b in enumerate(sizes):
        x, y = _data(b, i)
        _close(compiled(x, y), eager(x, y))
        for p, q in zip(models[0].parameters(), models[1].parameters()):
            _close(q, p)
    st_ = compiled.stats()
    assert st_["traces"] == (1 if dynamic else 2), st_["retrace_reasons"]
    assert [d["guards"] for d in st_["dynamic"]] == [[]] if dynamic is None else len(st_["dynamic"]) == 1
    assert st_["size_programs"] == len(sizes) - (0 if dynamic else 1)


def test_default_mode_retraces_once_and_names_the_dims():
    cf = tg.compile(lambda x, w: (x @ w).tanh().sum(), backend="interpret")
    w = tg.ones(4, 3)
    for b in [8, 5, 9, 1, 0, 8]:
        cf(tg.ones(b, 4), w)
    s = cf.stats()
    assert s["traces"] == 2
    assert s["retrace_reasons"] == ["x: dim 0 became symbolic B (8 -> 5)"]
    assert s["dynamic"][0]["symbols"] == {"B": "x dim 0 in [0, inf]"}
    assert s["dynamic"][0]["guards"] == []


def test_a_size_taking_another_broadcast_path_fails_a_guard_and_retraces():
    f = lambda x, b: x + b      # noqa: E731
    cf = tg.compile(f, backend="interpret", dynamic=True)
    x = tg.tensor(np.arange(12.0, dtype=np.float32).reshape(3, 4))
    for b in [tg.ones(3, 4), tg.ones(3, 4) * 2]:
        _close(cf(x, b), f(x, b))
    assert cf.stats()["traces"] == 1
    one = tg.ones(1, 4) * 5                             # b's dim 0 is 1 now: stretched
    out = cf(x, one)
    _close(out, f(x, one))
    s = cf.stats()
    assert s["traces"] == 2
    assert s["retrace_reasons"][-1].startswith("b: dim 0 (1) no longer equals x dim 0 (3)")
    # a size-1 x with a size-3 b: x stretched, never an answer of the (3, 4) + (3, 4) entry
    _close(cf(tg.ones(1, 4), tg.ones(3, 4)), np.full((3, 4), 2.0))
    with pytest.raises(tg.BroadcastError if hasattr(tg, "BroadcastError") else ValueError):
        cf(tg.ones(2, 4), tg.ones(3, 4))               # eager's error, not a wrong hit


def test_guard_from_python_control_flow():
    def f(x):
        return x * 2 if x.shape[0] > 4 else x - 1
    cf = tg.compile(f, backend="interpret", dynamic=True)
    for b in [6, 9, 2, 3, 7, 5, 4]:
        x = tg.ones(b, 2)
        _close(cf(x), f(x))
    s = cf.stats()
    assert s["traces"] == 2
    assert s["retrace_reasons"] == ["guard B > 4 failed (B = 2)"]
    assert sorted(g for d in s["dynamic"] for g in d["guards"]) == ["B <= 4", "B > 4"]


def test_sizes_read_by_the_function_stay_symbolic():
    def f(x):
        n, d = x.shape
        idx = tg.arange(n)
        y = x.reshape(n * d).view(n, d)[: n - 1] * 2
        z = tg.zeros(n, 1) + idx.reshape(n, 1).float()
        count = tg.tensor(n) + tg.full((2,), n - 1)
        return y.sum(0) + z[1:].sum(), x.reshape(-1, d).mean(), x.sum() / n, count
    cf = tg.compile(f, backend="interpret", dynamic=True)
    for b in [5, 8, 2, 3]:
        x = tg.tensor(np.random.default_rng(b).standard_normal((b, 3)).astype(np.float32))
        for g, e in zip(cf(x), f(x)):
            _close(g, e)
    s = cf.stats()
    assert s["traces"] == 1, s["retrace_reasons"]
    assert not [g for g in s["dynamic"][0]["guards"] if "==" in g], s["dynamic"]


def test_empty_batch_behaves_as_eager():
    f = lambda x: (x.mean(0), x.sum(), x.mean())        # noqa: E731
    cf = tg.compile(f, backend="interpret", dynamic=True)
    for b in [4, 0, 3]:
        x = tg.ones(b, 2)
        for g, e in zip(cf(x), f(x)):
            _close(g, e)
    assert math.isnan(cf(tg.ones(0, 2))[2].item())


def test_mark_dynamic_and_mark_static():
    f = lambda x: (x * x).sum(1)        # noqa: E731
    cf = tg.compile(f, backend="interpret", dynamic=False)
    x = tg.ones(4, 3)
    tg.mark_dynamic(x, 0)
    cf(x)
    y = tg.ones(7, 3)
    tg.mark_dynamic(y, 0)
    _close(cf(y), f(y))
    assert cf.stats()["traces"] == 1
    cs = tg.compile(f, backend="interpret", dynamic=True)
    for b in [4, 6]:
        z = tg.ones(b, 3)
        tg.mark_static(z, 0)
        cs(z)
    assert cs.stats()["traces"] == 2
    assert cs.stats()["dynamic"][0]["symbols"] == {"T": "x dim 1 in [0, inf]"}
    with pytest.raises(IndexError):
        tg.mark_dynamic(x, 2)
    t = tg.tensor(np.arange(15.0, dtype=np.float32).reshape(3, 5)).transpose(0, 1)   # not row-major
    tg.mark_dynamic(t, 0)
    _close(cf(t), f(t))


def test_symbolic_ir_prints_symbols_and_round_trips():
    model = _mlp()
    cf = tg.compile(lambda x, y: F.cross_entropy(model(x), y), backend="interpret", dynamic=True)
    x, y = _data(16, 0)
    cf(x, y)
    assert "%x: f32[B,6]" in cf.ir(x, y, stage="traced")     # x's dim 1 met the weight's 6: T == 6, a number
    assert cf.stats()["dynamic"][0]["guards"] == ["T == 6"]
    for stage in ("traced", "backward"):
        text = cf.ir(x, y, stage=stage)
        assert "f32[B,6]" in text or "f32[B,3]" in text, text
        assert print_graph(parse(text)) == text
    x2, y2 = _data(5, 1)
    assert cf.ir(x2, y2, stage="traced") == cf.ir(x, y, stage="traced")
    assert "f32[5,6]" in cf.ir(x2, y2, stage="kernels") or cf.stats()["traces"] == 1


def test_static_ir_text_unchanged():
    cf = tg.compile(lambda x: (x * 2).sum(), backend="interpret")
    text = cf.ir(tg.ones(3, 2))
    assert "f32[3,2]" in text and "B" not in text


def test_a_grad_assigned_before_it_is_read_is_written_at_every_call():
    """zero_grad() first: the .grad held before the call does not matter (no retrace when it went from
    None to a tensor), and each call leaves what eager leaves: None for a parameter the loss skips."""
    p, q = tg.ones(3, requires_grad=True), tg.ones(3, requires_grad=True)
    opt = tg.optim.SGD([p, q], lr=0.5)

    def step(x):
        opt.zero_grad()
        (p * x).sum().backward()
        opt.step()
    cf = tg.compile(step, backend="interpret", dynamic=True)
    for b in [2, 5]:
        q.grad = tg.ones(3)                    # a stale .grad: zero_grad() sets it to None, as eagerly
        cf(tg.ones(b, 3))
        assert q.grad is None and p.grad is not None
        _close(p.grad, np.full(3, float(b)))
    assert cf.stats()["traces"] == 1, cf.stats()["retrace_reasons"]


_FUNCS = [
    lambda x, y: x * y + x.sum(0, keepdim=True),
    lambda x, y: (x - y).exp().mean(1) + y[:, :1].sum(),
    lambda x, y: (x @ y.transpose(0, 1)).tanh().sum(0) if x.shape[1] == y.shape[1] else x.sum(),
    lambda x, y: tg.cat([x, y], 0).softmax(0)[1:] * 2,
    lambda x, y: x.reshape(-1)[: y.shape[0]] + y.reshape(-1)[: x.shape[0]] if x.numel() and y.numel() else x,
]


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(range(len(_FUNCS))), st.sampled_from([None, True]),
       st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3), st.integers(0, 3), st.integers(0, 3)),
                min_size=2, max_size=6))
def test_no_wrong_hit_across_shape_sequences(which, dynamic, shapes):
    """Sizes mixing 0, 1 and more in every dim, in any order: each call equals eager (or raises as
    eager does); a call whose sizes take another broadcasting path retraces, never reuses an entry."""
    f = _FUNCS[which]
    cf = tg.compile(f, backend="interpret", dynamic=dynamic)
    for i, (a, b, c, d) in enumerate(shapes):
        rng = np.random.default_rng(i)
        x = tg.tensor(rng.standard_normal((a, b)).astype(np.float32))
        y = tg.tensor(rng.standard_normal((c, d)).astype(np.float32))
        try:
            want = f(x, y)
        except (RuntimeError, ValueError, IndexError) as e:
            with pytest.raises(type(e)):
                cf(x, y)
            continue
        _close(cf(x, y), want)


def test_transformer_step_over_sequence_lengths():
    """A causal self-attention block trained over sequence lengths 8..64: two traces (the first
    length fixed, then T symbolic), values and parameters == eager."""
    V, C, H = 11, 8, 2

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb, self.pos = nn.Embedding(V, C), nn.Embedding(64, C)
            self.ln, self.qkv, self.head = nn.LayerNorm(C), nn.Linear(C, 3 * C), nn.Linear(C, V)

        def forward(self, idx):
            B, T = idx.shape
            x = self.emb(idx) + self.pos(tg.arange(T))
            q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in self.qkv(self.ln(x)).split(C, dim=2))
            att = (q @ k.transpose(-2, -1)) * (C // H) ** -0.5
            att = att.masked_fill(tg.tril(tg.ones(T, T)) == 0, float("-inf")).softmax(-1)
            return self.head(x + (att @ v).transpose(1, 2).reshape(B, T, C))

    tg.manual_seed(0)
    m1 = Block()
    m2 = Block()
    m2.load_state_dict(m1.state_dict())
    # SGD: Adam would scale the key bias's rounding noise (its true gradient is 0: softmax is shift-invariant)
    flat = lambda logits, tgt: F.cross_entropy(logits.view(-1, V), tgt.view(-1))    # noqa: E731
    eager, cf = _sgd_step(m1, flat), tg.compile(_sgd_step(m2, flat), backend="interpret")
    rng = np.random.default_rng(0)
    for T in [16, 8, 33, 64, 9]:
        idx, tgt = (tg.tensor(rng.integers(0, V, (3, T))) for _ in range(2))
        _close(cf(idx, tgt), eager(idx, tgt))
    for p, q in zip(m1.parameters(), m2.parameters()):
        np.testing.assert_allclose(q.detach().numpy(), p.detach().numpy(), rtol=1e-4, atol=1e-5)
    assert cf.stats()["traces"] == 2, cf.stats()["retrace_reasons"]


@pytest.mark.parametrize("transposed", [False, True])
def test_layout_questions_on_symbolic_tensors(transposed):
    """contiguous()/view()/is_contiguous()/stride() answered at the traced sizes hold for every size
    >= 2 (guarded: sizes 0 and 1 trace apart); a transposed argument's layout is guarded by its axes'
    order in memory, whatever the sizes. stride() gives the sizes' expressions (row-major) or pins."""
    def f(x):
        y = x.contiguous().view(-1) * 2 if not x.is_contiguous() else x.view(-1) + 1
        return y.sum() + x.stride()[0] + x.t().stride()[1] * 10
    cf = tg.compile(f, backend="interpret", dynamic=True)
    for b in [4, 6, 2, 1, 0, 9]:
        a = tg.tensor(np.arange(b * 5.0, dtype=np.float32).reshape(b, 5))
        x = a.transpose(0, 1).contiguous().transpose(0, 1) if transposed else a
        _close(cf(x), f(x))
    assert cf.stats()["traces"] == (4 if transposed else 3), cf.stats()["retrace_reasons"]


def test_view_and_contiguous_without_updates_guard_no_size():
    """view() that succeeds at sizes >= 2 succeeds at 0 and 1; contiguous() gives the same values
    whether it copies: without in-place updates neither makes a guard on the sizes."""
    f = lambda x: x.t().contiguous().view(-1) * 2 + x.view(-1, 1).sum()     # noqa: E731
    cf = tg.compile(f, backend="interpret", dynamic=True)
    for b in [4, 1, 0, 7, 2]:
        x = tg.tensor(np.arange(b * 3.0, dtype=np.float32).reshape(b, 3))
        _close(cf(x), f(x))
    assert cf.stats()["traces"] == 1, cf.stats()["retrace_reasons"]
    assert cf.stats()["dynamic"][0]["guards"] == []


def test_reshape_of_a_tensor_updated_in_place_guards_its_sizes():
    """A reshape of a transposed argument is a copy at sizes >= 2 and a view at size 1; the argument
    then updated in place: whether the reshape sees the update depends on the size, so the size-1 call
    traces apart and matches eager either way."""
    def f(x):
        y = x.reshape(-1)
        x.mul_(2)
        return y + 0
    cf = tg.compile(f, backend="interpret", dynamic=True)
    for b in [4, 1, 6, 1]:
        base = np.arange(b * 3.0, dtype=np.float32).reshape(3, b)
        xe, xc = (tg.tensor(base).t() for _ in range(2))
        _close(cf(xc), f(xe))
        _close(xc, xe)
    # at size 1 the transposed argument is row-major: its layout guard fails, a trace of its own
    assert cf.stats()["traces"] <= 3, cf.stats()["retrace_reasons"]
