"""RNN, LSTM, GRU and their cells: values against a NumPy reference written here and against torch
2.13 literals with identical weights, gradients against central differences (eager and compiled),
compiled == eager in train and eval mode, and two kernels per layer and time step when compiled."""
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tracegrad as tg
from tracegrad.jit.introspect import fused_kernels

nn = tg.nn
SETTINGS = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
CLASSES = {"LSTM": nn.LSTM, "GRU": nn.GRU, "RNN_TANH": nn.RNN, "RNN_RELU": nn.RNN}


def _sig(v):
    return 1 / (1 + np.exp(-v))


def _np_step(mode, x, state, w_ih, w_hh, b_ih, b_hh):
    """One time step in NumPy, written from PyTorch's documented equations."""
    if mode == "LSTM":
        h, c = state
        i, f, g, o = np.split(x @ w_ih.T + b_ih + h @ w_hh.T + b_hh, 4, -1)
        c = _sig(f) * c + _sig(i) * np.tanh(g)
        return _sig(o) * np.tanh(c), c
    if mode == "GRU":
        i_r, i_z, i_n = np.split(x @ w_ih.T + b_ih, 3, -1)
        h_r, h_z, h_n = np.split(state @ w_hh.T + b_hh, 3, -1)
        r, z = _sig(i_r + h_r), _sig(i_z + h_z)
        n = np.tanh(i_n + r * h_n)
        return (1 - z) * n + z * state
    a = x @ w_ih.T + b_ih + state @ w_hh.T + b_hh
    return np.tanh(a) if mode == "RNN_TANH" else np.maximum(a, 0)


def _np_rnn(mode, params, x, h0, num_layers, bidirectional):
    """A whole (seq, batch, features) sequence: output and the final states (as arrays per state)."""
    dirs = 2 if bidirectional else 1
    finals = []
    for layer in range(num_layers):
        outs = []
        for d in range(dirs):
            sfx = f"_l{layer}" + ("_reverse" if d else "")
            w = [params.get(k + sfx, 0.0) for k in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]
            state = tuple(s[layer * dirs + d] for s in h0) if mode == "LSTM" else h0[0][layer * dirs + d]
            hs = [None] * len(x)
            for t in (range(len(x) - 1, -1, -1) if d else range(len(x))):
                state = _np_step(mode, x[t], state, *w)
                hs[t] = state[0] if mode == "LSTM" else state
            outs.append(np.stack(hs))
            finals.append(state if mode == "LSTM" else (state,))
        x = np.concatenate(outs, -1)
    return x, [np.stack(s) for s in zip(*finals)]


def _make(mode, *args, **kwargs):
    if mode.startswith("RNN"):
        kwargs["nonlinearity"] = mode[4:].lower()
    return CLASSES[mode](*args, **kwargs)


@SETTINGS
@given(mode=st.sampled_from(sorted(CLASSES)), layers=st.integers(1, 2), bidirectional=st.booleans(),
       batch_first=st.booleans(), bias=st.booleans(), given_h0=st.booleans(), unbatched=st.booleans(),
       seq=st.integers(1, 4), seed=st.integers(0, 2**16))
def test_sequence_layers_against_numpy(mode, layers, bidirectional, batch_first, bias, given_h0, unbatched, seq, seed):
    tg.manual_seed(seed)
    rng = np.random.default_rng(seed)
    m = _make(mode, 3, 4, num_layers=layers, bias=bias, batch_first=batch_first, bidirectional=bidirectional,
              dtype=tg.float64)
    params = {n: p.detach().numpy() for n, p in m.named_parameters()}
    batch, dirs, states = 2, 2 if bidirectional else 1, 2 if mode == "LSTM" else 1
    x = rng.standard_normal((seq, batch, 3))
    h0 = [rng.standard_normal((layers * dirs, batch, 4)) if given_h0 else np.zeros((layers * dirs, batch, 4))
          for _ in range(states)]
    want_out, want_h = _np_rnn(mode, params, x, h0, layers, bidirectional)
    if unbatched:
        x, h0, want_out, want_h = x[:, 0], [h[:, 0] for h in h0], want_out[:, 0], [h[:, 0] for h in want_h]
    elif batch_first:
        x, want_out = x.transpose(1, 0, 2), want_out.transpose(1, 0, 2)
    hx = None if not given_h0 else tuple(tg.tensor(h) for h in h0) if mode == "LSTM" else tg.tensor(h0[0])
    out, h_n = m(tg.tensor(x), hx)
    np.testing.assert_allclose(out.detach().numpy(), want_out, rtol=1e-10, atol=1e-12)
    for got, want in zip(h_n if mode == "LSTM" else (h_n,), want_h):
        np.testing.assert_allclose(got.detach().numpy(), want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("mode", ["LSTM", "GRU", "RNN_TANH"])
def test_cells_against_numpy(mode):
    tg.manual_seed(2)
    cls = {"LSTM": nn.LSTMCell, "GRU": nn.GRUCell, "RNN_TANH": nn.RNNCell}[mode]
    cell = cls(3, 5, dtype=tg.float64)
    assert [n for n, _ in cell.named_parameters()] == ["weight_ih", "weight_hh", "bias_ih", "bias_hh"]
    w = [p.detach().numpy() for p in cell.parameters()]
    rng = np.random.default_rng(0)
    x, h, c = rng.standard_normal((2, 3)), rng.standard_normal((2, 5)), rng.standard_normal((2, 5))
    state = (h, c) if mode == "LSTM" else h
    got = cell(tg.tensor(x), tuple(map(tg.tensor, state)) if mode == "LSTM" else tg.tensor(h))
    want = _np_step(mode, x, state, *w)
    for g, e in zip(got if mode == "LSTM" else (got,), want if mode == "LSTM" else (want,)):
        np.testing.assert_allclose(g.detach().numpy(), e, rtol=1e-12)
    zero = cell(tg.tensor(x[0]))                   # unbatched, zero initial state
    want = _np_step(mode, x[0], (np.zeros(5), np.zeros(5)) if mode == "LSTM" else np.zeros(5), *w)
    np.testing.assert_allclose((zero[0] if mode == "LSTM" else zero).detach().numpy(),
                               want[0] if mode == "LSTM" else want, rtol=1e-12)


def _fill(m):
    """The weights the torch literals below were computed with."""
    with tg.no_grad():
        for k, (_, p) in enumerate(m.named_parameters()):
            p.copy_((tg.sin(tg.arange(p.numel(), dtype=tg.float64) * 0.7 + k) * 0.4).reshape(p.shape))
    return m


def test_against_torch_literals():
    x = tg.cos(tg.arange(24, dtype=tg.float64) * 0.3).reshape(3, 2, 4)
    out, (h, c) = _fill(nn.LSTM(4, 3, num_layers=2, bidirectional=True, dtype=tg.float64))(x)
    np.testing.assert_allclose(out.detach().numpy().ravel()[:8], [
        0.0937652887, 0.005138748, -0.0415994245, -0.1093065222, 0.1129513035, 0.2550625252, 0.1229370785,
        0.0077901501], atol=1e-9)
    np.testing.assert_allclose(h.detach().numpy().ravel()[:8], [
        0.0094473006, 0.0788482678, 0.0805471682, -0.1906079708, 0.09128796, 0.0206505431, -0.161570388,
        -0.5357507057], atol=1e-9)
    np.testing.assert_allclose(c.detach().numpy().ravel()[-6:], [
        -0.1712630398, 0.2045610624, 0.5615909072, -0.1765837279, 0.1044900531, 0.6634005958], atol=1e-9)
    out, h = _fill(nn.GRU(4, 3, batch_first=True, dtype=tg.float64))(x)
    np.testing.assert_allclose(out.detach().numpy().ravel()[:8], [
        -0.3881198697, 0.649172011, -0.1578126943, -0.122313861, 0.4432477002, 0.1854482978, 0.4633570179,
        -0.2732219117], atol=1e-9)
    np.testing.assert_allclose(h.detach().numpy().ravel(), [
        -0.122313861, 0.4432477002, 0.1854482978, 0.6569439809, -0.3219063483, 0.7536192258, -0.374564653,
        0.767947529, -0.2160773482], atol=1e-9)
    out, h = _fill(nn.RNN(4, 3, nonlinearity="relu", dtype=tg.float64))(x)
    np.testing.assert_allclose(out.detach().numpy().ravel()[:8], [
        1.2063073617, 0.0, 0.0, 0.1745213849, 0.275250834, 0.0, 0.0, 0.7403294163], atol=1e-9)
    np.testing.assert_allclose(h.detach().numpy().ravel(), [1.349626332, 0.0, 0.0, 1.4310441749, 0.0, 0.0],
                               atol=1e-9)


def test_init_names_and_errors():
    tg.manual_seed(0)
    m = nn.GRU(10, 20, num_layers=2, bidirectional=True, bias=False)
    names = [n for n, _ in m.named_parameters()]
    assert names == ["weight_ih_l0", "weight_hh_l0", "weight_ih_l0_reverse", "weight_hh_l0_reverse",
                     "weight_ih_l1", "weight_hh_l1", "weight_ih_l1_reverse", "weight_hh_l1_reverse"]
    assert m.weight_ih_l1.shape == (60, 40) and m.weight_hh_l0.shape == (60, 20)
    w = np.concatenate([p.detach().numpy().ravel() for p in m.parameters()])
    bound = 1 / math.sqrt(20)
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.95 * bound and abs(w.mean()) < 0.05 * bound
    assert repr(m) == "GRU(10, 20, num_layers=2, bias=False, bidirectional=True)"
    with pytest.raises(ValueError, match="Unknown nonlinearity 'gelu'"):
        nn.RNN(3, 4, nonlinearity="gelu")
    with pytest.raises(ValueError, match="Expected input to be 2D or 3D, got 4D"):
        nn.LSTM(3, 4)(tg.randn(1, 2, 3, 3))
    with pytest.raises(RuntimeError, match=r"Expected hidden size \(1, 2, 4\), got \[2, 2, 4\]"):
        nn.GRU(3, 4)(tg.randn(5, 2, 3), tg.zeros(2, 2, 4))
    with pytest.raises(TypeError, match=r"tuple \(h_0, c_0\)"):
        nn.LSTM(3, 4)(tg.randn(5, 2, 3), tg.zeros(1, 2, 4))
    with pytest.warns(UserWarning, match="non-zero dropout expects num_layers greater than 1"):
        nn.LSTM(3, 4, dropout=0.5)


@pytest.mark.parametrize("mode", ["LSTM", "GRU", "RNN_TANH"])
@pytest.mark.parametrize("compiled", [False, True])
def test_gradcheck_float64(mode, compiled):
    tg.manual_seed(5)
    m = _make(mode, 2, 3, num_layers=2, bidirectional=True, dtype=tg.float64)
    x = tg.randn(3, 2, 2, dtype=tg.float64, requires_grad=True)
    h0 = tg.randn(4, 2, 3, dtype=tg.float64, requires_grad=True)
    weights = list(m.parameters())

    def f(x, h0, *ws):
        out, h = m(x, (h0, h0 * 0.5) if mode == "LSTM" else h0)
        return (out * out).sum() + (h[0] if mode == "LSTM" else h).sum()
    assert tg.gradcheck(tg.compile(f) if compiled else f, (x, h0, *weights))


@pytest.mark.parametrize("mode", ["LSTM", "GRU"])
def test_compiled_training_matches_eager_in_train_and_eval(mode):
    rng = np.random.default_rng(1)
    data = [(tg.tensor(rng.standard_normal((4, 5, 3)).astype(np.float32)),
             tg.tensor(rng.standard_normal((4, 2)).astype(np.float32))) for _ in range(3)]
    runs = []
    for compiled in (False, True):
        tg.manual_seed(7)
        rnn, head = _make(mode, 3, 6, num_layers=2, dropout=0.3, batch_first=True), nn.Linear(6, 2)
        opt = tg.optim.Adam([*rnn.parameters(), *head.parameters()], lr=0.01)

        def step(x, y):
            opt.zero_grad()
            loss = tg.nn.functional.mse_loss(head(rnn(x)[0][:, -1]), y)
            loss.backward()
            opt.step()
            return loss
        step = tg.compile(step) if compiled else step
        seen = []
        for i, (x, y) in enumerate(data):
            rnn.train(i != 1)
            seen.append(step(x, y).item())
        runs.append(seen + [p.detach().numpy() for p in rnn.parameters()])
    for a, b in zip(*runs):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode", ["LSTM", "GRU", "RNN_TANH"])
def test_two_kernels_per_layer_and_step_when_compiled(mode):
    counts = []
    for seq in (4, 8):
        m = _make(mode, 5, 8, num_layers=2)
        f = tg.compile(lambda x: m(x)[0])
        x = tg.randn(seq, 3, 5)
        with tg.no_grad():
            f(x)
            entry = f._entry_for((x,), {})[0]
        counts.append(sum(len(ks) for _, _, ks in fused_kernels(entry)))
    assert counts[1] - counts[0] == 2 * 4 * 2       # a matmul and a gate kernel per layer and step


def test_lstm_proj_size_against_torch_literals():
    m = _fill(nn.LSTM(4, 3, num_layers=2, bidirectional=True, proj_size=2, dtype=tg.float64))
    assert [(n, tuple(p.shape)) for n, p in m.named_parameters()][:5] == [
        ("weight_ih_l0", (12, 4)), ("weight_hh_l0", (12, 2)), ("bias_ih_l0", (12,)), ("bias_hh_l0", (12,)),
        ("weight_hr_l0", (2, 3))]
    out, (h, c) = m(tg.cos(tg.arange(24, dtype=tg.float64) * 0.3).reshape(3, 2, 4))
    assert out.shape == (3, 2, 4) and h.shape == (4, 2, 2) and c.shape == (4, 2, 3)
    np.testing.assert_allclose(out.detach().numpy().ravel()[:8], [
        -0.1427350899, 0.167913239, -0.1370148561, 0.0630843835, -0.1454002745, 0.1690387049, -0.1315339398,
        0.0569220729], atol=1e-9)
    np.testing.assert_allclose(h.detach().numpy().ravel()[-8:], [
        -0.2607668098, 0.2996369935, -0.2610127591, 0.2990310671, -0.1370148561, 0.0630843835, -0.1315339398,
        0.0569220729], atol=1e-9)
    np.testing.assert_allclose(c.detach().numpy().ravel()[:6], [
        0.0169226885, 0.2325345603, 0.1474604015, -0.3260908914, 0.3346616498, 0.0807256726], atol=1e-9)
    with pytest.raises(RuntimeError, match=r"Expected hidden size \(4, 2, 2\), got \[4, 2, 3\]"):
        m(tg.zeros(3, 2, 4, dtype=tg.float64), (tg.zeros(4, 2, 3, dtype=tg.float64),) * 2)
    with pytest.raises(ValueError, match="only supported for LSTM"):
        nn.RNNBase("GRU", 3, 4, proj_size=2)
    with pytest.raises(ValueError, match="smaller than hidden_size"):
        nn.LSTM(3, 4, proj_size=4)
    assert len(m.all_weights) == 4 and len(m.all_weights[0]) == 5
    assert repr(m) == "LSTM(4, 3, num_layers=2, bidirectional=True, proj_size=2)"
    x = tg.randn(2, 1, 4, dtype=tg.float64, requires_grad=True)
    assert tg.gradcheck(lambda x, *ws: (m(x)[0] ** 2).sum(), (x, *m.parameters()))


def _tensors(out):
    """Every tensor of a module's output: output, h_n, (h_n, c_n), ..."""
    return [out] if isinstance(out, tg.Tensor) else [t for o in out for t in _tensors(o)]


MODULES = {
    "rnn_relu_bidir": lambda: nn.RNN(3, 4, num_layers=2, nonlinearity="relu", bidirectional=True),
    "lstm_proj_batch_first": lambda: nn.LSTM(3, 5, proj_size=2, batch_first=True, bias=False),
    "gru_unbatched": lambda: nn.GRU(3, 4, num_layers=2),
    "rnn_cell": lambda: nn.RNNCell(3, 4, nonlinearity="relu"),
    "lstm_cell": lambda: nn.LSTMCell(3, 4),
    "gru_cell": lambda: nn.GRUCell(3, 4, bias=False),
}


@pytest.mark.parametrize("name", sorted(MODULES))
def test_compiled_values_and_gradients_match_eager(name):
    shape = (4, 3) if name.endswith("cell") or name == "gru_unbatched" else (2, 5, 3)
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    runs = []
    for compiled in (False, True):
        tg.manual_seed(3)
        m = MODULES[name]()

        def loss(x):
            return sum((t * t).sum() for t in _tensors(m(x)))
        f = tg.compile(loss) if compiled else loss
        xt = tg.tensor(x, requires_grad=True)
        value = f(xt)
        value.backward()
        runs.append([value.item(), xt.grad.numpy()] + [p.grad.numpy() for p in m.parameters()])
    for a, b in zip(*runs):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_compiled_steps_accumulate_bias_gradients_apart():
    """b_ih and b_hh get one gradient value (they are added): compiled, each .grad is its own memory,
    so steps without zero_grad accumulate as eagerly (main refused the second call: the two .grad
    fields shared memory)."""
    grads = []
    for compiled in (False, True):
        tg.manual_seed(0)
        m = nn.LSTM(2, 3)
        x = tg.randn(2, 1, 2)

        def step(x):
            (m(x)[0] ** 2).sum().backward()
        step = tg.compile(step) if compiled else step
        for _ in range(3):
            step(x)
        assert not np.shares_memory(m.bias_ih_l0.grad.numpy(), m.bias_hh_l0.grad.numpy())
        grads.append([p.grad.numpy().copy() for p in m.parameters()])
    for a, b in zip(*grads):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
