"""Data-parallel training of W4's MLP (784-256-256-10, cross-entropy, SGD) with DistributedDataParallel:

    python -m tracegrad.distributed.run --nproc 2 examples/ddp_train.py          # 2 ranks, 1 thread each
    python -m tracegrad.distributed.run --nproc 2 examples/ddp_train.py --eager  # without tg.compile

Each rank trains on its half of every global batch (1024 rows by default) with a compiled step (forward,
backward with the gradients averaged across the ranks, SGD); it prints its loss now and then. Then, in the
same run, rank 0 trains alone on the whole batches with one thread (rank 1 idles at a barrier), and rank
0 prints both times per global batch, the speed-up, and the time the steps spent in the all-reduce."""
import argparse
import os
import time

import numpy as np

import tracegrad as tg
import tracegrad.distributed as dist
import tracegrad.nn.functional as F
from tracegrad.nn.parallel import DistributedDataParallel as DDP


def mlp(seed):
    tg.manual_seed(seed)
    return tg.nn.Sequential(tg.nn.Linear(784, 256), tg.nn.ReLU(), tg.nn.Linear(256, 256), tg.nn.ReLU(),
                            tg.nn.Linear(256, 10))


def data(batches, batch, seed=0):
    """A fixed synthetic problem: labels from a random linear map of the inputs."""
    r = np.random.default_rng(seed)
    w = r.standard_normal((784, 10)).astype(np.float32)
    xs = [r.standard_normal((batch, 784)).astype(np.float32) for _ in range(batches)]
    return [(tg.from_numpy(x), tg.from_numpy((x @ w).argmax(1))) for x in xs]


def trainer(model, compiled):
    opt = tg.optim.SGD(model.parameters(), lr=0.05)

    def step(x, y):
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss
    return tg.compile(step) if compiled else step


def timed(step, batches, epochs, log=None):
    """Seconds per batch (median over epochs after a warm-up epoch), and the last loss."""
    for x, y in batches:
        loss = step(x, y)
    per_epoch = []
    for e in range(epochs):
        t = time.perf_counter()
        for x, y in batches:
            loss = step(x, y)
        per_epoch.append((time.perf_counter() - t) / len(batches))
        if log:
            log(e, float(loss))
    return float(np.median(per_epoch)), float(loss)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=1024, help="rows of a global batch (split over the ranks)")
    ap.add_argument("--batches", type=int, default=8)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--eager", action="store_true", help="do not compile the step")
    a = ap.parse_args()
    dist.init_process_group("mpi")
    rank, world = dist.get_rank(), dist.get_world_size()
    batches = data(a.batches, a.batch)
    share = a.batch // world
    mine = [(x[rank * share:(rank + 1) * share], y[rank * share:(rank + 1) * share]) for x, y in batches]
    model = DDP(mlp(0))
    from tracegrad.ops.collective import backend
    spent = _count_all_reduce_time(backend())
    step = trainer(model, not a.eager)
    parallel, loss = timed(step, mine, a.epochs,
                           log=lambda e, l: print(f"rank {rank}: epoch {e} loss {l:.4f}", flush=True))
    in_reduce = spent[0] / (a.batches * (a.epochs + 1))
    dist.barrier()
    if rank == 0:
        alone, loss1 = timed(trainer(mlp(0), not a.eager), batches, a.epochs)
        print(f"{world} ranks x {os.environ.get('TRACEGRAD_THREADS', 'all')} thread(s): {parallel * 1e3:.2f} ms per "
              f"global batch of {a.batch}; 1 rank: {alone * 1e3:.2f} ms; speed-up {alone / parallel:.2f}x; "
              f"waiting in all-reduce {in_reduce * 1e3:.3f} ms per step "
              f"({'compiled' if not a.eager else 'eager'}, load average {os.getloadavg()[0]:.1f})", flush=True)
    dist.barrier()


def _count_all_reduce_time(group):
    """Wrap the group's wait so the time spent waiting for collectives adds up in the returned cell."""
    spent, wait = [0.0], group.wait

    def timed_wait(request, what):
        t = time.perf_counter()
        wait(request, what)
        spent[0] += time.perf_counter() - t
    group.wait = timed_wait
    return spent


if __name__ == "__main__":
    main()
