"""A compiled call whose results are regularly followed by `loss.backward()` computes the gradients
with its forward (jit/joined.py): the program joined by ir/passes/join.py, the gradients kept on the
node and handed over by backward(). Checked: when an entry switches and switches back (what its
calls see), that every result and gradient equals the apart path's and eager's, and that everything
around the call the apart path gets right stays right: an input changed in place before backward(),
retain_graph, an explicit gradient, a non-leaf input, accumulation into .grad, no_grad calls,
threads, an entry where joining does not pay.

JOIN_MIN_BYTES is lowered to 0 so small inputs qualify (CI speed). Oracles: eager tracegrad and the
apart path of the same compiled function."""
import os
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tracegrad as tg
import tracegrad.jit.joined as joined
from threads import run_threads

EXAMPLES = int(os.environ.get("TRACEGRAD_HYPOTHESIS_EXAMPLES", "8"))


@pytest.fixture(autouse=True)
def small_entries_qualify(monkeypatch):
    monkeypatch.setattr(joined, "JOIN_MIN_BYTES", 0)


def layernorm_loss(x, w, b, g):
    mean = x.mean(axis=1, keepdims=True)
    d = x - mean
    var = (d * d).mean(axis=1, keepdims=True)
    return ((d / (var + 1e-5).sqrt() * w + b) * g).sum()


def rms_tanh_loss(x, w, b, g):
    r = x / ((x * x).mean(axis=-1, keepdims=True) + 1.0).sqrt()
    return ((r * w + b).tanh() * g).sum() + (x * b).mean()


def softmax_loss(x, w, b, g):
    e = (x * w + b - (x * w).amax(axis=-1, keepdims=True)).exp()
    return ((e / e.sum(axis=-1, keepdims=True)) * g).sum() + (x.tanh() * g).mean()


FUNCTIONS = {"layernorm": layernorm_loss, "rms_tanh": rms_tanh_loss, "softmax": softmax_loss}


def leaves(rows, cols, dtype, seed=0):
    rng = np.random.default_rng(seed)
    x = tg.tensor(rng.standard_normal((rows, cols)).astype(dtype), requires_grad=True)
    w = tg.tensor(rng.standard_normal(cols).astype(dtype), requires_grad=True)
    b = tg.tensor(rng.standard_normal(cols).astype(dtype), requires_grad=True)
    g = tg.tensor(rng.standard_normal((rows, cols)).astype(dtype))
    return [x, w, b, g]


def entry_of(cf):
    (entry,) = cf.cache.values()
    return entry


def step(cf, ts):
    """A training step's forward and backward (the leaves' .grad reset first: whether .grad is None
    is part of a compiled function's signature)."""
    for t in ts[:3]:
        t.grad = None
    loss = cf(*ts)
    loss.backward()
    return loss


def values(loss, ts):
    return [loss.detach().numpy().copy()] + [t.grad.numpy().copy() for t in ts[:3]]


def tol(dtype):
    return dict(rtol=2e-5, atol=2e-5) if dtype == np.float32 else dict(rtol=1e-11, atol=1e-11)


@settings(max_examples=EXAMPLES, deadline=None)
@given(name=st.sampled_from(sorted(FUNCTIONS)), rows=st.sampled_from([1, 3, 17, 130]),
       cols=st.sampled_from([1, 7, 64, 333]), dtype=st.sampled_from([np.float32, np.float64]),
       seed=st.integers(0, 2 ** 16))
def test_joined_steps_equal_apart_and_eager(name, rows, cols, dtype, seed):
    fn = FUNCTIONS[name]
    eager_ts = leaves(rows, cols, dtype, seed)
    want = values(step(lambda *a: fn(*a), eager_ts), eager_ts)
    cf = tg.compile(fn)
    for call in range(joined.JOIN_AFTER + 2):
        ts = leaves(rows, cols, dtype, seed)
        got = values(step(cf, ts), ts)
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, **tol(dtype))
    entry = entry_of(cf)
    assert entry.joined is not None, "the entry never chose"
    assert entry.joined or cols == 1, "joining the forward and the backward did not pay"


def test_switches_after_backward_follows_and_back_when_it_does_not():
    cf = tg.compile(layernorm_loss)
    ts = leaves(8, 16, np.float64)
    nodes = []
    for _ in range(joined.JOIN_AFTER + 1):
        for t in ts[:3]:
            t.grad = None
        loss = cf(*ts)
        nodes.append(loss.grad_fn.ahead is not None)
        loss.backward()
        assert loss.grad_fn.ahead is None         # handed over
    assert nodes == [False] * joined.JOIN_AFTER + [True]
    for t in ts[:3]:
        t.grad = None
    evaluation = cf(*ts)                      # still joined: nothing told it otherwise yet
    assert evaluation.grad_fn.ahead is not None
    assert cf(*ts).grad_fn.ahead is None      # the call before was not followed by backward()
    with tg.no_grad():
        assert cf(*ts).grad_fn is None


def test_an_input_changed_in_place_before_backward_raises_as_apart():
    cf = tg.compile(layernorm_loss)
    ts = leaves(8, 16, np.float64)
    for _ in range(joined.JOIN_AFTER):
        step(cf, ts)
    for t in ts[:3]:
        t.grad = None
    loss = cf(*ts)
    assert loss.grad_fn.ahead is not None
    with tg.no_grad():
        ts[0].mul_(2.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


@pytest.mark.parametrize("how", ["retain_graph", "explicit", "non_leaf", "accumulate", "autograd_grad"])
def test_other_uses_of_a_joined_node_get_the_apart_results(how):
    dtype = np.float64
    cf = tg.compile(layernorm_loss)
    ts = leaves(9, 20, dtype)
    for _ in range(joined.JOIN_AFTER):
        step(cf, ts)
    eager = leaves(9, 20, dtype)
    compiled = leaves(9, 20, dtype)
    for t in eager[:3] + compiled[:3]:
        t.grad = None
    for ts_, fn in ((eager, layernorm_loss), (compiled, cf)):
        if how == "retain_graph":
            loss = fn(*ts_)
            loss.backward(retain_graph=True)
            loss.backward()
            got = [t.grad.numpy() for t in ts_[:3]]
        elif how == "explicit":
            fn(*ts_).backward(tg.tensor(2.5, dtype=tg.float64))
            got = [t.grad.numpy() for t in ts_[:3]]
        elif how == "non_leaf":
            x = ts_[0] * 1.5
            fn(x, *ts_[1:]).backward()
            got = [t.grad.numpy() for t in ts_[:3]]
        elif how == "accumulate":
            for t in ts_[:3]:
                t.grad = tg.full(t.shape, 0.25, dtype=t.dtype)
            for _ in range(3):
                fn(*ts_).backward()
            got = [t.grad.numpy() for t in ts_[:3]]
        else:
            got = [g.numpy() for g in tg.autograd.grad(fn(*ts_), ts_[:3])]
        if ts_ is eager:
            want = [a.copy() for a in got]
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-11, atol=1e-11)


def test_threads_each_get_their_own_gradients():
    cf = tg.compile(layernorm_loss)
    per_thread = [leaves(12, 40, np.float64, seed=i) for i in range(4)]
    want = []
    for i in range(4):
        ts = leaves(12, 40, np.float64, seed=i)
        want.append(values(step(lambda *a: layernorm_loss(*a), ts), ts))

    def work(i):
        for _ in range(6):
            ts = per_thread[i]
            for t in ts[:3]:
                t.grad = None
            got = values(step(cf, ts), ts)
            for a, b in zip(got, want[i]):
                np.testing.assert_allclose(a, b, rtol=1e-11, atol=1e-11)
    run_threads(work, 4)


def test_an_entry_where_joining_does_not_pay_stays_apart():
    def mlp_loss(x, w1, w2):
        return ((x @ w1).relu() @ w2).sum()
    rng = np.random.default_rng(0)
    x = tg.tensor(rng.standard_normal((16, 8)))
    w1, w2 = (tg.tensor(rng.standard_normal(s), requires_grad=True) for s in ((8, 8), (8, 3)))
    cf = tg.compile(mlp_loss)
    for _ in range(joined.JOIN_AFTER + 2):
        w1.grad = w2.grad = None
        cf(x, w1, w2).backward()
    assert entry_of(cf).joined is False
    assert entry_of(cf).call.__code__.co_filename.startswith("<straight call"), "calls still choose"
    w1e, w2e = (tg.tensor(w.detach().numpy(), requires_grad=True) for w in (w1, w2))
    mlp_loss(x, w1e, w2e).backward()
    np.testing.assert_allclose(w1.grad.numpy(), w1e.grad.numpy(), rtol=1e-12)
    np.testing.assert_allclose(w2.grad.numpy(), w2e.grad.numpy(), rtol=1e-12)


def test_the_joined_layernorm_reads_its_inputs_once():
    """One row kernel: the statistics, the loss, every gradient (the forward and backward apart are
    one kernel each, and read x and g twice between them)."""
    cf = tg.compile(layernorm_loss)
    ts = leaves(64, 96, np.float32)
    for _ in range(joined.JOIN_AFTER + 1):
        step(cf, ts)
    kernels = entry_of(cf).joined_program.kernels
    assert [k.kind for k in kernels] == ["loop"], kernels
    for t in ts[:3]:
        t.grad = None
    text = cf.ir(*ts, stage="kernels")
    assert "kernels layernorm_loss_with_gradient (forward with gradient, run while calls are followed by " \
        "backward()): 1\n" in text, text
    apart = sum(k.bytes_moved() for p in entry_of(cf).programs for k in p.kernels)
    assert sum(k.bytes_moved() for k in kernels) < 0.7 * apart


def test_large_inputs_qualify_without_lowering_the_threshold(monkeypatch):
    monkeypatch.setattr(joined, "JOIN_MIN_BYTES", 1 << 20)
    small, large = tg.compile(layernorm_loss), tg.compile(layernorm_loss)
    step(small, leaves(8, 16, np.float32))
    step(large, leaves(512, 512, np.float32))
    assert not hasattr(entry_of(small), "streak") and entry_of(large).streak == 0


def test_one_kernel_for_a_loss_and_its_gradients_compiled_together():
    """Fusion: sums over the rows (the loss, the weight and bias gradients) join a row kernel with
    row phases after them (the input gradient), so a function returning a loss and its gradients is
    one pass over its inputs."""
    def loss_and_grads(x, w, b, g):
        x, w, b = (t.detach().requires_grad_() for t in (x, w, b))
        loss = layernorm_loss(x, w, b, g)
        return (loss,) + tuple(tg.autograd.grad(loss, [x, w, b]))
    ts = [t.detach() for t in leaves(33, 70, np.float64)]
    text = tg.compile(loss_and_grads).ir(*ts, stage="kernels")
    assert re.search(r"kernels loss_and_grads \(forward\): 1\n", text), text
    got = tg.compile(loss_and_grads)(*ts)
    want = tg.compile(loss_and_grads, backend="interpret")(*ts)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-11, atol=1e-11)


@pytest.mark.parametrize("how", ["same_tensor_twice", "transposed", "read_only"])
def test_joined_calls_on_odd_inputs_equal_eager(how):
    """The same tensor as two arguments, a transposed view, read-only memory: the joined call reads
    them as the apart one does, and each leaf gets eager's gradient."""
    def loss(a, c, g):
        return ((a * c).tanh() * g).sum() + (a - c.mean(-1, keepdims=True)).square().mean()
    rng = np.random.default_rng(5)
    base = rng.standard_normal((24, 40))
    g = tg.tensor(rng.standard_normal((24, 40)))

    def make():
        if how == "same_tensor_twice":
            a = tg.tensor(base, requires_grad=True)
            return [a, a]
        if how == "transposed":
            a = tg.tensor(base.T.copy()).T.detach().requires_grad_()      # a leaf over transposed memory
            assert not a.is_contiguous()
            return [a, tg.tensor(base * 0.5, requires_grad=True)]
        arr = base.copy()
        arr.flags.writeable = False
        return [tg.tensor(arr, requires_grad=True), tg.tensor(base * 0.5, requires_grad=True)]
    leaves_ = lambda ts: [t for t in ts if t.grad_fn is None]   # noqa: E731
    eager = make()
    loss(eager[0], eager[1], g).backward()
    want = [t.grad.numpy().copy() for t in leaves_(eager)]
    cf = tg.compile(loss)
    for _ in range(joined.JOIN_AFTER + 2):
        ts = make()
        cf(ts[0], ts[1], g).backward()
        got = [t.grad.numpy() for t in leaves_(ts)]
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, rtol=1e-11, atol=1e-11)
    assert entry_of(cf).joined, "the joined call never ran"


def gelu_loss(x, g):
    return (0.5 * x * (1.0 + (0.7978845608 * (x + 0.044715 * x * x * x)).tanh()) * g).sum()


def joined_node(cf, x, g):
    for _ in range(joined.JOIN_AFTER):
        x.grad = None
        cf(x, g).backward()
    x.grad = None
    loss = cf(x, g)
    assert loss.grad_fn.ahead is not None
    return loss


def test_a_joined_call_writes_no_saved_values():
    """The joined gelu loss reads x and g and writes dx: no saved tanh (12 MB, not 28, at (1000, 999))."""
    rng = np.random.default_rng(3)
    x = tg.tensor(rng.standard_normal((40, 333)).astype(np.float32), requires_grad=True)
    g = tg.tensor(rng.standard_normal((40, 333)).astype(np.float32))
    cf = tg.compile(gelu_loss)
    joined_node(cf, x, g).backward()
    moved = sum(k.bytes_moved() for k in entry_of(cf).joined_program.kernels)
    assert moved <= 3 * 40 * 333 * 4 + 64, entry_of(cf).joined_program.kernels
    xe = tg.tensor(x.detach().numpy(), requires_grad=True)
    gelu_loss(xe, g).backward()
    np.testing.assert_allclose(x.grad.numpy(), xe.grad.numpy(), rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("how", ["retain_graph", "explicit", "autograd_grad"])
def test_uses_that_need_the_saved_values_recompute_them(how):
    """retain_graph, an explicit gradient, autograd.grad after a joined call: the saved values are
    recomputed from the inputs (the same program on the same arrays), the results are eager's."""
    rng = np.random.default_rng(4)
    a, b = rng.standard_normal((2, 9, 70))
    cf = tg.compile(gelu_loss)
    x, g = tg.tensor(a, requires_grad=True), tg.tensor(b)
    loss = joined_node(cf, x, g)
    assert loss.grad_fn._saved is not None and loss.grad_fn.regen is not None
    xe = tg.tensor(a, requires_grad=True)
    le = gelu_loss(xe, g)
    for t, l in ((x, loss), (xe, le)):
        if how == "retain_graph":
            l.backward(retain_graph=True)
            l.backward()
            got = t.grad.numpy()
        elif how == "explicit":
            l.backward(tg.tensor(2.5, dtype=tg.float64))
            got = t.grad.numpy()
        else:
            (got,) = [v.numpy() for v in tg.autograd.grad(l, [t])]
        if t is x:
            compiled = got.copy()
    np.testing.assert_allclose(compiled, got, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("f", [lambda x, g: (x.exp() * g).sum(), lambda x, g: ((x * g).exp().tanh() * 2.0).sum()])
def test_an_input_changed_before_a_recomputing_backward_raises(f):
    """A joined call kept nothing, and cannot recompute from an input changed in place since: it
    raises (eager's message where the backward program itself reads the input; else saying why),
    never a gradient of the changed input."""
    rng = np.random.default_rng(5)
    cf = tg.compile(f)
    x, g = tg.tensor(rng.standard_normal((6, 50)), requires_grad=True), tg.tensor(rng.standard_normal((6, 50)))
    for _ in range(joined.JOIN_AFTER):
        x.grad = None
        cf(x, g).backward()
    x.grad = None
    loss = cf(x, g)
    assert loss.grad_fn.ahead is not None and loss.grad_fn.regen is not None, "the call did not join"
    with tg.no_grad():
        x.add_(1.0)
    with pytest.raises(RuntimeError, match="kept no intermediate values"):
        loss.grad_fn.regenerate()                 # what a backward through the node would meet first
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        tg.autograd.grad(loss, [x])


def test_a_forward_drawing_random_numbers_keeps_its_saved_values():
    def f(x, g):
        return (tg.nn.functional.dropout(x.tanh(), 0.5) * g).sum()
    rng = np.random.default_rng(6)
    cf = tg.compile(f)
    x, g = tg.tensor(rng.standard_normal((6, 50)), requires_grad=True), tg.tensor(rng.standard_normal((6, 50)))
    for _ in range(joined.JOIN_AFTER + 1):
        x.grad = None
        loss = cf(x, g)
        loss.backward(retain_graph=True)
    entry = entry_of(cf)
    if entry.joined:
        assert loss.grad_fn.regen is None and len(entry.joined_program.graph.outputs) > 1 + 1
    first = x.grad.numpy().copy()
    loss.backward()                               # through the saved mask: the same gradient again
    np.testing.assert_allclose(x.grad.numpy(), 2 * first, rtol=1e-12)
