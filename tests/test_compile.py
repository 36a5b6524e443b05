"""@tg.compile (SPEC §5): values and gradients vs eager on real functions, training loops, cache,
guards and stats, introspection, errors, captured tensors, no_grad/detach, autograd integration."""
import inspect
import math
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

import tracegrad as tg
import tracegrad.nn.functional as F
from tracegrad.ir import parse, print_graph, run

F64 = tg.float64


@pytest.fixture(params=tg.jit.BACKENDS)
def backend(request):
    return request.param


def rnd(*shape, grad=True, seed=None, scale=1.0):
    t = tg.tensor(np.random.default_rng(seed).standard_normal(shape) * scale, dtype=F64)
    t.requires_grad = grad
    return t


def _round_trip(text):
    assert print_graph(parse(text)) == text


def check_stages(cf, args):
    """Every graph the function produces round-trips through the text format; forward and traced
    graphs interpret to the same values."""
    for stage in ("traced", "forward", "backward"):
        try:
            text = cf.ir(*args, stage=stage)
        except ValueError:
            assert stage == "backward"
            continue
        _round_trip(text)


def leaves_of(out):
    if isinstance(out, tg.Tensor):
        return [out]
    if isinstance(out, dict):
        return [t for v in out.values() for t in leaves_of(v)]
    if isinstance(out, (tuple, list)):
        return [t for v in out for t in leaves_of(v)]
    return []


def compare(fn, args, backend, tol=1e-6):
    """Compiled vs eager: every output value and the gradient of a random projection of the
    outputs with respect to every argument that requires grad."""
    cf = tg.compile(fn, backend=backend)
    eager = fn(*args)
    comp = cf(*args)
    e_out, c_out = leaves_of(eager), leaves_of(comp)
    assert len(e_out) == len(c_out) and e_out
    for e, c in zip(e_out, c_out):
        assert e.shape == c.shape and e.dtype == c.dtype
        np.testing.assert_allclose(c.detach().numpy(), e.detach().numpy(), rtol=tol, atol=tol)
    wrt = [a for a in args if isinstance(a, tg.Tensor) and a.requires_grad]
    diff = [k for k, e in enumerate(e_out) if e.requires_grad]
    if wrt and diff:
        rng = np.random.default_rng(123)
        cots = [tg.tensor(rng.standard_normal(e_out[k].shape), dtype=e_out[k].dtype) for k in diff]
        ge = tg.grad([e_out[k] for k in diff], wrt, grad_outputs=cots, allow_unused=True)
        gc = tg.grad([c_out[k] for k in diff], wrt, grad_outputs=cots, allow_unused=True)
        for a, x, y in zip(wrt, ge, gc):
            if x is None:
                assert y is None or np.all(y.detach().numpy() == 0)
                continue
            assert y is not None, "compiled gradient missing"
            np.testing.assert_allclose(y.detach().numpy(), x.detach().numpy(), rtol=tol, atol=tol)
    # a second call is served from the cache and agrees
    again = leaves_of(cf(*args))
    for e, c in zip(e_out, again):
        np.testing.assert_allclose(c.detach().numpy(), e.detach().numpy(), rtol=tol, atol=tol)
    assert cf.stats()["traces"] == 1 and cf.stats()["cache_hits"] == 1
    check_stages(cf, args)
    return cf


# ---------------------------------------------------------------------- 20+ real functions

def mlp_loss(x, w1, b1, w2, b2, y):
    h = (x @ w1 + b1).relu()
    return F.mse_loss(h @ w2 + b2, y)


def mlp_tanh_ce(x, w1, b1, w2, b2, y):
    h = F.linear(x, w1, b1).tanh()
    return F.cross_entropy(F.linear(h, w2, b2), y)


def softmax(x):
    return F.softmax(x, axis=-1)


def log_softmax0(x):
    return x.log_softmax(dim=0)


def layernorm(x, w, b):
    return F.layer_norm(x, x.shape[-1], w, b)


def layernorm_by_hand(x, w, b):
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return (x - mu) / (var + 1e-5).sqrt() * w + b


def attention(q, k, v):
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    return F.softmax(scores, axis=-1) @ v


def attention_scores_masked(q, k):
    s = q @ k.T
    mask = tg.tensor(np.tril(np.ones((s.shape[0], s.shape[1]))) > 0)
    return tg.where(mask, s, -1e9).softmax(-1)


def mse_broadcast(pred, target):
    return F.mse_loss(pred, target)            # (N,3) against (3,)


def huber(pred, target):
    d = (pred - target).abs()
    return tg.where(d < 1.0, 0.5 * d * d, d - 0.5).mean()


def logsumexp_rows(x):
    return x.logsumexp(axis=1)


def gelu_mix(x):
    return F.gelu(x) + F.gelu(x, approximate="tanh") * 0.5


def variance_std(x):
    return x.var(axis=0) + x.std(axis=1, unbiased=True).sum()


def max_min(x):
    return x.max(axis=1).values - x.min(axis=0).values.sum() + x.amax(axis=(0, 1))


def prod_rows(x):
    return x.prod(axis=1)


def clamp_sigmoid(x):
    return x.clamp(-0.5, 0.7).sigmoid() * x.tanh()


def views(x):
    y = x.reshape(3, 8).transpose(0, 1)[1:, ::2]
    return y.unsqueeze(0).flatten().sum() * x.reshape(-1)[:8]


def cat_stack(a, b):
    return tg.cat([a, b * 2], axis=0).sum(axis=0) + tg.stack([a, b], axis=1).mean(axis=(0, 1))


def gather_rows(x, idx):
    return x[idx].sum(axis=0) * x[1]


def pow_tensor(a, b):
    return a.abs() ** b + (a * a + 1).sqrt().log()


def mean_center(x, s):
    return ((x - x.mean(axis=0, keepdims=True)) * s).exp().sum(axis=(0, 1))


def cosine(a, b):
    return (a * b).sum(-1) / ((a * a).sum(-1).sqrt() * (b * b).sum(-1).sqrt())


def batched_matmul(a, b):
    return (a @ b).relu().sum(axis=0)


def multi_out(x, w, scale):
    y = x @ w
    return {"y": y * scale, "stats": (y.sum(), y.max(axis=0)), "n": 3, "tag": "ok"}


def scalar_args(x, alpha, beta=2.0):
    return (x * alpha - beta).square()


def detach_part(x, w):
    return (x * w).sum() + (x.detach() * w * w).sum()


def softplus_bce(z, t):
    p = z.sigmoid()
    return -(t * p.log() + (1 - t) * (1 - p).log()).mean()


def _ce_targets():
    return tg.tensor(np.array([0, 2, 1, 2, 0]), dtype=tg.int64)


CASES = {
    "mlp_loss": (mlp_loss, lambda: (rnd(5, 4, grad=False, seed=1), rnd(4, 6, seed=2), rnd(6, seed=3),
                                    rnd(6, 2, seed=4), rnd(2, seed=5), rnd(5, 2, grad=False, seed=6))),
    "mlp_tanh_ce": (mlp_tanh_ce, lambda: (rnd(5, 4, seed=1), rnd(6, 4, seed=2), rnd(6, seed=3),
                                          rnd(3, 6, seed=4), rnd(3, seed=5), _ce_targets())),
    "softmax": (softmax, lambda: (rnd(3, 5, seed=7),)),
    "log_softmax0": (log_softmax0, lambda: (rnd(4, 3, seed=8),)),
    "layernorm": (layernorm, lambda: (rnd(3, 6, seed=9), rnd(6, seed=10), rnd(6, seed=11))),
    "layernorm_by_hand": (layernorm_by_hand, lambda: (rnd(3, 6, seed=9), rnd(6, seed=10), rnd(6, seed=11))),
    "attention": (attention, lambda: (rnd(2, 4, 8, seed=12), rnd(2, 5, 8, seed=13), rnd(2, 5, 3, seed=14))),
    "attention_scores_masked": (attention_scores_masked, lambda: (rnd(4, 3, seed=15), rnd(4, 3, seed=16))),
    "mse_broadcast": (mse_broadcast, lambda: (rnd(5, 3, seed=17), rnd(3, seed=18))),
    "huber": (huber, lambda: (rnd(4, 3, seed=19, scale=2), rnd(4, 3, seed=20))),
    "logsumexp_rows": (logsumexp_rows, lambda: (rnd(3, 7, seed=21, scale=5),)),
    "gelu_mix": (gelu_mix, lambda: (rnd(10, seed=22, scale=2),)),
    "variance_std": (variance_std, lambda: (rnd(4, 5, seed=23),)),
    "max_min": (max_min, lambda: (rnd(4, 5, seed=24),)),
    "prod_rows": (prod_rows, lambda: (rnd(3, 4, seed=25),)),
    "clamp_sigmoid": (clamp_sigmoid, lambda: (rnd(12, seed=26),)),
    "views": (views, lambda: (rnd(2, 3, 4, seed=27),)),
    "cat_stack": (cat_stack, lambda: (rnd(3, 4, seed=28), rnd(3, 4, seed=29))),
    "gather_rows": (gather_rows, lambda: (rnd(4, 3, seed=30), tg.tensor(np.array([3, 0, 3]), dtype=tg.int64))),
    "pow_tensor": (pow_tensor, lambda: (rnd(6, seed=31), rnd(6, seed=32))),
    "mean_center": (mean_center, lambda: (rnd(4, 3, seed=33), rnd(3, seed=34, scale=0.3))),
    "cosine": (cosine, lambda: (rnd(4, 6, seed=35), rnd(6, seed=36))),
    "batched_matmul": (batched_matmul, lambda: (rnd(3, 2, 4, seed=37), rnd(3, 4, 5, seed=38))),
    "multi_out": (multi_out, lambda: (rnd(3, 4, seed=39), rnd(4, 2, seed=40), 0.25)),
    "scalar_args": (scalar_args, lambda: (rnd(5, seed=41), 1.5)),
    "detach_part": (detach_part, lambda: (rnd(5, seed=42), rnd(5, seed=43))),
    "softplus_bce": (softplus_bce, lambda: (rnd(6, seed=44), rnd(6, grad=False, seed=45).sigmoid())),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_real_functions_match_eager(name, backend):
    fn, make = CASES[name]
    with warnings.catch_warnings():
        warnings.simplefilter("error", tg.BroadcastWarning)   # none of these broadcast suspiciously
        compare(fn, make(), backend)


def test_there_are_at_least_twenty_real_functions():
    assert len(CASES) >= 20


def test_static_outputs_and_structure_are_preserved(backend):
    x, w = rnd(3, 4, seed=1), rnd(4, 2, seed=2)
    out = tg.compile(multi_out, backend=backend)(x, w, 0.5)
    assert set(out) == {"y", "stats", "n", "tag"} and out["n"] == 3 and out["tag"] == "ok"
    assert isinstance(out["stats"], tuple) and len(out["stats"]) == 2


def test_keyword_and_default_arguments(backend):
    cf = tg.compile(scalar_args, backend=backend)
    x = rnd(4, seed=3)
    np.testing.assert_allclose(cf(x, 2.0, beta=0.5).detach().numpy(), scalar_args(x, 2.0, beta=0.5).detach().numpy())
    np.testing.assert_allclose(cf(x, 2.0).detach().numpy(), scalar_args(x, 2.0).detach().numpy())


# ---------------------------------------------------------------------- backward IR by hand

def test_backward_ir_of_squared_error_matches_hand_derivation(backend):
    @tg.compile(backend=backend)
    def sq(x, w, b, y):
        return ((x * w + b - y) ** 2).sum()

    x, w, b, y = rnd(5, grad=False, seed=1), rnd(5, seed=2), rnd(5, seed=3), rnd(5, grad=False, seed=4)
    text = sq.ir(x, w, b, y, stage="backward")
    _round_trip(text)
    g = parse(text)
    ops = [n.op for n in g.nodes]
    # readable: no pow, no where, no comparisons left from the generic pow rule
    assert not {"pow", "where", "eq"} & set(ops), text
    assert ops.count("matmul") == 0 and len(ops) <= 8, text
    # inputs: the cotangent and the saved residual r = x*w+b-y and x; outputs: dL/dw, dL/db
    assert [v.name for v in g.inputs][0] == "g0" and g.inputs[0].shape == ()
    assert len(g.outputs) == 2 and all(o.shape == (5,) for o in g.outputs)
    assert len(g.inputs) == 3, text
    # numerically the hand derivation: dL/dw = 2 g r x, dL/db = 2 g r
    xs, ws, bs, ys = (t.detach().numpy() for t in (x, w, b, y))
    r = xs * ws + bs - ys
    # the saved values are the forward graph's trailing outputs
    fwd_outs = run(parse(sq.ir(x, w, b, y, stage="forward")), xs, ws, bs, ys)
    n_saved = len(g.inputs) - 1
    dw, db = run(g, np.array(0.7), *fwd_outs[-n_saved:])
    np.testing.assert_allclose(dw, 2 * 0.7 * r * xs, rtol=1e-12)
    np.testing.assert_allclose(db, 2 * 0.7 * r, rtol=1e-12)
    # and through autograd
    loss = sq(x, w, b, y)
    loss.backward()
    np.testing.assert_allclose(w.grad.detach().numpy(), 2 * r * xs, rtol=1e-12)
    np.testing.assert_allclose(b.grad.detach().numpy(), 2 * r, rtol=1e-12)


def test_spec_step_backward(backend):
    @tg.compile(backend=backend)
    def step(x, w, b):
        return (x @ w + b).relu().sum()

    x, w, b = rnd(8, 5, grad=False, seed=1), rnd(5, 3, seed=2), rnd(3, seed=3)
    loss = step(x, w, b)
    loss.backward()
    h = x.detach().numpy() @ w.detach().numpy() + b.detach().numpy()
    np.testing.assert_allclose(w.grad.detach().numpy(), x.detach().numpy().T @ (h > 0), rtol=1e-12)
    np.testing.assert_allclose(b.grad.detach().numpy(), (h > 0).sum(0), rtol=1e-12)
    assert "Compiled" in type(loss.grad_fn).__name__ or "Compiled" in repr(loss.grad_fn)


# ---------------------------------------------------------------------- training loops

def _model(seed):
    tg.manual_seed(seed)
    return tg.nn.Sequential(tg.nn.Linear(4, 8, dtype=F64), tg.nn.Tanh(), tg.nn.Linear(8, 3, dtype=F64))


def _data():
    rng = np.random.default_rng(0)
    return tg.tensor(rng.standard_normal((16, 4)), dtype=F64), \
        tg.tensor(rng.integers(0, 3, 16), dtype=tg.int64)


@pytest.mark.parametrize("opt_name", ["sgd_momentum", "adam"])
@pytest.mark.parametrize("style", ["whole_step", "loss_only"])
def test_training_loop_matches_eager(opt_name, style, backend):
    X, Y = _data()
    models = [_model(0), _model(0)]
    make = {"sgd_momentum": lambda p: tg.optim.SGD(p, lr=0.1, momentum=0.9),
            "adam": lambda p: tg.optim.Adam(p, lr=0.01)}[opt_name]
    opts = [make(list(m.parameters())) for m in models]

    def eager_step(model, opt, X, Y):
        loss = F.cross_entropy(model(X), Y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    if style == "whole_step":
        @tg.compile(backend=backend)
        def compiled_step(model, opt, X, Y):
            loss = F.cross_entropy(model(X), Y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            return loss
    else:
        loss_fn = tg.compile(lambda model, X, Y: F.cross_entropy(model(X), Y), backend=backend)

        def compiled_step(model, opt, X, Y):
            loss = loss_fn(model, X, Y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            return loss

    for i in range(5):
        le = eager_step(models[0], opts[0], X, Y)
        lc = compiled_step(models[1], opts[1], X, Y)
        np.testing.assert_allclose(lc.detach().numpy(), le.detach().numpy(), rtol=1e-10, atol=1e-12)
    for (n, pe), (_, pc) in zip(models[0].named_parameters(), models[1].named_parameters()):
        np.testing.assert_allclose(pc.detach().numpy(), pe.detach().numpy(), rtol=1e-10, atol=1e-12, err_msg=n)
        assert pc.grad is None and pe.grad is None
    cf = compiled_step if style == "whole_step" else loss_fn
    assert cf.stats()["traces"] <= 2, cf.stats()["retrace_reasons"]
    # parameters changed at all (the test would be vacuous otherwise)
    assert not np.allclose(models[1][0].weight.detach().numpy(), _model(0)[0].weight.detach().numpy())


def test_function_returning_none_exists_for_its_updates(backend):
    p = rnd(3, seed=1)
    m = tg.zeros(3, dtype=F64)
    p_ref, m_ref = p.detach().numpy().copy(), np.zeros(3)

    @tg.compile(backend=backend)
    def update(p, lr):
        loss = (p * p).sum()
        loss.backward()
        with tg.no_grad():
            m.mul_(0.9).add_(p.grad)       # captured momentum
            p -= lr * m
        p.grad = None

    for _ in range(5):
        assert update(p, 0.1) is None
        g = 2 * p_ref
        m_ref = 0.9 * m_ref + g
        p_ref = p_ref - 0.1 * m_ref
    np.testing.assert_allclose(p.detach().numpy(), p_ref, rtol=1e-12)
    np.testing.assert_allclose(m.detach().numpy(), m_ref, rtol=1e-12)
    assert p.grad is None
    assert update.stats()["traces"] == 1


def test_grad_accumulates_into_existing_grad(backend):
    w = rnd(4, seed=1)
    cf = tg.compile(lambda w: (w * w).sum(), backend=backend)
    cf(w).backward()
    cf(w).backward()
    np.testing.assert_allclose(w.grad.detach().numpy(), 4 * w.detach().numpy(), rtol=1e-12)


def test_grad_of_compiled_output_with_tg_grad_and_partial_use(backend):
    a, b = rnd(3, seed=1), rnd(3, seed=2)
    cf = tg.compile(lambda a, b: (a * b, a + b), backend=backend)
    p, s = cf(a, b)
    (ga,) = tg.grad((p * s).sum(), [a])
    pe, se = a * b, a + b
    (ge,) = tg.grad((pe * se).sum(), [a])
    np.testing.assert_allclose(ga.detach().numpy(), ge.detach().numpy(), rtol=1e-12)
    p, s = cf(a, b)
    ga, gb = tg.grad(s.sum(), [a, b])      # one output unused
    np.testing.assert_allclose(ga.detach().numpy(), np.ones(3))
    np.testing.assert_allclose(gb.detach().numpy(), np.ones(3))


def test_compiled_inside_eager_graph(backend):
    x = rnd(4, seed=1)
    cf = tg.compile(lambda h: h.exp().sum(), backend=backend)
    loss = cf(x * 3) + x.sum()
    loss.backward()
    np.testing.assert_allclose(x.grad.detach().numpy(), 3 * np.exp(3 * x.detach().numpy()) + 1, rtol=1e-12)


def test_no_autograd_node_under_no_grad(backend):
    w = rnd(3, seed=1)
    cf = tg.compile(lambda w: (w * 2).sum(), backend=backend)
    with tg.no_grad():
        out = cf(w)
    assert out.grad_fn is None and not out.requires_grad
    out = cf(w)
    assert out.requires_grad and out.grad_fn is not None


# ---------------------------------------------------------------------- no_grad / detach inside

def test_no_grad_and_detach_inside_behave_as_eager(backend):
    def f(a, w):
        with tg.no_grad():
            s = (a * w).sum()
        t = w.detach() * a
        return (a * w).sum() + s * w.sum() + t.sum(), s, t

    a, w = rnd(3, seed=1), rnd(3, seed=2)
    cf = compare(f, (a, w), backend)
    outs = cf(a, w)
    assert outs[0].requires_grad and not outs[1].requires_grad
    assert outs[1].grad_fn is None
    (ga,) = tg.grad(outs[2].sum(), [a])      # t depends on a but not on w
    np.testing.assert_allclose(ga.detach().numpy(), w.detach().numpy())


# ---------------------------------------------------------------------- captured tensors

SCALE = tg.tensor([1.0, 2.0, 3.0], dtype=F64)


def uses_global(x):
    return x * SCALE


def test_captured_global_read_at_call_time(backend):
    cf = tg.compile(uses_global, backend=backend)
    x = rnd(3, seed=1, grad=False)
    np.testing.assert_allclose(cf(x).detach().numpy(), x.detach().numpy() * [1, 2, 3])
    SCALE.mul_(10.0)
    try:
        np.testing.assert_allclose(cf(x).detach().numpy(), x.detach().numpy() * [10, 20, 30])
        assert cf.stats()["traces"] == 1
    finally:
        SCALE.div_(10.0)


def test_captured_closure_read_at_call_time_and_gets_grad(backend):
    w = rnd(3, seed=2)
    cf = tg.compile(lambda x: (x * w).sum(), backend=backend)
    x = rnd(3, seed=1, grad=False)
    cf(x).backward()
    np.testing.assert_allclose(w.grad.detach().numpy(), x.detach().numpy())
    with tg.no_grad():
        w.add_(1.0)
    np.testing.assert_allclose(cf(x).detach().numpy(), (x.detach().numpy() * w.detach().numpy()).sum())
    # rebinding a captured variable to another tensor is seen (a retrace)
    t = tg.ones(3, dtype=F64)
    cf2 = tg.compile(lambda x: x * t, backend=backend)
    cf2(x)
    t = tg.full((3,), 2.0, dtype=F64)
    np.testing.assert_allclose(cf2(x).detach().numpy(), 2 * x.detach().numpy())
    assert cf2.stats()["traces"] == 2 and "closure variable t" in cf2.stats()["retrace_reasons"][0]
    t = tg.ones(4, dtype=F64)
    with pytest.raises(tg.BroadcastError):
        cf2(x)


def test_rebound_global_is_read(backend):
    global SCALE
    cf = tg.compile(uses_global, backend=backend)
    x = rnd(3, seed=1, grad=False)
    old = SCALE
    cf(x)
    try:
        SCALE = tg.tensor([5.0, 6.0, 7.0], dtype=F64)
        np.testing.assert_allclose(cf(x).detach().numpy(), x.detach().numpy() * [5, 6, 7])
        assert cf.stats()["retrace_reasons"] == ["global SCALE: rebound to another object"]
    finally:
        SCALE = old


# ---------------------------------------------------------------------- cache, guards, stats

def test_stats_and_cache(backend):
    cf = tg.compile(lambda x: (x * 2).sum(), backend=backend)
    st = cf.stats()
    for k in ("traces", "cache_hits", "compile_seconds", "kernels", "retrace_reasons"):
        assert k in st
    assert st["traces"] == 0
    x = rnd(4, grad=False)
    cf(x)
    cf(x)
    cf(rnd(4, grad=False, seed=5))
    st = cf.stats()
    assert st["traces"] == 1 and st["cache_hits"] == 2 and st["compile_seconds"] > 0 and st["kernels"] >= 1
    assert st["retrace_reasons"] == []
    cf(rnd(5, grad=False))
    st = cf.stats()
    assert st["traces"] == 2 and st["retrace_reasons"] == ["x: dim 0 became symbolic B (4 -> 5)"]
    cf(x)          # the old signature is still cached
    assert cf.stats()["traces"] == 2


@pytest.mark.parametrize("change, reason", [
    (lambda x: x.float(), "dtype float64 -> float32"),
    (lambda x: x.detach().requires_grad_(True), "requires_grad False -> True"),
])
def test_retrace_reasons(change, reason, backend):
    cf = tg.compile(lambda x: x.sum(), backend=backend)
    x = rnd(3, grad=False)
    cf(x)
    cf(change(x))
    assert cf.stats()["traces"] == 2
    assert cf.stats()["retrace_reasons"] == [f"x: {reason}"]


def test_static_argument_value_retraces(backend):
    cf = tg.compile(scalar_args, backend=backend)
    x = rnd(3, grad=False)
    cf(x, 1.0)
    cf(x, 1.0)
    cf(x, 2.0)
    assert cf.stats()["traces"] == 2
    assert cf.stats()["retrace_reasons"] == ["alpha: value 1.0 -> 2.0"]


def test_warning_after_eight_retraces_names_the_changing_part(backend):
    @tg.compile(backend=backend, dynamic=False)       # sizes fixed: each new size retraces
    def f(x, n):
        return x * n

    y = rnd(2, grad=False)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        for i in range(8):
            f(rnd(i + 1, grad=False), 1.0)
        assert not [w for w in rec if "traced" in str(w.message)]
        f(rnd(20, grad=False), 1.0)          # the 9th trace, 8th retrace
        f(y, 1.0)
        f(y, 2.0)
    msgs = [str(w.message) for w in rec if "traced" in str(w.message)]
    assert len(msgs) == 1, msgs
    assert "x" in msgs[0] and "9" in msgs[0] and "n (" not in msgs[0]
    assert rec[-1].filename == __file__ or any(w.filename == __file__ for w in rec)


def test_grad_none_belongs_to_signature(backend):
    w = rnd(3)
    cf = tg.compile(lambda w: (w * w).sum(), backend=backend)
    cf(w).backward()
    cf(w).backward()
    np.testing.assert_allclose(w.grad.detach().numpy(), 4 * w.detach().numpy())


# ---------------------------------------------------------------------- introspection

def test_ir_stages_and_make_ir(backend):
    @tg.compile(backend=backend)
    def f(x, w):
        return (x @ w).tanh().sum()

    x, w = rnd(3, 4, grad=False), rnd(4, 2)
    traced, fwd, bwd = (f.ir(x, w, stage=s) for s in ("traced", "forward", "backward"))
    for t in (traced, fwd, bwd):
        _round_trip(t)
    assert fwd.startswith("graph f(%x: f64[3,4], %w: f64[4,2]) {")
    assert bwd.startswith("graph f_backward(%g0: f64[]")
    kernels = f.ir(x, w, stage="kernels")
    assert "matmul" in kernels and "tanh" in kernels
    with pytest.raises(ValueError, match="stage"):
        f.ir(x, w, stage="bogus")
    assert f.stats()["traces"] == 1       # introspection shares the cache
    made = tg.make_ir(f.fn)(x, w)
    plain = tg.make_ir(lambda x, w: (x @ w).tanh().sum())(x, w)
    assert made.splitlines()[1:] == fwd.splitlines()[1:]
    assert plain.splitlines()[1:] == fwd.splitlines()[1:]
    dot = f.to_dot(x, w)
    assert dot.startswith('digraph "f"') and "matmul" in dot and dot.rstrip().endswith("}")
    assert dot.count("->") >= 4


def test_backward_stage_without_grad_is_a_clear_error(backend):
    cf = tg.compile(lambda x: x.exp(), backend=backend)
    with pytest.raises(ValueError, match="requires_grad"):
        cf.ir(rnd(3, grad=False), stage="backward")


def test_traced_vs_forward_run_the_same(backend):
    fn, make = CASES["layernorm"]
    args = make()
    cf = tg.compile(fn, backend=backend)
    arrays = [a.detach().numpy() for a in args]
    t = run(parse(cf.ir(*args, stage="traced")), *arrays)
    f = run(parse(cf.ir(*args, stage="forward")), *arrays)
    np.testing.assert_allclose(t[0], fn(*args).detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(f[0], t[0], rtol=1e-12)
    assert len(parse(cf.ir(*args, stage="forward")).nodes) <= len(parse(cf.ir(*args, stage="traced")).nodes)


_DUMP_SCRIPT = """
import tracegrad as tg
@tg.compile
def dumped(x):
    return (x * 2.0).sum()
x = tg.ones(3, dtype=tg.float64, requires_grad=True)
dumped(x)
"""


def test_dump_env_to_stderr_and_dir(tmp_path):
    env = dict(os.environ, TRACEGRAD_DUMP="traced,forward,backward,kernels")
    env.pop("TRACEGRAD_DUMP_DIR", None)
    r = subprocess.run([sys.executable, "-c", _DUMP_SCRIPT], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    for stage in ("traced", "forward", "backward", "kernels"):
        assert f"dumped: {stage}" in r.stderr
    assert "graph dumped(%x: f64[3])" in r.stderr and "graph dumped_backward(" in r.stderr
    env["TRACEGRAD_DUMP_DIR"] = str(tmp_path)
    r = subprocess.run([sys.executable, "-c", _DUMP_SCRIPT], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "graph dumped" not in r.stderr
    files = sorted(p.name for p in tmp_path.iterdir())
    assert len(files) == 4, files
    fwd = next(p for p in tmp_path.iterdir() if "forward" in p.name).read_text()
    _round_trip(fwd.rstrip("\n"))


# ---------------------------------------------------------------------- errors

def _line_of(fn, marker):
    src, first = inspect.getsourcelines(fn)
    return first + next(i for i, s in enumerate(src) if marker in s)


def test_data_dependent_control_flow_names_the_line(backend):
    def f(x):
        if x.sum() > 0:          # BRANCH
            return x
        return -x

    cf = tg.compile(f, backend=backend)
    with pytest.raises(tg.TraceError) as ei:
        cf(rnd(3))
    msg = str(ei.value)
    assert f"{__file__}:{_line_of(f, 'BRANCH')}" in msg and "tg.where" in msg
    assert isinstance(ei.value, RuntimeError)


@pytest.mark.parametrize("conv", ["float", "item", "bool", "int"])
def test_value_reads_raise_trace_error(conv, backend):
    def f(x):
        s = x.sum()
        v = {"float": float, "item": lambda t: t.item(), "bool": bool, "int": int}[conv](s)   # READ
        return x * v

    with pytest.raises(tg.TraceError) as ei:
        tg.compile(f, backend=backend)(rnd(3))
    assert f"{__file__}:{_line_of(f, 'READ')}" in str(ei.value)


@pytest.mark.parametrize("bad", [{1, 2}, object(), np.zeros(3), b"bytes", 1 + 2j])
def test_unsupported_argument_types_name_the_argument(bad, backend):
    def f(x, weird):
        return x

    with pytest.raises(TypeError) as ei:
        tg.compile(f, backend=backend)(rnd(3), bad)
    assert "weird" in str(ei.value) and type(bad).__name__ in str(ei.value)


def test_unsupported_nested_argument_names_its_path(backend):
    def f(batch):
        return batch["x"]

    with pytest.raises(TypeError) as ei:
        tg.compile(f, backend=backend)({"x": rnd(3), "meta": [1, object()]})
    assert "batch_meta_1" in str(ei.value) or "meta" in str(ei.value)


@pytest.mark.parametrize("ret", [lambda x: object(), lambda x: np.ones(3), lambda x: [x, {1}]])
def test_non_tensor_results_are_a_clear_error(ret, backend):
    def returns_junk(x):
        return ret(x)

    with pytest.raises(TypeError, match="returns_junk returned a"):
        tg.compile(returns_junk, backend=backend)(rnd(3))


def test_shape_error_while_tracing_names_the_user_line(backend):
    def f(a, b):
        c = a.exp()
        return c + b            # BAD-ADD

    with pytest.raises(tg.BroadcastError) as ei:
        tg.compile(f, backend=backend)(rnd(3), rnd(4))
    msg = str(ei.value)
    assert "dimension -1" in msg and f"{__file__}:{_line_of(f, 'BAD-ADD')}" in msg


def test_broadcast_warning_fires_in_traced_code(backend):
    def f(a, b):
        return a + b            # SUSPICIOUS

    with pytest.warns(tg.BroadcastWarning) as rec:
        tg.compile(f, backend=backend)(rnd(3, 1), rnd(3))
    assert any(w.filename == __file__ and w.lineno == _line_of(f, "SUSPICIOUS") for w in rec)


_DEVICE_SCRIPT = """
import tracegrad as tg
@tg.compile
def add(a, b):
    return a + b
a = tg.ones(3)
b = tg.ones(3, device="cuda")
try:
    add(a, b)
except Exception as e:
    print(type(e).__name__, "|", e)
"""


def test_tensors_on_the_wrong_device():
    try:
        tg.ones(1, device="cuda")
    except RuntimeError as e:
        pytest.skip(f"no cuda tensors in this build: {e}")
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    r = subprocess.run([sys.executable, "-c", _DEVICE_SCRIPT], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    out = r.stdout.strip()
    if not out:
        pytest.fail("mixing cpu and cuda tensors in a compiled function raised nothing")
    name, msg = out.split("|", 1)
    assert "cpu" in msg and "cuda" in msg, out
    assert "<string>:5" in msg or "add" in msg or "argument" in msg, out


def test_traced_tensor_escaping_is_an_error(backend):
    leaked = []

    def f(x):
        y = x * 2
        leaked.append(y)
        return y

    cf = tg.compile(f, backend=backend)
    cf(rnd(3))
    g = tg.compile(lambda x: x + leaked[0], backend=backend)
    with pytest.raises(tg.TraceError):
        g(rnd(3))


def test_graph_inputs_are_named_after_arguments_modules_and_captured_variables():
    import tracegrad.nn as nn
    model = nn.Linear(3, 2)
    x = tg.randn(4, 3)
    scale = tg.tensor(2.0)

    def f(m, x):
        return (m(x) * scale * x.sum()).sum()
    text = tg.compile(f, backend="interpret").ir(model, x)
    header = text.splitlines()[0]
    for name in ("%x", "%m.weight", "%m.bias", "%scale"):
        assert name in header, header
    parse(text)                                   # the names round-trip


def test_input_names_stay_unique():
    # the tuple argument's first tensor is named x_0, and so is the captured global
    f = eval("lambda x: x[0] + x[1] + x_0", {"x_0": tg.randn(3)})
    text = tg.compile(f, backend="interpret").ir((tg.randn(3), tg.randn(3)))
    names = [p.split(":")[0] for p in text.splitlines()[0].split("(", 1)[1].split(", ")]
    assert len(names) == 3 and len(set(names)) == 3, text
    parse(text)


def test_updating_a_tensor_that_another_input_views_is_refused(backend):
    w = tg.randn(4, 3)
    row = w[0]

    def f(x):
        w.add_(1.0)
        return (x * row).sum()          # the view read after the update: eagerly it sees the update
    before = w.numpy().copy()
    with pytest.raises(tg.TraceError, match="shares its memory"):
        tg.compile(f, backend=backend)(tg.randn(3))
    np.testing.assert_array_equal(w.numpy(), before)     # nothing was written

    def g(x):
        y = (x * row).sum()             # read before the update: as eagerly
        w.add_(1.0)
        return y
    x = tg.randn(3)
    want = (x.numpy() * before[0]).sum()
    np.testing.assert_allclose(tg.compile(g, backend=backend)(x).item(), want, rtol=1e-6)
    np.testing.assert_allclose(w.numpy(), before + 1.0, rtol=1e-6)
