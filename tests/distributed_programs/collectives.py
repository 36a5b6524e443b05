"""Run by tests/test_distributed.py on 2 ranks: every collective eagerly and compiled, against NumPy; tensors
that differ across the ranks are an error on every rank naming both."""
import numpy as np

import tracegrad as tg
import tracegrad.distributed as dist

dist.init_process_group("mpi")
rank, world = dist.get_rank(), dist.get_world_size()
base = np.arange(6.0).reshape(2, 3)
mine = [base * (r + 1) - r for r in range(world)]          # what each rank contributes
for op, fn in ((dist.ReduceOp.SUM, np.sum), (dist.ReduceOp.AVG, np.mean), (dist.ReduceOp.MAX, np.max),
               (dist.ReduceOp.MIN, np.min), (dist.ReduceOp.PRODUCT, np.prod)):
    t = tg.tensor(mine[rank])
    dist.all_reduce(t, op=op)
    assert np.allclose(t.numpy(), fn(np.stack(mine), axis=0)), (op, t)
ints = tg.tensor(np.array([rank, 10 * rank + 1]))
dist.all_reduce(ints)
assert ints.dtype == tg.int64 and ints.tolist() == [1, 12]
b = tg.tensor(mine[rank])
dist.broadcast(b, src=1)
assert np.array_equal(b.numpy(), mine[1])
out = [tg.zeros(2, 3, dtype=tg.float64) for _ in range(world)]
dist.all_gather(out, tg.tensor(mine[rank]))
assert all(np.array_equal(o.numpy(), m) for o, m in zip(out, mine))
rs = tg.zeros(3, dtype=tg.float64)
dist.reduce_scatter(rs, [tg.tensor(mine[rank][k]) for k in range(world)])
assert np.allclose(rs.numpy(), sum(m[rank] for m in mine))
work = dist.all_reduce(tg.ones(2), async_op=True)
assert work.wait() and work.is_completed()
dist.barrier()


@tg.compile
def mean_grad_norm(x):
    y = (x * x).sum(1)
    dist.all_reduce(y, op=dist.ReduceOp.AVG)
    return y.sqrt()


for k in range(3):
    xs = [base + r + k for r in range(world)]
    got = mean_grad_norm(tg.tensor(xs[rank]))
    assert np.allclose(got.numpy(), np.sqrt(np.mean([(x * x).sum(1) for x in xs], axis=0))), got
assert mean_grad_norm.stats()["traces"] == 1
try:
    dist.all_reduce(tg.ones(4 + rank))
    raise AssertionError("tensors of different shapes must be an error")
except RuntimeError as e:
    assert "rank 0: all_reduce of float32 (4,); rank 1: all_reduce of float32 (5,)" in str(e), e
dist.all_reduce(tg.ones(3))                    # the group still works after the error
dist.destroy_process_group()
assert not dist.is_initialized()
print(f"rank {rank}: ok", flush=True)
