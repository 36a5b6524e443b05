"""BatchNorm, InstanceNorm, GroupNorm and channel dropout: values and running statistics against
NumPy and torch 2.13 literals, gradients against central differences (eager and compiled), compiled
training steps against eager across train()/eval() switches."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tracegrad as tg

nn, F = tg.nn, tg.nn.functional
SETTINGS = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _np_batch_norm(x, rm, rv, w, b, training, momentum, eps):
    """NumPy reference: (y, new running mean, new running var)."""
    axes = (0,) + tuple(range(2, x.ndim))
    shape = (1, -1) + (1,) * (x.ndim - 2)
    if training:
        n = x.size // x.shape[1]
        mean, var = x.mean(axes), x.var(axes)
        rm, rv = (1 - momentum) * rm + momentum * mean, (1 - momentum) * rv + momentum * var * n / (n - 1)
    else:
        mean, var = rm, rv
    y = (x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + eps)
    return y * w.reshape(shape) + b.reshape(shape), rm, rv


@SETTINGS
@given(shape=st.sampled_from([(5, 3), (4, 2, 6), (3, 4, 2, 3), (2, 3, 1, 2, 2)]), momentum=st.sampled_from([0.1, 0.5]),
       seed=st.integers(0, 2**16), eps=st.sampled_from([1e-5, 1e-2]))
def test_functional_batch_norm_against_numpy(shape, momentum, seed, eps):
    rng = np.random.default_rng(seed)
    x, w, b = rng.standard_normal(shape), rng.standard_normal(shape[1]), rng.standard_normal(shape[1])
    rm, rv = rng.standard_normal(shape[1]), rng.uniform(0.5, 2, shape[1])
    for training in (True, False):
        trm, trv = tg.tensor(rm), tg.tensor(rv)
        y = F.batch_norm(tg.tensor(x), trm, trv, tg.tensor(w), tg.tensor(b), training, momentum, eps)
        ey, erm, erv = _np_batch_norm(x, rm, rv, w, b, training, momentum, eps)
        np.testing.assert_allclose(y.numpy(), ey, rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(trm.numpy(), erm, rtol=1e-12)
        np.testing.assert_allclose(trv.numpy(), erv, rtol=1e-12)


def test_batch_norm_module_matches_torch_literals_with_cumulative_momentum():
    # torch 2.13: BatchNorm1d(3, momentum=None).double(), weight [1.5, -0.5, 2], bias [.1, .2, -.3];
    # two training batches (x, 2x + 1), then eval on x
    bn = nn.BatchNorm1d(3, momentum=None, dtype=tg.float64)
    with tg.no_grad():
        bn.weight.copy_(tg.tensor([1.5, -0.5, 2.0]))
        bn.bias.copy_(tg.tensor([0.1, 0.2, -0.3]))
    x = tg.cos(tg.arange(24, dtype=tg.float64) * 0.9).reshape(4, 3, 2)
    bn(x)
    y2 = bn(x * 2 + 1)
    bn.eval()
    y3 = bn(x)
    np.testing.assert_allclose(y2.detach().numpy().ravel()[:6], [1.6918441463, 0.7911103989, 0.6181539201,
                                                                  1.1441757111, -1.9937770592, 0.745065405], atol=1e-9)
    np.testing.assert_allclose(y3.detach().numpy().ravel()[:6], [0.1043358389, -0.4285447614, 0.7487254355,
                                                                  1.0599237479, -1.925008927, -0.3046911027], atol=1e-9)
    np.testing.assert_allclose(bn.running_mean.numpy(), [0.9969211909, 0.9662999091, -0.2088098231], atol=1e-9)
    np.testing.assert_allclose(bn.running_var.numpy(), [1.1344836571, 1.182694188, 0.7168931181], atol=1e-9)
    assert bn.num_batches_tracked.item() == 2 and bn.num_batches_tracked.dtype == tg.int64


def test_batch_norm_module_options():
    x = tg.randn(6, 3, 4, 4)
    bn = nn.BatchNorm2d(3, affine=False, track_running_stats=False)
    assert bn.weight is None and bn.running_mean is None and not list(bn.parameters())
    bn.eval()                              # no running stats: batch statistics even in eval mode
    y = bn(x).numpy()
    np.testing.assert_allclose(y.mean((0, 2, 3)), 0, atol=1e-5)
    np.testing.assert_allclose(y.var((0, 2, 3)), 1, atol=1e-3)
    bn = nn.BatchNorm2d(3)
    assert [n for n, _ in bn.named_parameters()] == ["weight", "bias"]
    bn.eval()                              # fresh running stats: mean 0, var 1
    np.testing.assert_allclose(bn(x).detach().numpy(), x.numpy() / np.sqrt(1 + 1e-5), rtol=1e-6)
    assert bn.num_batches_tracked.item() == 0
    bn.train()
    bn(x)
    bn.reset_running_stats()
    assert bn.num_batches_tracked.item() == 0 and bn.running_var.numpy().tolist() == [1, 1, 1]
    with pytest.raises(ValueError, match=r"expected 4D input \(got 3D input\)"):
        bn(tg.randn(2, 3, 4))
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        nn.BatchNorm1d(3)(tg.randn(1, 3))
    # reprs as torch 2.13 prints them
    assert repr(nn.BatchNorm1d(4)) == "BatchNorm1d(4, eps=1e-05, momentum=0.1, affine=True, bias=True, track_running_stats=True)"
    assert repr(nn.InstanceNorm2d(4, affine=True, bias=False)) == \
        "InstanceNorm2d(4, eps=1e-05, momentum=0.1, affine=True, bias=False, track_running_stats=False)"
    assert repr(nn.GroupNorm(2, 4, affine=False)) == "GroupNorm(2, 4, eps=1e-05, affine=False, bias=False)"
    gn = nn.GroupNorm(2, 4, bias=False)
    assert [n for n, _ in gn.named_parameters()] == ["weight"] and gn.bias is None
    bn = nn.BatchNorm1d(3, bias=False)
    np.testing.assert_allclose(bn(tg.tensor([[1.0, 2, 3], [3, 2, 1]])).detach().numpy(), [[-1, 0, 1], [1, 0, -1]],
                               atol=1e-4)


@pytest.mark.parametrize("compiled", [False, True])
def test_norm_gradients_float64(compiled):
    rng = np.random.default_rng(3)
    x = tg.tensor(rng.standard_normal((3, 4, 2, 2)), requires_grad=True)
    w, b = (tg.tensor(rng.standard_normal(4), requires_grad=True) for _ in range(2))
    cases = [lambda x, w, b: F.batch_norm(x, None, None, w, b, True),
             lambda x, w, b: F.batch_norm(x, tg.zeros(4, dtype=tg.float64), tg.ones(4, dtype=tg.float64) * 2, w, b),
             lambda x, w, b: F.group_norm(x, 2, w, b, 1e-3),
             lambda x, w, b: F.instance_norm(x, weight=w, bias=b)]
    for f in cases:
        g = (lambda x, w, b, f=f: (f(x, w, b) * tg.arange(16, dtype=tg.float64).reshape(4, 2, 2)).sum())
        assert tg.gradcheck(tg.compile(g) if compiled else g, (x, w, b))


def _np_group_norm(x, g, w, b, eps):
    xs = x.reshape(x.shape[0], g, -1)
    y = ((xs - xs.mean(2, keepdims=True)) / np.sqrt(xs.var(2, keepdims=True) + eps)).reshape(x.shape)
    shape = (1, -1) + (1,) * (x.ndim - 2)
    return y * w.reshape(shape) + b.reshape(shape)


@SETTINGS
@given(shape=st.sampled_from([(2, 6), (3, 6, 5), (2, 6, 3, 2)]), groups=st.sampled_from([1, 2, 3, 6]),
       seed=st.integers(0, 2**16))
def test_group_and_instance_norm_against_numpy(shape, groups, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(np.float32)
    gn = nn.GroupNorm(groups, 6, eps=1e-3)
    with tg.no_grad():
        gn.weight.copy_(tg.tensor(rng.standard_normal(6).astype(np.float32)))
        gn.bias.copy_(tg.tensor(rng.standard_normal(6).astype(np.float32)))
    np.testing.assert_allclose(gn(tg.tensor(x)).detach().numpy(),
                               _np_group_norm(x, groups, gn.weight.detach().numpy(), gn.bias.detach().numpy(), 1e-3),
                               rtol=1e-4, atol=1e-4)
    if len(shape) == 4:                    # instance norm = group norm with a group per channel
        inorm = nn.InstanceNorm2d(6, track_running_stats=True, momentum=0.5)
        np.testing.assert_allclose(inorm(tg.tensor(x)).numpy(), _np_group_norm(x, 6, np.ones(6), np.zeros(6), 1e-5),
                                   rtol=1e-4, atol=1e-4)
        n = shape[2] * shape[3]
        inst = x.reshape(shape[0], 6, -1)
        np.testing.assert_allclose(inorm.running_mean.numpy(), 0.5 * inst.mean(2).mean(0), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(inorm.running_var.numpy(), 0.5 + 0.5 * (inst.var(2) * n / (n - 1)).mean(0),
                                   rtol=1e-5)
        inorm.eval()                       # uses the running statistics now
        np.testing.assert_allclose(inorm(tg.tensor(x[0])).numpy(), (x[0] - inorm.running_mean.numpy()[:, None, None])
                                   / np.sqrt(inorm.running_var.numpy()[:, None, None] + 1e-5), rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="divisible"):
        nn.GroupNorm(4, 6)


def test_dropout2d_zeroes_whole_channels():
    tg.manual_seed(0)
    x = tg.ones(8, 16, 3, 3)
    y = nn.Dropout2d(0.5)(x).numpy()
    per_channel = y.reshape(8, 16, 9)
    assert np.all((per_channel == 0) | (per_channel == 2.0))
    assert np.all(per_channel.min(2) == per_channel.max(2))     # a channel is kept or dropped whole
    assert 0.2 < (per_channel[:, :, 0] == 0).mean() < 0.8
    d = nn.Dropout2d(0.5).eval()
    assert d(x) is x
    y1 = F.dropout1d(tg.ones(4, 10, 5), 0.3).numpy()
    assert np.all(y1.min(2) == y1.max(2))
    with pytest.warns(UserWarning, match="3D input to dropout2d"):
        F.dropout2d(tg.ones(2, 3, 4))


def _model(track=True, momentum=0.1):
    tg.manual_seed(1)
    return nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6, momentum=momentum, track_running_stats=track), nn.ReLU(),
                         nn.Linear(6, 2))


@pytest.mark.parametrize("momentum,track", [(0.1, True), (None, True), (0.3, False)])
def test_compiled_training_steps_match_eager_across_train_eval(momentum, track):
    rng = np.random.default_rng(0)
    data = [(tg.tensor(rng.standard_normal((5, 4)).astype(np.float32)),
             tg.tensor(rng.standard_normal((5, 2)).astype(np.float32))) for _ in range(4)]
    results = []
    for compiled in (False, True):
        m = _model(track, momentum)
        opt = tg.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)

        def step(x, y):
            opt.zero_grad()
            loss = F.mse_loss(m(x), y)
            loss.backward()
            opt.step()
            return loss

        def predict(x):
            return m(x)

        step, predict = (tg.compile(step), tg.compile(predict)) if compiled else (step, predict)
        seen = []
        for i, (x, y) in enumerate(data):
            m.train(i != 2)                # one step in eval mode: running stats used and left alone
            seen.append(step(x, y).item())
            m.eval()
            seen.append(predict(x).detach().numpy())
            m.train()
            seen.append(predict(x).detach().numpy())
        bn = m[1]
        stats = [bn.running_mean.numpy(), bn.running_var.numpy(), bn.num_batches_tracked.item()] if track else []
        results.append((seen, stats, [p.detach().numpy() for p in m.parameters()]))
    (e_seen, e_stats, e_params), (c_seen, c_stats, c_params) = results
    for a, b in zip(e_seen + e_stats + e_params, c_seen + c_stats + c_params):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-6)
    if track:
        assert c_stats[2] == 7            # 3 training steps and 4 predictions in training mode


def test_instance_group_norm_and_dropout2d_compiled_match_eager_in_train_and_eval():
    x = tg.tensor(np.random.default_rng(4).standard_normal((3, 4, 5, 5)).astype(np.float32))
    runs = []
    for compiled in (False, True):
        tg.manual_seed(9)
        m = nn.Sequential(nn.InstanceNorm2d(4, affine=True, track_running_stats=True), nn.GroupNorm(2, 4),
                          nn.Dropout2d(0.4), nn.BatchNorm2d(4))
        f = tg.compile(lambda x: m(x)) if compiled else (lambda x: m(x))
        seen = [f(x).detach().numpy(), f(x * 2).detach().numpy()]
        m.eval()
        seen.append(f(x).detach().numpy())
        runs.append(seen + [m[0].running_mean.numpy(), m[0].running_var.numpy(), m[3].running_var.numpy()])
    for a, b in zip(*runs):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    assert (runs[0][0].std((2, 3)) < 1e-6).any()    # dropout2d zeroed some channels (constant after the norm)


def test_running_statistics_are_buffers():
    m = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3))
    # the keys of torch 2.13's state_dict for the same model
    assert list(m.state_dict()) == ["0.weight", "0.bias", "1.weight", "1.bias", "1.running_mean", "1.running_var",
                                    "1.num_batches_tracked"]
    m(tg.randn(6, 4))
    state = m.state_dict()
    fresh = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3))
    fresh.load_state_dict(state)
    assert fresh[1].num_batches_tracked.item() == 1
    np.testing.assert_array_equal(fresh[1].running_var.numpy(), m[1].running_var.numpy())
    m.double()
    assert m[1].running_mean.dtype == tg.float64 and m[1].num_batches_tracked.dtype == tg.int64
    assert not [p for p in m.parameters() if p is m[1].running_mean]
