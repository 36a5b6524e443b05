"""The optional peers' columns of the reference workloads: torch eager, torch's built-in fused ops
(where it has one), torch.compile, jax.jit.

Each runs the same math functions as tracegrad's columns (op_workloads.py); torch.compile and jax.jit
wrap the forward (jax: value_and_grad, and for W4/W8 the whole training step), the backward runs as
each framework does it. torch and jax are imported inside the setup functions.
"""
from .mlp_workloads import PARAMS, W8_PARAMS
from .op_workloads import EPS_LN, W7_N, _bcast_loss, _center_loss, _chain, _gelu, _layernorm_loss
from .workload_base import ADAM, LR, _tg_fwd_bwd


def _torch_layernorm_loss(x, w, b, g):
    mean = x.mean(dim=1, keepdim=True)
    d = x - mean
    var = (d * d).mean(dim=1, keepdim=True)
    return ((d / (var + EPS_LN).sqrt() * w + b) * g).sum()


def _torch_center_loss(x, w):
    z = x.T
    y = (z - z.mean(dim=1, keepdim=True)) * w[:, None]
    return (y * y).sum() / W7_N


def _mlp_logits(x, params, relu):
    """params: W0, b0, W1, b1, ...; relu between the Linear layers."""
    for i in range(0, len(params), 2):
        x = x @ params[i].T + params[i + 1]
        if i + 2 < len(params):
            x = relu(x)
    return x


def torch_setup(wid, inp, compiled):
    import torch
    t = {k: torch.from_numpy(v.copy()) for k, v in inp.items()}
    wrap = torch.compile if compiled else (lambda f: f)
    if wid == "W1":
        f = wrap(lambda x: _gelu(x, torch.tanh))
        return lambda: [f(t["x"])]
    if wid == "W2":
        f = wrap(lambda x: (lambda e: e / e.sum(dim=1, keepdim=True))((x - x.amax(dim=1, keepdim=True)).exp()))
        return lambda: [f(t["x"])]
    if wid in ("W4", "W8"):
        return torch_train_setup([t[k] for k in (PARAMS if wid == "W4" else W8_PARAMS)], t["x"], t["y"],
                                 "SGD" if wid == "W4" else "Adam", compiled)
    names, fn = {"W3": (("x", "w", "b"), _torch_layernorm_loss),
                 "W5": (("x",), lambda x: _chain(x, torch.tanh, torch.exp)),
                 "W6": (("a", "b", "c"), lambda a, b, c: _bcast_loss(a, b, c, torch.tanh)),
                 "W7": (("x", "w"), _torch_center_loss)}[wid]
    leaves = [t[n].requires_grad_() for n in names]
    return _tg_fwd_bwd(wrap(fn), list(t.values()), leaves)


def torch_train_setup(params, x, y, opt, compiled):
    """run() of an MLP training step (W4, W8, the survey's mlp_deep64_adam) on torch tensors `params`
    (W0, b0, W1, b1, ...): cross-entropy of the relu MLP's logits, backward, then SGD(LR) or
    Adam(**ADAM); torch.compile (compiled) wraps the loss, the backward and the update run as torch
    runs them. Returns [loss] + params."""
    import torch
    return torch_step(lambda x, y, *ps: torch.nn.functional.cross_entropy(_mlp_logits(x, ps, torch.relu), y),
                      params, x, y, opt, compiled)


def torch_step(loss_fn, params, x, y, opt, compiled):
    """run() of one training step: loss_fn(x, y, *params) (wrapped in torch.compile when compiled),
    backward, then SGD(LR) or Adam(**ADAM). Returns [loss] + params."""
    step = torch_steps(loss_fn, params, opt, compiled)
    return lambda: step(x, y)


def torch_steps(loss_fn, params, opt, compiled):
    """step(x, y) of torch_step, for batches that change from call to call (bench/ragged.py)."""
    import torch
    params = [p.requires_grad_() for p in params]
    f = torch.compile(loss_fn) if compiled else loss_fn
    opt = torch.optim.SGD(params, lr=LR) if opt == "SGD" else torch.optim.Adam(params, **ADAM)

    def step(x, y):
        opt.zero_grad()
        loss = f(x, y, *params)
        loss.backward()
        opt.step()
        return [loss] + params
    return step


def jax_train_setup(params, x, y, opt):
    """run() of the same training step under jax.jit: the loss, its gradients and the SGD or Adam
    update (PyTorch's formulation) in one jitted function carrying the parameters and Adam's state."""
    step = jax_train_steps(params, opt)
    return lambda: step(x, y)


def jax_train_steps(params, opt):
    """step(x, y) of jax_train_setup, for batches that change from call to call (bench/ragged.py)."""
    import jax
    import jax.numpy as jnp
    block = jax.block_until_ready

    def loss_fn(params, x, y):
        logp = jax.nn.log_softmax(_mlp_logits(x, params, jax.nn.relu), axis=1)
        return -jnp.take_along_axis(logp, y[:, None], axis=1).mean()

    @jax.jit
    def step(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        if opt == "SGD":
            return loss, [p - LR * g for p, g in zip(params, grads)], opt_state
        (b1, b2), lr, eps = ADAM["betas"], ADAM["lr"], ADAM["eps"]
        m, v, n = opt_state
        n = n + 1
        m = [b1 * a + (1 - b1) * g for a, g in zip(m, grads)]
        v = [b2 * a + (1 - b2) * g * g for a, g in zip(v, grads)]
        params = [p - lr / (1 - b1 ** n) * a / (jnp.sqrt(b / (1 - b2 ** n)) + eps)
                  for p, a, b in zip(params, m, v)]
        return loss, params, (m, v, n)
    state = [list(params), ([jnp.zeros_like(p) for p in params], [jnp.zeros_like(p) for p in params],
                            jnp.zeros((), params[0].dtype))]

    def run(x, y):
        loss, state[0], state[1] = block(step(state[0], state[1], x, y))
        return [loss] + state[0]
    run.traces = step._cache_size          # the shapes jax.jit has traced and compiled for
    return run


def torch_builtin_setup(wid, inp):
    """torch's own fused op for the workload, eager (W1 gelu(approximate="tanh"), W2 softmax,
    W3 layer_norm forward and backward); None for the others."""
    import torch
    import torch.nn.functional as F
    t = {k: torch.from_numpy(v.copy()) for k, v in inp.items()}
    if wid == "W1":
        return lambda: [F.gelu(t["x"], approximate="tanh")]
    if wid == "W2":
        return lambda: [torch.softmax(t["x"], dim=1)]
    if wid == "W3":
        leaves = [t[n].requires_grad_() for n in ("x", "w", "b")]
        return _tg_fwd_bwd(lambda x, w, b, g: (F.layer_norm(x, w.shape, w, b, EPS_LN) * g).sum(),
                           list(t.values()), leaves)
    return None


def jax_setup(wid, inp):
    import jax
    import jax.numpy as jnp
    t = {k: jnp.asarray(v) for k, v in inp.items()}
    block = jax.block_until_ready
    if wid == "W1":
        f = jax.jit(lambda x: _gelu(x, jnp.tanh))
        return lambda: [block(f(t["x"]))]
    if wid == "W2":
        f = jax.jit(lambda x: (lambda e: e / e.sum(axis=1, keepdims=True))(jnp.exp(x - x.max(axis=1, keepdims=True))))
        return lambda: [block(f(t["x"]))]
    if wid in ("W4", "W8"):
        return jax_train_setup([t[k] for k in (PARAMS if wid == "W4" else W8_PARAMS)], t["x"], t["y"],
                               "SGD" if wid == "W4" else "Adam")
    names, fn = {"W3": (("x", "w", "b"), lambda x, w, b, g: _layernorm_loss(x, w, b, g, jnp.sqrt)),
                 "W5": (("x",), lambda x: _chain(x, jnp.tanh, jnp.exp)),
                 "W6": (("a", "b", "c"), lambda a, b, c: _bcast_loss(a, b, c, jnp.tanh)),
                 "W7": (("x", "w"), _center_loss)}[wid]
    keys = list(t)
    f = jax.jit(jax.value_and_grad(fn, argnums=tuple(keys.index(n) for n in names)))

    def run():
        loss, grads = block(f(*t.values()))
        return [loss] + list(grads)
    return run
