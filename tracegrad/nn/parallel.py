"""tg.nn.parallel.DistributedDataParallel, as PyTorch's: one model replica per rank, gradients averaged
across the ranks during backward.

At construction the ranks check that they hold the same model and take rank 0's parameters and buffers.
The parameters (those that require grad) are grouped in buckets in reverse order of `parameters()` (the
order their gradients are usually ready in), the first of at most 1 MiB, the rest of at most
`bucket_cap_mb`. A hook on each parameter marks its gradient ready once backward has accumulated it;
when a bucket is complete its gradients are flattened and their sum across the ranks starts at once
(eagerly: a non-blocking MPI all-reduce that runs while the rest of the backward computes; inside
`tg.compile`: an all_reduce step of the compiled program). When the backward pass ends, every bucket
is waited for and each parameter's .grad becomes the average over the ranks.

With `broadcast_buffers` (the default) each forward first copies rank 0's buffers (running statistics)
to every rank. `no_sync()` skips the averaging (gradients accumulate locally; the next synchronized backward averages
the sum). A parameter that got no gradient in a backward pass is an error naming it, unless
`find_unused_parameters=True`: then it counts as a zero gradient in the average (as PyTorch)."""
import contextlib
import zlib

import numpy as np

from .. import distributed as dist
from .. import modes
from ..autograd import no_grad, queue_callback
from ..core import bind
from ..ops.collective import backend
from ..tensor import cat, tensor, zeros
from .modules import Module

FIRST_BUCKET_BYTES = 1 << 20


class DistributedDataParallel(Module):
    def __init__(self, module, device_ids=None, output_device=None, dim=0, broadcast_buffers=True,
                 bucket_cap_mb=25, find_unused_parameters=False, gradient_as_bucket_view=False, static_graph=False):
        super().__init__()
        if not dist.is_initialized():
            raise RuntimeError("DistributedDataParallel: call tracegrad.distributed.init_process_group() first")
        self.module = module
        self.find_unused_parameters = bool(find_unused_parameters)
        self.broadcast_buffers = bool(broadcast_buffers)
        self.require_backward_grad_sync = True
        named = [(n, p) for n, p in module.named_parameters() if p.requires_grad]
        object.__setattr__(self, "_names", [n for n, _ in named])
        object.__setattr__(self, "_synced", [p for _, p in named])
        _same_model_on_every_rank(named, list(module.buffers()))
        with no_grad():
            for t in list(module.parameters()) + list(module.buffers()):
                dist.broadcast(t, 0)
        object.__setattr__(self, "_buckets", _buckets(self._synced, bucket_cap_mb * (1 << 20)))
        object.__setattr__(self, "_bucket_of", {i: b for b, idx in enumerate(self._buckets) for i in idx})
        object.__setattr__(self, "_pass", _Pass())
        for i, p in enumerate(self._synced):
            p.register_post_accumulate_grad_hook(lambda p, i=i: self._grad_ready(i))

    def forward(self, *args, **kwargs):
        if self.broadcast_buffers:               # rank 0's buffers (running statistics), as PyTorch
            for b in self.module.buffers():
                dist.broadcast(b, 0)
        return self.module(*args, **kwargs)

    @contextlib.contextmanager
    def no_sync(self):
        """Backward passes inside do not average: gradients accumulate on each rank."""
        before, self.require_backward_grad_sync = self.require_backward_grad_sync, False
        try:
            yield
        finally:
            self.require_backward_grad_sync = before

    # ------------------------------------------------------------ during backward
    def _grad_ready(self, i):
        if not self.require_backward_grad_sync:
            return
        st = self._pass
        if not st.ready:
            queue_callback(self._finish)
        st.ready.add(i)
        b = self._bucket_of[i]
        if all(j in st.ready for j in self._buckets[b]):
            self._launch(b)
        st.progress()

    def _launch(self, b):
        grads = [self._synced[j].grad for j in self._buckets[b]]
        flat = cat([g.reshape(-1) if g is not None else zeros(p.numel(), dtype=p.dtype, device=p.device)
                    for g, p in zip(grads, (self._synced[j] for j in self._buckets[b]))])
        if modes.interpreter() is modes.eager and flat.device.type == "cpu":
            self._pass.inflight[b] = (flat, backend().start_all_reduce(flat._data, "SUM"))
        else:                                 # traced (a compiled step) or cuda: a collective of the program
            self._pass.inflight[b] = (bind("all_reduce", flat, op="SUM"), None)

    def _finish(self):
        st, world = self._pass, dist.get_world_size()
        try:
            missing = [i for i in range(len(self._synced)) if i not in st.ready]
            if missing and not self.find_unused_parameters:
                raise RuntimeError(
                    "DistributedDataParallel: these parameters received no gradient in this backward pass: "
                    + ", ".join(self._names[i] for i in missing) + f" (rank {dist.get_rank()}). Pass "
                    "find_unused_parameters=True to DistributedDataParallel to average them as zeros, or make "
                    "every parameter take part in the loss")
            for b, idx in enumerate(self._buckets):
                if b not in st.inflight:
                    self._launch(b)
            for b, idx in enumerate(self._buckets):
                flat, request = st.inflight[b]
                if request is not None:
                    backend().wait(request, f"DistributedDataParallel's all_reduce of gradient bucket {b}")
                avg, offset = flat / world, 0
                for j in idx:
                    p = self._synced[j]
                    n = p.numel()
                    p.grad = avg[offset:offset + n].view(p.shape)
                    offset += n
        finally:
            st.reset()


class _Pass:
    """What one synchronized backward pass has seen: the ready parameters and the buckets started."""

    def __init__(self):
        self.ready, self.inflight = set(), {}

    def progress(self):
        """Let MPI move the started all-reduces along (its progress happens inside MPI calls)."""
        requests = [r for _, r in self.inflight.values() if r is not None]
        if requests:
            requests[0].Testall(requests)

    def reset(self):
        self.ready, self.inflight = set(), {}


def _buckets(params, cap_bytes):
    """Lists of parameter indices, in reverse order, the first bucket at most 1 MiB, the others at most
    `cap_bytes`; a bucket holds one dtype and device."""
    out, size, first = [], 0, True
    for i in reversed(range(len(params))):
        p = params[i]
        nbytes = p.numel() * p.dtype.itemsize
        limit = min(FIRST_BUCKET_BYTES, cap_bytes) if first else cap_bytes
        last = params[out[-1][-1]] if out else None
        if not out or size + nbytes > limit or (p.dtype, p.device) != (last.dtype, last.device):
            if out:
                first = False
            out.append([])
            size = 0
        out[-1].append(i)
        size += nbytes
    return out


def _same_model_on_every_rank(named, buffers):
    """Every rank holds parameters of the same names, shapes and dtypes (else every rank raises, saying
    which ranks differ): otherwise the buckets' all-reduces would not match."""
    text = ";".join(f"{n}:{tuple(p.shape)}:{p.dtype}" for n, p in named)
    mine = np.array([len(named), sum(p.numel() for _, p in named), zlib.crc32(text.encode()), len(buffers)],
                    np.int64)
    every = tensor(mine)
    gathered = [zeros(4, dtype=every.dtype) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, every)
    rows = [g.numpy() for g in gathered]
    if any((r != mine).any() for r in rows):
        raise RuntimeError("DistributedDataParallel: the ranks hold different models (every rank must build the "
                           "same model): " + "; ".join(f"rank {k}: {r[0]} parameters of {r[1]} elements, "
                                                       f"{r[3]} buffers" for k, r in enumerate(rows)))
