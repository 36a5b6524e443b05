"""The peers' columns of examples/gpu_check.py: torch eager, torch.compile and jax.jit on CUDA, each
running the same math as tracegrad's columns (torch eager: torch's built-ins where they exist), with
TF32 off (full float32 matrix products, as tracegrad's cuBLAS calls), and their clocks. torch and
jax are imported inside the functions: a missing one only empties its column."""
import time

from tracegrad.bench.peers import _mlp_logits as mlp_logits
from tracegrad.bench.workloads import EPS_LN, _chain, _gelu, _layernorm_loss
from tracegrad.bench.workloads import _tg_fwd_bwd as fwd_bwd   # any framework's tensors with .grad and .backward()

LR = 0.01


def params(inp):
    """The MLP's parameter names in layer order: W0, b0, W1, b1, ..."""
    return [f"{k}{i}" for i in range(sum(k[0] == "W" for k in inp)) for k in "Wb"]


def torch_clock(run):
    import torch
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    run()
    end.record()
    end.synchronize()
    return start.elapsed_time(end)


def jax_clock(run):
    import jax
    t0 = time.perf_counter()
    jax.block_until_ready(run())
    return (time.perf_counter() - t0) * 1e3


def torch_column(wid, inp, compiled):
    import torch
    if not torch.cuda.is_available():
        raise RuntimeError("torch.cuda.is_available() is False")
    torch.backends.cuda.matmul.allow_tf32 = False    # G4: full float32 products on both sides
    torch.set_float32_matmul_precision("highest")
    t = {k: torch.from_numpy(v).cuda() for k, v in inp.items()}
    wrap = torch.compile if compiled else (lambda f: f)
    tf = torch.nn.functional
    if wid == "G1":
        f = wrap(lambda x: _gelu(x, torch.tanh)) if compiled else (lambda x: tf.gelu(x, approximate="tanh"))
        return lambda: [f(t["x"])]
    if wid == "G2":
        f = wrap(_softmax_torch) if compiled else (lambda x: torch.softmax(x, dim=1))
        return lambda: [f(t["x"])]
    if wid == "G3":
        for k in "xwb":
            t[k].requires_grad_()
        eager = lambda x, w, b, g: (tf.layer_norm(x, (x.shape[1],), w, b, EPS_LN) * g).sum()  # noqa: E731
        f = wrap(lambda x, w, b, g: _layernorm_loss(x, w, b, g, torch.sqrt)) if compiled else eager
        return fwd_bwd(f, [t[k] for k in "xwbg"], [t[k] for k in "xwb"])
    if wid == "G4":
        ps = [t[k].requires_grad_() for k in params(inp)]
        f, opt = wrap(lambda x, y, *ps: tf.cross_entropy(mlp_logits(x, ps, torch.relu), y)), torch.optim.SGD(ps, lr=LR)

        def step():
            loss = f(t["x"], t["y"], *ps)
            loss.backward()
            opt.step()
            opt.zero_grad()
            return [loss]
        return step
    t["x"].requires_grad_()
    f = wrap(lambda x: _chain(x, torch.tanh, torch.exp))
    return fwd_bwd(f, [t["x"]], [t["x"]])


def _softmax_torch(x):
    e = (x - x.amax(dim=1, keepdim=True)).exp()
    return e / e.sum(dim=1, keepdim=True)


def jax_column(wid, inp, compiled=True):
    import jax
    import jax.numpy as jnp
    if not any(d.platform == "gpu" for d in jax.devices()):
        raise RuntimeError(f"jax has no GPU backend (devices: {jax.devices()})")
    jax.config.update("jax_default_matmul_precision", "highest")    # no TF32, as the other columns
    t = {k: jax.device_put(jnp.asarray(v), jax.devices("gpu")[0]) for k, v in inp.items()}
    if wid == "G1":
        f = jax.jit(lambda x: _gelu(x, jnp.tanh))
        return lambda: [f(t["x"])]
    if wid == "G2":
        f = jax.jit(lambda x: (lambda e: e / e.sum(axis=1, keepdims=True))(jnp.exp(x - x.max(axis=1, keepdims=True))))
        return lambda: [f(t["x"])]
    if wid == "G3":
        f = jax.jit(jax.value_and_grad(lambda x, w, b, g: _layernorm_loss(x, w, b, g, jnp.sqrt), argnums=(0, 1, 2)))
        return lambda: (lambda lg: [lg[0], *lg[1]])(f(t["x"], t["w"], t["b"], t["g"]))
    if wid == "G4":
        def loss_fn(ps, x, y):
            logp = jax.nn.log_softmax(mlp_logits(x, ps, jax.nn.relu), axis=1)
            return -jnp.take_along_axis(logp, y[:, None], axis=1).mean()

        @jax.jit
        def step(ps, x, y):
            loss, grads = jax.value_and_grad(loss_fn)(ps, x, y)
            return loss, [p - LR * g for p, g in zip(ps, grads)]
        state = [[t[k] for k in params(inp)]]

        def run():
            loss, state[0] = step(state[0], t["x"], t["y"])
            return [loss]
        return run
    f = jax.jit(jax.value_and_grad(lambda x: _chain(x, jnp.tanh, jnp.exp)))
    return lambda: (lambda lg: [lg[0], lg[1]])(f(t["x"]))
