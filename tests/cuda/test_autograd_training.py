"""Autograd and training on cuda under numba's simulator, against the cpu: gradients through every kind
of primitive are cuda tensors equal to the cpu's; SGD and Adam keep their state on the device; a
training step copies nothing between host and device but the loss's .item()."""
import numpy as np
import pytest

import tracegrad as tg
import tracegrad.nn.functional as F
from tracegrad.backends.cuda import memory

pytestmark = pytest.mark.filterwarnings("ignore:tracegrad. matrix products on cuda run a tiled")

FUNCS = {   # one per kind (views, copies, gather, matmul, elementwise with scalars, reductions), and mixes
    "views": lambda x: x.T.reshape(3, 4)[1:, ::2].unsqueeze(0).expand(2, 2, 2),
    "cat": lambda x: tg.cat([x, x[:1] * 2.0], 0),
    "stack": lambda x: tg.stack([x[0], x[1]], 1),
    "gather": lambda x: x[tg.tensor([2, 0, 2, 1], device=x.device), tg.tensor([1, 1, 2, 0], device=x.device)],
    "rows": lambda x: x[tg.tensor([3, 3, 0], device=x.device)],
    "matmul": lambda x: x @ x.T.exp(),
    "batched": lambda x: x.reshape(2, 2, 3) @ x.reshape(2, 3, 2)[:1],
    "scalars": lambda x: (2.0 - x) * 3 / (x * x + 1.0) ** 0.5,
    "cpu 0-d": lambda x: x * tg.tensor(1.5, dtype=tg.float64) + tg.tensor(2.0, dtype=tg.float64),
    "reductions": lambda x: x.sum(0) + x.amax(1).sum() - x.mean(),
    "softmax": lambda x: F.log_softmax(x, 1) * F.softmax(x.T, 0).T,
    "setitem": lambda x: _set(x),
    "to device": lambda x: (x.cpu() * 2).to(x.device) if x.is_cuda else x * 2,
}


def _set(x):
    y = x * 1.0
    y[1:3, 0] = x[0, :2] * 4.0
    return y


@pytest.mark.parametrize("name", list(FUNCS))
def test_gradients_on_cuda_equal_the_cpus(name):
    rng = np.random.default_rng(7)
    x = tg.tensor(rng.standard_normal((4, 3)), dtype=tg.float64, requires_grad=True)
    xc = x.detach().cuda().requires_grad_()
    out, outc = FUNCS[name](x), FUNCS[name](xc)
    assert outc.device == "cuda:0" and outc.shape == out.shape and outc.dtype is out.dtype
    np.testing.assert_allclose(outc.detach().cpu().numpy(), out.detach().numpy(), rtol=1e-12, atol=1e-12)
    w = tg.tensor(rng.standard_normal(out.shape), dtype=tg.float64)
    (out * w).sum().backward()
    (outc * w.cuda()).sum().backward()
    assert xc.grad.device == "cuda:0" and xc.grad.dtype is tg.float64 and xc.is_leaf
    np.testing.assert_allclose(xc.grad.cpu().numpy(), x.grad.numpy(), rtol=1e-12, atol=1e-12)


def test_to_device_is_differentiable():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    y = x.cuda() * 3.0
    assert y.device == "cuda:0" and y.grad_fn is not None
    z = y.cpu()
    assert z.grad_fn.name() == "ToCopyBackward"
    z.sum().backward()
    assert x.grad.device == "cpu" and x.grad.tolist() == [3.0, 3.0]


def _mlp(device, dtype=tg.float32):
    tg.manual_seed(0)
    return tg.nn.Sequential(tg.nn.Linear(4, 6), tg.nn.ReLU(), tg.nn.Linear(6, 3)).to(dtype).to(device)


def _batch(device):
    rng = np.random.default_rng(1)
    return (tg.tensor(rng.standard_normal((5, 4)), dtype=tg.float32, device=device),
            tg.tensor(rng.integers(0, 3, 5), device=device))


def _step(model, opt, x, y):
    opt.zero_grad()
    out = model(x)     # Adam's step has more kernels: its test takes the cheaper loss
    loss = F.cross_entropy(out, y) if isinstance(opt, tg.optim.SGD) else F.mse_loss(out[:, 0], y.float())
    loss.backward()
    opt.step()
    return loss.item()


@pytest.mark.parametrize("make_opt", [lambda p: tg.optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=0.01),
                                      lambda p: tg.optim.Adam(p, lr=0.01)], ids=["SGD", "Adam"])
def test_training_on_cuda_equals_the_cpu_and_copies_only_the_loss(make_opt):
    """Two steps (the second uses the optimizer's state); the second copies nothing but the loss's
    item() (the first uploads each scalar constant once: they are cached on the device)."""
    runs = {}
    for dev in ("cpu", "cuda"):
        model = _mlp(dev)
        opt = make_opt(model.parameters())
        x, y = _batch(dev)
        first = _step(model, opt, x, y)
        with memory.count_transfers() as n:
            second = _step(model, opt, x, y)
        runs[dev] = [first, second], [p.detach().cpu().numpy() for p in model.parameters()], model, opt, n
    np.testing.assert_allclose(runs["cuda"][0], runs["cpu"][0], rtol=1e-5)
    for a, b in zip(runs["cuda"][1], runs["cpu"][1]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    model, opt, n = runs["cuda"][2:]
    assert (n.to_device, n.to_host, n.bytes) == (0, 1, 4), n
    for p in model.parameters():
        assert p.device == "cuda:0" and p.grad.device == "cuda:0"
        assert all(v.device == "cuda:0" for v in opt.state[p].values())


def test_module_dtype_and_device_conversions():
    m = _mlp("cuda", tg.float64)
    assert m[0].weight.dtype is tg.float64 and m[0].weight.device == "cuda:0"
    x = tg.ones(2, 4, dtype=tg.float64, device="cuda")
    m(x).sum().backward()
    m.float()
    assert m[0].weight.dtype is tg.float32 and m[0].weight.grad.dtype is tg.float32
    assert m[0].weight.grad.device == "cuda:0"
    m.cpu()
    assert m[0].weight.device == "cpu" and m[0].weight.grad.device == "cpu"


def test_in_place_updates_of_views_with_history():
    """An in-place op on a view of a value autograd records updates its base (CopySlices), on the device."""
    grads = {}
    for dev in ("cpu", "cuda"):
        a = tg.tensor(np.arange(12.0).reshape(3, 4) / 7, dtype=tg.float64, device=dev, requires_grad=True)
        b = a * 2.0
        b[1:, 1].mul_(3.0)
        b.T[0] += 1.0
        (b * b).sum().backward()
        assert b.grad_fn.name() == "CopySlices" and a.grad.device == dev
        grads[dev] = b.detach().cpu().numpy(), a.grad.cpu().numpy()
    for x, y in zip(grads["cuda"], grads["cpu"]):
        np.testing.assert_allclose(x, y, rtol=1e-13)


def test_backward_gradients_given_for_cuda_outputs():
    x = tg.tensor([1.0, 2.0], device="cuda", requires_grad=True)
    (x * x).backward([1.0, 0.5])                         # a list: made on the output's device
    assert x.grad.device == "cuda:0" and x.grad.tolist() == [2.0, 2.0]
    with pytest.raises(RuntimeError, match="invalid gradient at index 0 - expected device cuda:0 but got cpu"):
        (x * x).backward(tg.ones(2))
    (g,) = tg.autograd.grad((x * x * x).sum(), x, create_graph=True)      # 3x^2, differentiable
    assert g.device == "cuda:0" and g.requires_grad
    g.sum().backward()
    assert x.grad.tolist() == [2.0 + 6.0, 2.0 + 12.0]
    y = tg.tensor(3.0, device="cuda", requires_grad=True)
    (y * y).backward(create_graph=True)
    assert y.grad.device == "cuda:0" and y.grad.grad_fn is not None and y.grad.item() == 6.0
