"""nn.init: PyTorch's gains (torch 2.13 literals), fan rules and the statistics of each fill
(bounds exact, moments within sampling error of the formula), in place, without autograd history."""
import math

import numpy as np
import pytest

import tracegrad as tg

init = tg.nn.init


def test_calculate_gain_matches_torch():
    got = [init.calculate_gain(n) for n in ["linear", "conv2d", "sigmoid", "tanh", "relu", "leaky_relu", "selu"]]
    assert got == [1, 1, 1, 1.6666666666666667, 1.4142135623730951, 1.4141428569978354, 0.75]
    assert init.calculate_gain("leaky_relu", 0.2) == 1.3867504905630728
    with pytest.raises(ValueError, match="Unsupported nonlinearity"):
        init.calculate_gain("swish")


def test_fans_of_linear_and_conv_weights():
    assert init._calculate_fan_in_and_fan_out(tg.empty(5, 7)) == (7, 5)
    assert init._calculate_fan_in_and_fan_out(tg.empty(8, 4, 3, 3)) == (36, 72)
    with pytest.raises(ValueError, match="fewer than 2 dimensions"):
        init.xavier_uniform_(tg.empty(3))


def _std(t):
    return float(np.std(t.detach().numpy().astype(np.float64)))


@pytest.mark.parametrize("shape", [(200, 300), (64, 32, 3, 3)])
def test_kaiming_and_xavier_statistics(shape):
    tg.manual_seed(0)
    w = tg.empty(*shape, requires_grad=True)
    fan_in, fan_out = init._calculate_fan_in_and_fan_out(w)
    n = w.numel()
    # PyTorch's default layer init: kaiming_uniform_(a=sqrt(5)) gives a bound of 1/sqrt(fan_in)
    assert init.kaiming_uniform_(w, a=math.sqrt(5)) is w and w.is_leaf and w.grad_fn is None
    bound = 1 / math.sqrt(fan_in)
    assert float(w.abs().max()) <= bound and float(w.abs().max()) > 0.99 * bound
    assert abs(_std(w) - bound / math.sqrt(3)) < 5 * bound / math.sqrt(3) / math.sqrt(n)
    init.kaiming_normal_(w, mode="fan_out", nonlinearity="relu")
    std = math.sqrt(2) / math.sqrt(fan_out)
    assert abs(_std(w) - std) < 5 * std / math.sqrt(2 * n)
    init.xavier_uniform_(w, gain=init.calculate_gain("tanh"))
    bound = 5 / 3 * math.sqrt(6 / (fan_in + fan_out))
    assert float(w.abs().max()) <= bound * (1 + 1e-6) and float(w.abs().max()) > 0.99 * bound
    init.xavier_normal_(w)
    std = math.sqrt(2 / (fan_in + fan_out))
    assert abs(_std(w) - std) < 5 * std / math.sqrt(2 * n)


def test_uniform_normal_constant_eye_dirac():
    tg.manual_seed(1)
    t = tg.empty(100, 100, dtype=tg.float64)
    init.uniform_(t, -2.0, 3.0)
    a = t.numpy()
    assert a.min() >= -2 and a.max() < 3 and abs(a.mean() - 0.5) < 5 * 5 / math.sqrt(12) / 100
    init.normal_(t, 1.5, 0.2)
    assert abs(t.numpy().mean() - 1.5) < 5 * 0.2 / 100 and abs(_std(t) - 0.2) < 0.01
    assert init.constant_(t, 0.25).numpy().tolist() == np.full((100, 100), 0.25).tolist()
    assert init.zeros_(t).numpy().sum() == 0 and init.ones_(t).numpy().sum() == 10000
    np.testing.assert_array_equal(init.eye_(tg.empty(2, 3)).numpy(), np.eye(2, 3))
    d = init.dirac_(tg.empty(2, 2, 3, 3)).numpy()
    assert d.sum() == 2 and d[0, 0, 1, 1] == 1 and d[1, 1, 1, 1] == 1


def test_generator_makes_draws_repeatable():
    a, b = tg.empty(5, 4), tg.empty(5, 4)
    init.normal_(a, generator=tg.Generator().manual_seed(7))
    init.normal_(b, generator=tg.Generator().manual_seed(7))
    np.testing.assert_array_equal(a.numpy(), b.numpy())


@pytest.mark.parametrize("shape", [(6, 10), (10, 6), (4, 3, 2, 2)])
def test_orthogonal(shape):
    tg.manual_seed(2)
    w = init.orthogonal_(tg.empty(*shape, dtype=tg.float64), gain=2.0)
    m = w.numpy().reshape(shape[0], -1)
    small = min(m.shape)
    gram = m @ m.T if m.shape[0] == small else m.T @ m
    np.testing.assert_allclose(gram, 4.0 * np.eye(small), atol=1e-12)


def test_trunc_normal():
    tg.manual_seed(4)
    t = init.trunc_normal_(tg.empty(200, 200, dtype=tg.float64), mean=0.5, std=2.0, a=-1.0, b=3.0)
    a = t.numpy()
    assert a.min() >= -1.0 and a.max() <= 3.0 and a.min() < -0.99 and a.max() > 2.99
    # the standard normal truncated to [-0.75, 1.25] (in units of std about the mean): its mean and std
    lo, hi = -0.75, 1.25
    phi = lambda z: math.exp(-z * z / 2) / math.sqrt(2 * math.pi)   # noqa: E731
    mass = 0.5 * (math.erf(hi / math.sqrt(2)) - math.erf(lo / math.sqrt(2)))
    mu = (phi(lo) - phi(hi)) / mass
    var = 1 + (lo * phi(lo) - hi * phi(hi)) / mass - mu ** 2
    assert abs(a.mean() - (0.5 + 2 * mu)) < 5 * 2 * math.sqrt(var) / 200
    assert abs(a.std() - 2 * math.sqrt(var)) < 0.02
    with pytest.raises(ValueError, match="far in the tail"):
        init.trunc_normal_(tg.empty(3), a=10.0, b=11.0)
