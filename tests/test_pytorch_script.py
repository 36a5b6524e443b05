"""A training script written for PyTorch run with tracegrad by changing its import: ModuleList, a buffer,
load_state_dict(strict=False), next(model.parameters()), nn.init, TensorDataset + DataLoader, AdamW,
StepLR, CrossEntropyLoss, clip_grad_norm_, then tg.save / tg.load of the model and optimizer. Losses
and a final bias against torch 2.13 (literals), eager and compiled."""
import io

import numpy as np


def run(torch, compiled=False):
    nn = torch.nn
    from_np = torch.tensor
    rng = np.random.default_rng(0)
    X = rng.standard_normal((40, 4)).astype(np.float32)
    Y = rng.integers(0, 3, 40)
    W1 = rng.standard_normal((8, 4)).astype(np.float32) * 0.5
    W2 = rng.standard_normal((3, 8)).astype(np.float32) * 0.5

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList([nn.Linear(4, 8), nn.Linear(8, 3)])
            self.register_buffer("seen", torch.zeros((), dtype=torch.int64))

        def forward(self, x):
            return self.layers[1](torch.tanh(self.layers[0](x)))

    model = Net()
    with torch.no_grad():
        nn.init.zeros_(model.layers[0].bias)
        nn.init.constant_(model.layers[1].bias, 0.1)
    model.load_state_dict({"layers.0.weight": from_np(W1), "layers.1.weight": from_np(W2)}, strict=False)
    assert next(model.parameters()).shape == (8, 4)
    data = torch.utils.data.TensorDataset(from_np(X), from_np(Y))
    loader = torch.utils.data.DataLoader(data, batch_size=16, shuffle=False, drop_last=False)
    opt = torch.optim.AdamW(model.parameters(), lr=0.05, weight_decay=0.05)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.7)
    loss_fn = nn.CrossEntropyLoss()

    def step(x, y):
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        opt.step()
        return loss
    if compiled:
        step = torch.compile(step)
    losses = []
    for epoch in range(3):
        for x, y in loader:
            losses.append(float(step(x, y)))
        sched.step()
    return losses, model, opt

import pytest  # noqa: E402

import tracegrad  # noqa: E402

TORCH_LOSSES = [1.608628273010254, 1.379923939704895, 1.5455011129379272, 1.0764702558517456, 1.1244217157363892,
                1.1800678968429565, 0.9861986637115479, 1.0848356485366821, 1.0406591892242432]
TORCH_BIAS = [-0.043346140533685684, 0.10687120258808136, 0.3120717704296112]


@pytest.mark.parametrize("compiled", [False, True])
def test_script_matches_torch(compiled):
    losses, model, opt = run(tracegrad, compiled)
    np.testing.assert_allclose(losses, TORCH_LOSSES, rtol=2e-5)
    np.testing.assert_allclose(model.layers[1].bias.detach().numpy(), TORCH_BIAS, rtol=1e-4, atol=1e-6)
    if compiled:
        return
    model.seen.fill_(5)
    buf = io.BytesIO()
    tracegrad.save({"model": model.state_dict(), "opt": opt.state_dict(), "epoch": 3}, buf)
    buf.seek(0)
    ck = tracegrad.load(buf)
    _, fresh, fresh_opt = run(tracegrad)
    with tracegrad.no_grad():                  # forget what it learned, then load the checkpoint
        for t in [*fresh.parameters(), *fresh.buffers(), *fresh_opt.state[next(fresh.parameters())].values()]:
            t.zero_()
    fresh_opt.param_groups[0]["lr"] = 1.0
    fresh.load_state_dict(ck["model"])
    fresh_opt.load_state_dict(ck["opt"])
    for (k, a), (_, b) in zip(model.state_dict().items(), fresh.state_dict().items()):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=k)
    for a, b in zip(opt.state[next(model.parameters())].values(), fresh_opt.state[next(fresh.parameters())].values()):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert fresh_opt.param_groups[0]["lr"] == opt.param_groups[0]["lr"] and ck["epoch"] == 3 and int(fresh.seen) == 5
