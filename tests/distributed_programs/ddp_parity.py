"""Run by tests/test_distributed.py on 2 ranks: DistributedDataParallel on half batches gives the parameters
one process gets on the whole batch (10 SGD and 10 Adam steps, eager and compiled, float64), traces a
compiled step once, accumulates under no_sync() as one synchronized step would, and handles parameters
without a gradient as PyTorch does."""
import numpy as np

import tracegrad as tg
import tracegrad.distributed as dist
from tracegrad.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("mpi")
rank, world = dist.get_rank(), dist.get_world_size()
assert world == 2
rng = np.random.default_rng(0)
X, Y = tg.tensor(rng.standard_normal((8, 5))), tg.tensor(rng.standard_normal((8, 3)))
mine = slice(rank * 4, rank * 4 + 4)


def make(seed):
    tg.manual_seed(seed)
    return tg.nn.Sequential(tg.nn.Linear(5, 8, dtype=tg.float64), tg.nn.Tanh(), tg.nn.Linear(8, 3, dtype=tg.float64))


def optimizer(name, params):
    return tg.optim.SGD(params, lr=0.1, momentum=0.9) if name == "sgd" else tg.optim.Adam(params, lr=0.01)


def train(model, opt, x, y, compiled, steps=10):
    def step(x, y):
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        return loss
    f = tg.compile(step) if compiled else step
    for _ in range(steps):
        f(x, y)
    return [p.detach().numpy() for p in model.parameters()], f


def worst(a, b):
    return max(float(np.max(np.abs(u - v))) for u, v in zip(a, b))


for name in ("sgd", "adam"):
    reference, _ = train(m := make(0), optimizer(name, m.parameters()), X, Y, False)
    for compiled in (False, True):
        model = DDP(make(rank))                    # each rank starts elsewhere: DDP takes rank 0's
        got, f = train(model, optimizer(name, model.parameters()), X[mine], Y[mine], compiled)
        assert worst(got, reference) < 1e-12, (rank, name, compiled, worst(got, reference))
        if compiled:
            assert f.stats()["traces"] <= 2, f.stats()        # the second: .grad went from None to a tensor

# gradient accumulation: two half-batches under no_sync, then one synchronized half: the average of the sums
model = DDP(make(0))
with model.no_sync():
    ((model(X[mine][:2]) - Y[mine][:2]) ** 2).sum().backward()
    local = [p.grad.numpy().copy() for p in model.parameters()]
((model(X[mine][2:]) - Y[mine][2:]) ** 2).sum().backward()
ref = make(0)
((ref(X) - Y) ** 2).sum().backward()
assert worst([p.grad.numpy() * 2 for p in model.parameters()], [p.grad.numpy() for p in ref.parameters()]) < 1e-12


class TwoHeads(tg.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = tg.nn.Linear(3, 2, dtype=tg.float64), tg.nn.Linear(3, 2, dtype=tg.float64)

    def forward(self, x, use_b):
        return self.a(x) + (self.b(x) if use_b else 0)


x = tg.tensor(np.ones((2, 3)))
strict = DDP(TwoHeads())
try:
    strict(x, False).sum().backward()
    raise AssertionError("an unused parameter must be an error without find_unused_parameters")
except RuntimeError as e:
    assert "received no gradient" in str(e) and "b.weight, b.bias (rank" in str(e), e
loose = DDP(TwoHeads(), find_unused_parameters=True)
loose(x, rank == 1).sum().backward()            # b is used on rank 1 only: its average is half rank 1's gradient
assert np.allclose(loose.module.b.bias.grad.numpy(), [1.0, 1.0]), loose.module.b.bias.grad
assert np.allclose(loose.module.a.bias.grad.numpy(), [2.0, 2.0])


class Counted(tg.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = tg.nn.Linear(3, 2, dtype=tg.float64)
        self.register_buffer("seen", tg.zeros(1, dtype=tg.float64))

    def forward(self, x):
        self.seen.add_(1 + rank)                       # the ranks' buffers drift apart
        return self.lin(x)


counted = DDP(Counted())
for _ in range(2):
    counted(x).sum().backward()
assert counted.module.seen.item() == 1 + (1 + rank), counted.module.seen    # rank 0's after 1 step, then its own
print(f"rank {rank}: ok", flush=True)
