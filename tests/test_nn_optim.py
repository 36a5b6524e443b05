"""nn.Module / layers and the optimizers, against hand-written NumPy."""
import math

import numpy as np
import pytest

import tracegrad as tg

nn = tg.nn


def test_linear_init_bounds_shapes_and_forward():
    tg.manual_seed(0)
    lin = nn.Linear(100, 5)
    bound = 1.0 / math.sqrt(100)
    w, b = lin.weight.detach().numpy(), lin.bias.detach().numpy()
    assert w.shape == (5, 100) and b.shape == (5,)
    assert lin.weight.dtype == tg.float32 and lin.weight.requires_grad and lin.weight.is_leaf
    assert np.abs(w).max() <= bound and np.abs(b).max() <= bound
    assert np.abs(w).max() > 0.8 * bound          # really spread over the interval
    assert abs(w.mean()) < 0.2 * bound
    x = np.random.default_rng(1).standard_normal((3, 100)).astype(np.float32)
    np.testing.assert_allclose(lin(tg.tensor(x)).detach().numpy(), x @ w.T + b, rtol=1e-5, atol=1e-6)
    assert nn.Linear(4, 3, bias=False).bias is None
    assert nn.Linear(4, 3, dtype=tg.float64).weight.dtype == tg.float64


def test_linear_backward_matches_numpy():
    lin = nn.Linear(4, 3)
    x = np.random.default_rng(2).standard_normal((5, 4)).astype(np.float32)
    lin(tg.tensor(x)).sum().backward()
    np.testing.assert_allclose(lin.weight.grad.numpy(), np.ones((5, 3)).T @ x, rtol=1e-5)
    np.testing.assert_allclose(lin.bias.grad.numpy(), np.full(3, 5.0))


def _mlp():
    return nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))


def test_sequential_parameter_names_and_modules():
    m = _mlp()
    names = [n for n, _ in m.named_parameters()]
    assert names == ["0.weight", "0.bias", "2.weight", "2.bias"]
    assert len(list(m.parameters())) == 4 and all(p.requires_grad for p in m.parameters())
    assert len(m) == 3 and isinstance(m[1], nn.ReLU)
    assert [n for n, _ in nn.LayerNorm(4).named_parameters()] == ["weight", "bias"]


def test_zero_grad_train_eval():
    m = _mlp()
    m(tg.ones(5, 3)).sum().backward()
    assert all(p.grad is not None for p in m.parameters())
    m.zero_grad()
    assert all(p.grad is None for p in m.parameters())
    m.eval()
    assert not m.training and not m[0].training and not m[1].training
    m.train()
    assert m.training and m[2].training


def test_state_dict_round_trip_shares_memory_as_pytorch():
    m, m2 = _mlp(), _mlp()
    sd = m.state_dict()
    assert list(sd) == ["0.weight", "0.bias", "2.weight", "2.bias"]
    m2.load_state_dict(sd)
    x = tg.randn(2, 3)
    np.testing.assert_array_equal(m(x).detach().numpy(), m2(x).detach().numpy())
    sd["0.weight"].mul_(0.0)             # PyTorch's state_dict() holds detached tensors, not copies
    np.testing.assert_array_equal(m[0].weight.detach().numpy(), np.zeros((4, 3)))
    assert m2[0].weight.requires_grad and m2[0].weight.is_leaf
    with pytest.raises(RuntimeError, match='Missing key\\(s\\) in state_dict: "0.bias", "2.weight", "2.bias"'):
        m2.load_state_dict({"0.weight": sd["0.weight"]})
    bad = dict(sd)
    bad["0.bias"] = tg.zeros(7)
    with pytest.raises(RuntimeError, match="size mismatch"):
        m2.load_state_dict(bad)


def test_module_to_double_keeps_parameter_objects():
    m = _mlp()
    params = m.parameters()
    opt = tg.optim.SGD(m.parameters(), lr=0.1)
    m.double()
    assert all(p.dtype == tg.float64 and p.requires_grad and p.is_leaf for p in m.parameters())
    assert all(a is b for a, b in zip(params, m.parameters()))
    out = m(tg.ones(2, 3, dtype=tg.float64))
    assert out.dtype == tg.float64
    before = m[0].bias.detach().numpy().copy()
    out.sum().backward()
    opt.step()                        # the optimizer built before .double() still updates the module
    assert not np.array_equal(before, m[0].bias.detach().numpy())
    m.float()
    assert m[0].weight.dtype == tg.float32


def test_custom_module_registers_parameters_and_submodules():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.scale = tg.ones(3, requires_grad=True)
            self.body = nn.Linear(3, 3)
            self.const = tg.ones(3)   # not a parameter

        def forward(self, x):
            return self.body(x) * self.scale

    n = Net()
    assert [k for k, _ in n.named_parameters()] == ["scale", "body.weight", "body.bias"]
    assert n(tg.ones(2, 3)).shape == (2, 3)


# ---------------------------------------------------------------- optimizers

def _quad_grads(w):
    return 2 * w


def test_sgd_momentum_weight_decay_matches_numpy():
    w0 = np.array([1.0, -2.0, 3.0], dtype=np.float64)
    w = tg.tensor(w0, requires_grad=True)
    opt = tg.optim.SGD([w], lr=0.1, momentum=0.9, weight_decay=0.01)
    wn, buf = w0.copy(), None
    for _ in range(5):
        opt.zero_grad()
        (w * w).sum().backward()
        opt.step()
        g = 2 * wn + 0.01 * wn
        buf = g.copy() if buf is None else 0.9 * buf + g
        wn = wn - 0.1 * buf
        np.testing.assert_allclose(w.detach().numpy(), wn, rtol=1e-12)
    assert w.is_leaf and w.requires_grad


def test_plain_sgd_and_accumulation_without_zero_grad():
    w = tg.tensor([1.0, 2.0], dtype=tg.float64, requires_grad=True)
    opt = tg.optim.SGD([w], lr=0.5)
    (w * 3.0).sum().backward()
    opt.step()
    assert w.tolist() == [-0.5, 0.5]
    (w * 3.0).sum().backward()   # grad accumulates to 6
    opt.step()
    assert w.tolist() == [-3.5, -2.5]


def test_adam_matches_numpy():
    w0 = np.array([1.0, -2.0, 3.0, 0.5])
    w = tg.tensor(w0, requires_grad=True)
    opt = tg.optim.Adam([w], lr=0.1, betas=(0.8, 0.99), eps=1e-6)
    wn, m, v = w0.copy(), np.zeros(4), np.zeros(4)
    for t in range(1, 6):
        opt.zero_grad()
        (w * w * w).sum().backward()
        opt.step()
        g = 3 * wn ** 2
        m = 0.8 * m + 0.2 * g
        v = 0.99 * v + 0.01 * g * g
        mhat, vhat = m / (1 - 0.8 ** t), v / (1 - 0.99 ** t)
        wn = wn - 0.1 * mhat / (np.sqrt(vhat) + 1e-6)
        np.testing.assert_allclose(w.detach().numpy(), wn, rtol=1e-10)


def test_adam_defaults_on_float32_mlp_decrease_loss():
    tg.manual_seed(3)
    m = _mlp()
    opt = tg.optim.Adam(m.parameters(), lr=1e-2)
    x, y = tg.randn(16, 3), tg.randn(16, 2)
    losses = []
    for _ in range(30):
        opt.zero_grad()
        loss = ((m(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]
    assert opt.defaults["betas"] == (0.9, 0.999) and opt.defaults["eps"] == 1e-8


def test_optimizer_zero_grad_and_skips_params_without_grad():
    a = tg.tensor([1.0], requires_grad=True)
    b = tg.tensor([2.0], requires_grad=True)
    opt = tg.optim.SGD([a, b], lr=1.0, momentum=0.5)
    (a * 2.0).sum().backward()
    opt.step()
    assert a.tolist() == [-1.0] and b.tolist() == [2.0]
    opt.zero_grad()
    assert a.grad is None and b.grad is None
    with pytest.raises(ValueError):
        tg.optim.SGD([], lr=0.1)
