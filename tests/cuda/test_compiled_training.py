"""Compiled training steps on cuda: the same parameters as the same steps on the cpu, the whole step on
the device (no host copies), and the introspection of backend="cuda": stage="cuda", profile(),
check=True."""
import numpy as np
import pytest

import tracegrad as tg
import tracegrad.nn.functional as F
from tracegrad.backends.cuda.memory import count_transfers

RNG = np.random.default_rng(5)
X = RNG.standard_normal((6, 5)).astype(np.float32)
Y = RNG.integers(0, 3, 6)


def make(dev, opt_kind):
    tg.manual_seed(0)
    model = tg.nn.Sequential(tg.nn.Linear(5, 4), tg.nn.ReLU(), tg.nn.Linear(4, 3)).to(dev)
    opt = tg.optim.Adam(model.parameters(), lr=0.05) if opt_kind == "adam" else \
        tg.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    return model, opt, tg.tensor(X, device=dev), tg.tensor(Y, device=dev)


def train_step(model, opt, x, y):
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad()            # .grad None at every call's start: one signature
    return loss


@pytest.mark.parametrize("opt_kind", ["adam", "sgd"])
def test_training_steps_on_cuda_match_the_cpu(opt_kind):
    got = {}
    for dev in ("cuda", "cpu"):
        model, opt, x, y = make(dev, opt_kind)
        step = tg.compile(train_step)
        losses = [step(model, opt, x, y).item() for _ in range(3)]
        got[dev] = losses, [p.detach().cpu().numpy() for p in model.parameters()]
        assert all(p.device == dev for p in model.parameters())
    np.testing.assert_allclose(got["cuda"][0], got["cpu"][0], rtol=1e-5)
    for a, b in zip(got["cuda"][1], got["cpu"][1]):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    assert got["cuda"][0][2] < got["cuda"][0][0]


def test_a_training_step_stays_on_the_device():
    model, opt, x, y = make("cuda", "adam")
    step = tg.compile(train_step)
    step(model, opt, x, y)                           # trace, compile, upload the learning rate
    with count_transfers() as c:
        loss = step(model, opt, x, y)
        step(model, opt, x, y)
    assert c.count == 0, c
    with count_transfers() as c:
        loss.item()
    assert c.to_host == 1 and c.to_device == 0, c


def test_a_changed_learning_rate_is_read_without_retracing():
    model, opt, x, y = make("cuda", "sgd")
    step = tg.compile(train_step)
    step(model, opt, x, y)
    before = [p.detach().cpu().numpy() for p in model.parameters()]
    opt.lr = 0.0
    for group in getattr(opt, "param_groups", ()):
        group["lr"] = 0.0
    step(model, opt, x, y)                      # momentum buffers still move the parameters; lr 0 does not
    after = [p.detach().cpu().numpy() for p in model.parameters()]
    assert all(np.array_equal(a, b) for a, b in zip(before, after))
    assert step.stats()["traces"] == 1


def test_stage_cuda_shows_the_generated_kernels():
    f = tg.compile(lambda x: (x.exp() * 2.0).sum(1))
    x = tg.tensor(X, device="cuda", requires_grad=True)
    text = f.ir(x, stage="cuda")
    assert "# lambda (forward) k0 [loop]" in text and "# lambda (backward) k0" in text
    assert "def forward_k0(" in text and "cuda.threadIdx.x" in text and "math.exp" in text
    with pytest.raises(ValueError, match="stage 'llvm' needs backend='llvm'; lambda uses 'cuda'"):
        f.ir(x, stage="llvm")
    with pytest.raises(ValueError, match="stage 'cuda' needs backend='cuda'"):
        f.ir(tg.tensor(X), stage="cuda")


def test_stage_cuda_names_library_kernels():
    f = tg.compile(lambda a, b: (a @ b).relu())
    text = f.ir(tg.tensor(X, device="cuda"), tg.tensor(X.T.copy(), device="cuda"), stage="cuda")
    assert "k0 [extern] ops=matmul" in text and "device library" in text


def test_profile_times_the_device_kernels():
    f = tg.compile(lambda x: (x - x.mean(1, keepdims=True)).tanh())
    rows = f.profile(tg.tensor(X, device="cuda"), repeat=2)
    assert [row["kernel"] for row in rows] == [f"k{j}" for j in range(len(rows))]
    for row in rows:
        assert row["time"] > 0 and row["bytes"] > 0 and row["GB/s"] > 0 and row["ops"]


def test_check_mode_compares_with_interpret_and_names_a_wrong_kernel():
    f = tg.compile(lambda x: (x * 3.0).exp().sum(1), check=True)
    x = tg.tensor(X, device="cuda")
    np.testing.assert_allclose(f(x).cpu().numpy(), np.exp(X * 3.0).sum(1), rtol=1e-5)
    g = tg.compile(lambda x: (x * 2.0 + 1.0).tanh() * x, check=True)
    g(x)
    prog = next(iter(g.cache.values())).programs[0]
    _, launches, _, _ = prog.steps[0]
    (ck, slots), kernel = launches[0], prog.kernels[0]

    def wrong(*arrays):                  # the kernel runs, then its output is spoiled
        ck(*arrays)
        for a, v in zip(arrays, ck.buffers):
            if any(v is o for o in kernel.outputs):
                a.copy_to_device(np.full(a.shape, 7.0, a.dtype))
    wrong.buffers = ck.buffers
    prog.steps[0] = ("launch", [(wrong, slots)], None, None)
    with pytest.raises(tg.CheckError, match=r"lambda: kernel k0 \[loop\].*differs from the interpret backend"):
        g(x)


def test_a_compiled_loss_and_its_backward_copy_nothing():
    """Constants the trace made on the host (cross_entropy's row indices) go to the device once."""
    loss_fn = tg.compile(lambda logits, y: F.cross_entropy(logits, y))
    logits, y = tg.tensor(X[:, :3], device="cuda", requires_grad=True), tg.tensor(Y, device="cuda")
    loss_fn(logits, y).backward()
    logits.grad = None
    with count_transfers() as c:
        loss_fn(logits, y).backward()
    assert c.count == 0, c
    eager = tg.tensor(X[:, :3], requires_grad=True)
    F.cross_entropy(eager, tg.tensor(Y)).backward()
    np.testing.assert_allclose(logits.grad.cpu().numpy(), eager.grad.numpy(), rtol=1e-5, atol=1e-7)
