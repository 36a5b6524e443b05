"""The reference workloads, as one table: the eight of the bench's definition (W1-W8: op_workloads.py,
mlp_workloads.py), W9 and W10 two CNN training steps (cnn_workloads.py), W11 a 2-layer LSTM's
training step (lstm_step.py), W12 a transformer's training step (transformer.py), W13 a multi-tensor
Adam update (adam_update.py).

Every workload has (workload_base.Workload)
  - `inputs(seed)`: a dict of NumPy arrays (float32, int64 labels), fixed seed;
  - `reference(inp)`: the outputs in float64 (the NumPy code run on float64 copies);
  - one setup function per column, `setup(inp) -> run`, where `run()` does one whole
    step (forward, and backward / update where the workload has them) and returns the
    outputs that are checked against the reference: [loss or y, grads ...].

Columns: "numpy" (hand-written backward; x**3 written x*x*x), "tg eager", "tg compiled"
(only when `tg.compile` exists), and the peers of peers.py: "torch eager", "torch.compile",
"jax.jit" (only when importable). Framework modules are imported lazily, inside the setup
functions.
"""
import functools

from . import adam_update as ADAM_UPDATE
from . import mlp_workloads, op_workloads, peers
from . import transformer as GPT
from .cnn_workloads import CNN_WORKLOADS
from .lstm_step import workload as lstm_workload
from .np_steps import sgd_implied
from .streams import Pass, Traffic
from .workload_base import LR, Workload, _reference
# The helpers GPU probes and examples take from here (../examples/gpu_*.py and the first-contact probe):
# they keep this address since the split.
from .op_workloads import EPS_LN, _chain, _gelu, _layernorm_loss, _softmax, w3_numpy, w5_numpy  # noqa: F401
from .workload_base import _tg_fwd_bwd, _tg_train_step  # noqa: F401


def _workload(mod, wid, name, what):
    """Workload `wid` of module `mod` (its wN_inputs, wN_numpy, wN_tg_eager, wN_tg_compiled) with every column."""
    n = wid.lower()
    w = Workload(wid, name, what, getattr(mod, f"{n}_inputs"), _reference(getattr(mod, f"{n}_numpy")))
    w.columns = {"numpy": getattr(mod, f"{n}_numpy"), "tg eager": getattr(mod, f"{n}_tg_eager"),
                 "tg compiled": getattr(mod, f"{n}_tg_compiled"),
                 "torch eager": lambda inp: peers.torch_setup(wid, inp, compiled=False),
                 "torch built-in": lambda inp: peers.torch_builtin_setup(wid, inp),
                 "torch.compile": lambda inp: peers.torch_setup(wid, inp, compiled=True),
                 "jax.jit": lambda inp: peers.jax_setup(wid, inp)}
    return w


def _model_workload(wid, name, what, inputs, numpy_setup, tg_setup, torch_setup, stateful, builtin=None):
    """A workload defined in a module of its own (transformer.py, adam_update.py): inputs, the NumPy column,
    tracegrad's and torch's setups taking `compiled`, torch's built-in column's setup where it has one; no
    jax column. `stateful`: its outputs are the parameters a call updates (W13), not that call's own results
    (W12: loss, gradients)."""
    w = Workload(wid, name, what, inputs, _reference(numpy_setup), stateful=stateful)
    w.columns = {"numpy": numpy_setup, "tg eager": lambda inp: tg_setup(inp, False),
                 "tg compiled": lambda inp: tg_setup(inp, True), "torch eager": lambda inp: torch_setup(inp, False),
                 "torch built-in": builtin or (lambda inp: None), "torch.compile": lambda inp: torch_setup(inp, True),
                 "jax.jit": lambda inp: None}
    return w


def _traffic(passes, inp):
    """The workload's passes over float32 arrays of x's size."""
    return Traffic(inp["x"].size, passes)


_COPY = (Pass(("x",), ("y",)),)
OPS, MLP = op_workloads, mlp_workloads
WORKLOADS = [
    _workload(OPS, "W1", "gelu_fwd", "4M elements, 0.5*x*(1+tanh(0.7978845608*(x+0.044715*x**3))), forward"),
    _workload(OPS, "W2", "softmax_fwd", "(4096, 1024) row softmax from primitives, forward"),
    _workload(OPS, "W3", "layernorm_fwd_bwd", "(4096, 1024) layer norm from primitives, loss (y*g).sum(), "
              "grads x, w, b"),
    _workload(MLP, "W4", "mlp_train_step", "MLP 784-256-256-10, batch 256, cross-entropy, fwd+bwd+SGD(0.01)"),
    _workload(OPS, "W5", "tiny_overhead", "x (8,), chain of 20 elementwise ops, fwd+bwd: per-call overhead"),
    _workload(OPS, "W6", "broadcast_grad", "a (64,1,128) * b (1,32,128) + c (128,), tanh, sum; grads a, b, c"),
    _workload(OPS, "W7", "column_center_fwd_bwd", "x (8192, 512), z = x.T centered per row times w, loss mean of "
              "squares; grads x, w"),
    _workload(MLP, "W8", "mlp_deep_narrow_adam", "12 Linear 64-32x11-10, batch 128, relu, cross-entropy, fwd+bwd+Adam, "
              "one compiled step"),
]
WORKLOADS[3].implied = sgd_implied(mlp_workloads.PARAMS, LR)
WORKLOADS[0].compute_floor = op_workloads.w1_compute_floor
WORKLOADS[3].stateful = WORKLOADS[7].stateful = True
WORKLOADS[6].tolerances = (1e-5, 1e-4, 1e-4)     # loss, dx, dw (WORKLOADS.md)
# Memory-bound workloads: the arrays a call must read and write, as big as x (streams.py). W1, W2: read x,
# write y; W3: read x and g, write dx (a row's statistics stay in cache); W7: read x for the column means, then
# read it again for the centered values and write dx. The vectors (w, b, their gradients) are left out: under
# 0.1 % of the bytes.
for _w, _passes in zip(WORKLOADS, (_COPY, _COPY, (Pass(("x", "g"), ("dx",)),), None, None, None,
                                   (Pass(("x",)), Pass(("x",), ("dx",))), None)):
    _w.traffic = _passes and functools.partial(_traffic, _passes)

WORKLOADS.append(lstm_workload())
WORKLOADS += CNN_WORKLOADS
WORKLOADS += [
    _model_workload("W12", "gpt_train_step", "GPT-style decoder, 2 pre-LN blocks, causal attention, erf GELU, "
                    "tied head, cross-entropy, Adam; batch 8 x 64 tokens, width 128, vocabulary 512",
                    GPT.inputs, GPT.numpy_step, GPT.tg_step, GPT.torch_step, stateful=False),
    _model_workload("W13", "adam_multi_tensor", "one Adam step over 60 tensors (2.4M elements), gradients given",
                    ADAM_UPDATE.inputs, ADAM_UPDATE.numpy_update, ADAM_UPDATE.tg_update, ADAM_UPDATE.torch_update,
                    stateful=True, builtin=lambda inp: ADAM_UPDATE.torch_update(inp, False, fused=True)),
]
WORKLOADS.sort(key=lambda w: int(w.id[1:]))


def find(name):
    """A workload by id ("W3", "w3", "3") or name ("layernorm_fwd_bwd", "layernorm")."""
    key = name.strip().lower()
    for w in WORKLOADS:
        if key in (w.id.lower(), w.id[1:], w.name) or w.name.startswith(key):
            return w
    raise KeyError(f"unknown workload {name!r}; choose one of " +
                   ", ".join(f"{w.id} ({w.name})" for w in WORKLOADS))
