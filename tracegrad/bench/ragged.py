"""R1 and R2, the bench's cold sequences: training whose batch shape changes from step to step (issue 26).

- R1 ragged_mlp_train: an MLP 784-256-10 (relu, cross-entropy, SGD 0.01), one step per batch over 24 batches
  of 24 distinct sizes in a shuffled order: 22 in 17..256, the size-1 batch and one empty batch (its loss is
  NaN and its gradients zero, as eager computes them).
- R2 seqlen_gpt_train: W12's decoder (transformer.py), batch 4, one Adam step per batch over 8 distinct
  sequence lengths in 8..64, shuffled.

`run_sequence(seq, column)` runs a whole sequence in this process: it builds the column's model and batches,
then times from the first step's start to the last step's end, and returns the seconds, the number of traces
(compiled columns: tracegrad's stats()["traces"], torch.compile's unique graphs, jax.jit's cache size) and
the losses and final parameters, which the bench checks against a float64 run (cold.py runs each column cold,
in a fresh process)."""
import math
import time
import warnings
from dataclasses import dataclass, field, replace

import numpy as np

from . import transformer as GPT
from .np_steps import cross_entropy_with_grad

LR = 0.01
COLUMNS = ("numpy", "tg eager", "tg compiled", "tg dynamic=True", "torch eager", "torch.compile", "jax.jit")


@dataclass(frozen=True)
class Sequence:
    id: str
    name: str
    what: str
    sizes: tuple                  # per step: the batch size (R1) or the sequence length (R2)
    dims: tuple = ()              # R1: the layer widths; R2: (batch,)
    seed: int = 0
    absent: tuple = field(default=(), compare=False)   # columns without a version of this sequence

    @property
    def gpt(self):
        return self.id == "R2"


def batch_sizes(seed=26, n=24, lo=17, hi=256):
    """n distinct batch sizes in a shuffled order: n - 2 in lo..hi, 1 and 0."""
    r = np.random.default_rng(seed)
    sizes = [int(s) for s in r.choice(np.arange(lo, hi + 1), n - 2, replace=False)] + [1, 0]
    return tuple(int(s) for s in r.permutation(sizes))


def seq_lengths(seed=27, n=8, lo=8, hi=64):
    """n distinct sequence lengths in lo..hi (both ends included), shuffled."""
    r = np.random.default_rng(seed)
    mid = [int(s) for s in r.choice(np.arange(lo + 1, hi), n - 2, replace=False)]
    return tuple(int(s) for s in r.permutation(mid + [lo, hi]))


SEQUENCES = [
    Sequence("R1", "ragged_mlp_train", "MLP 784-256-10, cross-entropy, SGD(0.01); 24 batches of 24 distinct sizes "
             "(17..256, 1, 0), shuffled", batch_sizes(), (784, 256, 10)),
    Sequence("R2", "seqlen_gpt_train", "W12's GPT decoder, batch 4, Adam; 8 sequence lengths 8..64, shuffled",
             seq_lengths(), (4,), absent=("numpy", "jax.jit")),
]


def find_sequence(name):
    """R1/R2 by id or name (prefix), or None."""
    key = name.strip().lower()
    return next((s for s in SEQUENCES if key in (s.id.lower(), s.name) or s.name.startswith(key)
                 or key in ("ragged", "seqlen") and s.name.startswith(key)), None)


# ------------------------------------------------------------------ data
def mlp_data(seq, dtype=np.float32):
    """(the parameters W0, b0, W1, b1, ... in PyTorch's nn.Linear init, [(x, y) per step])."""
    r = np.random.default_rng(seq.seed)
    params = []
    for fi, fo in zip(seq.dims[:-1], seq.dims[1:]):
        bound = 1.0 / math.sqrt(fi)
        params += [r.uniform(-bound, bound, (fo, fi)).astype(dtype), r.uniform(-bound, bound, fo).astype(dtype)]
    batches = [(r.standard_normal((n, seq.dims[0])).astype(dtype), r.integers(0, seq.dims[-1], n)) for n in seq.sizes]
    return params, batches


def gpt_data(seq, dtype=np.float32):
    """(W12's parameters by name, [(idx, tgt) per step]) for batches of seq.dims[0] sequences."""
    inp = GPT.inputs(seq.seed)
    r = np.random.default_rng(seq.seed + 1)
    batches = [(r.integers(0, GPT.V, (seq.dims[0], t)), r.integers(0, GPT.V, (seq.dims[0], t))) for t in seq.sizes]
    return {k: inp[k].astype(dtype) for k in GPT.NAMES}, batches


# ------------------------------------------------------------------ the columns: (step(a, b) -> loss, params(), traces())
# traces() -> (the number of traces or None, the retrace reasons)
def _numpy_mlp(params, lr):
    p = [a.copy() for a in params]

    def step(x, y):
        acts, hs = [x], []
        for i in range(0, len(p), 2):
            hs.append(acts[-1] @ p[i].T + p[i + 1])
            if i + 2 < len(p):
                acts.append(np.maximum(hs[-1], 0))
        with warnings.catch_warnings(), np.errstate(invalid="ignore", divide="ignore"):
            warnings.simplefilter("ignore", RuntimeWarning)          # the empty batch's mean: NaN, as eager
            loss, dh = cross_entropy_with_grad(hs[-1], y)
        for i in reversed(range(0, len(p), 2)):
            grad_w, grad_b = dh.T @ acts[i // 2], dh.sum(axis=0)
            if i:
                dh = (dh @ p[i]) * (hs[i // 2 - 1] > 0)
            p[i] -= lr * grad_w
            p[i + 1] -= lr * grad_b
        return loss
    return step, lambda: p, lambda: (None, [])


def _tg_compile(column):
    import tracegrad as tg
    return {"tg eager": None, "tg compiled": tg.compile,
            "tg dynamic=True": lambda f: tg.compile(f, dynamic=True)}[column]


def _tg_traces(step):
    """(traces, retrace reasons) of a compiled step; (None, []) for eager."""
    if not hasattr(step, "stats"):
        return lambda: (None, [])
    return lambda: (step.stats()["traces"], [str(r) for r in step.stats()["retrace_reasons"]])


def _tg_mlp(params, column):
    import tracegrad as tg
    from .workload_base import _tg_train_step
    layers = []
    for i in range(0, len(params), 2):
        layers += [tg.nn.Linear(params[i].shape[1], params[i].shape[0]), tg.nn.ReLU()]
    model = tg.nn.Sequential(*layers[:-1])
    model.load_state_dict({f"{2 * (i // 2)}.{'bias' if i % 2 else 'weight'}": tg.from_numpy(a)
                           for i, a in enumerate(params)})
    opt = tg.optim.SGD(model.parameters(), lr=LR)
    compile = _tg_compile(column)
    f = compile(_tg_train_step) if compile else _tg_train_step
    return (lambda x, y: f(model, opt, x, y)), lambda: list(model.parameters()), _tg_traces(f)


def _tg_gpt(params, column):
    step, p = GPT.tg_steps(params, _tg_compile(column))
    return step, lambda: [p[k] for k in GPT.NAMES], _tg_traces(step)


def _torch_traces(compiled):
    if not compiled:
        return lambda: (None, [])
    from torch._dynamo.utils import counters
    return lambda: (counters["stats"]["unique_graphs"], [])


def _torch_mlp(params, column):
    import torch
    from .peers import _mlp_logits, torch_steps
    ps = [torch.from_numpy(a.copy()) for a in params]
    compiled = column == "torch.compile"
    step = torch_steps(lambda x, y, *ps: torch.nn.functional.cross_entropy(_mlp_logits(x, ps, torch.relu), y),
                       ps, "SGD", compiled)
    return (lambda x, y: step(x, y)[0]), lambda: ps, _torch_traces(compiled)


def _torch_gpt(params, column):
    compiled = column == "torch.compile"
    step, p = GPT.torch_steps(params, compiled)
    return step, lambda: [p[k] for k in GPT.NAMES], _torch_traces(compiled)


def _jax_mlp(params, column):
    import jax.numpy as jnp
    from .peers import jax_train_steps
    state = {}
    run = jax_train_steps([jnp.asarray(a) for a in params], "SGD")

    def step(x, y):
        out = run(x, y)
        state["params"] = out[1:]
        return out[0]
    return step, lambda: state["params"], lambda: (run.traces(), [])


def _converter(column):
    """Host arrays -> the column's tensors (outside the timed part)."""
    if column.startswith("tg"):
        import tracegrad as tg
        return tg.from_numpy
    if column.startswith("torch"):
        import torch
        return torch.from_numpy
    if column == "jax.jit":
        import jax.numpy as jnp
        return jnp.asarray
    return lambda a: a


def setup(seq, column, dtype=np.float32):
    """(step, params, traces, batches) of a column, or None where it has no version of the sequence."""
    if column in seq.absent:
        return None
    params, batches = (gpt_data if seq.gpt else mlp_data)(seq, dtype)
    family = "numpy" if column == "numpy" else "jax" if column == "jax.jit" else column.split()[0].split(".")[0]
    make = {("numpy", False): lambda p, c: _numpy_mlp(p, LR), ("tg", False): _tg_mlp, ("tg", True): _tg_gpt,
            ("torch", False): _torch_mlp, ("torch", True): _torch_gpt, ("jax", False): _jax_mlp}[family, seq.gpt]
    step, get_params, traces = make(params, column)
    conv = _converter(column)
    return step, get_params, traces, [tuple(conv(np.ascontiguousarray(a)) for a in b) for b in batches]


def _host(t):
    from .workload_base import _np
    return np.asarray(_np(t), np.float64)


def run_sequence(seq, column, dtype=np.float32):
    """{"seconds", "traces", "reasons", "outputs"}: the whole sequence run in this process (None where the
    column has none); outputs = [the losses per step] + the final parameters, as float64 arrays."""
    made = setup(seq, column, dtype)
    if made is None:
        return None
    step, get_params, traces, batches = made
    losses = []
    t0 = time.perf_counter()
    for a, b in batches:
        losses.append(step(a, b))
    seconds = time.perf_counter() - t0
    count, reasons = traces()
    return {"seconds": seconds, "traces": count, "reasons": reasons,
            "outputs": [np.array([float(_host(v)) for v in losses])] + [_host(p) for p in get_params()]}


def reference(seq):
    """The float64 run the columns are checked against: NumPy's (R1) or tracegrad eager's (R2)."""
    return run_sequence(replace(seq, absent=()), "tg eager" if seq.gpt else "numpy", np.float64)["outputs"]


def max_rel_error(outs, refs):
    """max|out - ref| / max|ref| over the outputs; NaN (the empty batch's loss) must sit where the
    reference has it; inf where it does not."""
    worst = 0.0
    for o, r in zip(outs, refs):
        if o.shape != r.shape or not np.array_equal(np.isnan(o), np.isnan(r)):
            return math.inf
        ok = ~np.isnan(r)
        if ok.any():
            scale = max(float(np.abs(r[ok]).max()), 1e-30)
            worst = max(worst, float(np.abs(o[ok] - r[ok]).max()) / scale)
    return worst
