"""What every bench workload is made of: the Workload record, the float64 reference, and the helpers and
settings its columns share (seeded inputs, a tracegrad forward+backward, a training step, SGD's and Adam's
settings). The workloads themselves: op_workloads.py (W1-W3, W5-W7), mlp_workloads.py (W4, W8) and the
model modules; the table: workloads.py."""
from dataclasses import dataclass, field

import numpy as np

LR = 0.01                         # the SGD learning rate of W4, W9, W10
ADAM = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8)     # W8's and the survey's Adam


@dataclass
class Workload:
    id: str
    name: str
    what: str
    inputs: callable
    reference: callable
    columns: dict = field(default_factory=dict)     # column name -> setup(inp) -> run
    implied: callable = None                        # (inp, outputs) -> outputs to check (W4: params -> grads)
    tolerances: tuple = None                        # per output max rel error (default: the bench's TOLERANCE)
    traffic: callable = None                        # memory-bound: inp -> streams.Traffic it must move
    compute_floor: callable = None                  # inp -> run(): its arithmetic on cached data (floor.py)
    stateful: bool = False                          # each call updates parameters (a training step)


def _rng(seed):
    return np.random.default_rng(seed)


def _np(x):
    """Any framework's tensor (or a NumPy array) as a NumPy array copy."""
    if hasattr(x, "detach"):
        x = x.detach()
    if hasattr(x, "cpu") and not isinstance(x, np.ndarray):
        x = x.cpu()
    return np.array(x.numpy() if hasattr(x, "numpy") and not isinstance(x, np.ndarray) else x)


def _reference(numpy_setup):
    """The NumPy code run on float64 copies (int arrays kept) is the reference."""
    def ref(inp):
        inp64 = {k: v.astype(np.float64) if v.dtype.kind == "f" else v for k, v in inp.items()}
        return [np.asarray(o, dtype=np.float64) for o in numpy_setup(inp64)()]
    return ref


def _tg_leaves(tg, inp, names):
    return [tg.tensor(inp[n], requires_grad=True) if n in names else tg.from_numpy(inp[n]) for n in inp]


def _grads_after(leaves):
    return [t.grad for t in leaves]


def _tg_fwd_bwd(loss_fn, tensors, leaves):
    """run(): reset grads, loss = loss_fn(*tensors), loss.backward(); [loss, grads...]."""
    def run():
        for t in leaves:
            t.grad = None
        loss = loss_fn(*tensors)
        loss.backward()
        return [loss] + _grads_after(leaves)
    return run


def _tg_train_step(model, opt, x, y):
    import tracegrad.nn.functional as F
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad()
    return loss
