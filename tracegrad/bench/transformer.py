"""W12, a small GPT-style decoder's training step: token and position embeddings, 2 pre-LayerNorm blocks
(causal self-attention with 4 heads, an MLP with the exact erf GELU), a final LayerNorm, the head tied to
the token embedding, cross-entropy, Adam. Batch 8 of 64 tokens, vocabulary 512, width 128.

Each call is one step; it returns the loss and every parameter's gradient of that step (the Adam update
is applied too, so later calls see the moved parameters). The NumPy column writes the backward by hand;
tracegrad and torch run the same forward (`forward`, duck-typed over the two) and their autograd."""
import math

import numpy as np

V, D, H, T, B, L = 512, 128, 4, 64, 8, 2
ADAM_LR, BETAS, EPS = 1e-3, (0.9, 0.999), 1e-8
LN_EPS = 1e-5
NAMES = ["wte", "wpe"] + [f"{i}.{n}" for i in range(L) for n in
                          ("ln1.w", "ln1.b", "attn.w", "attn.b", "proj.w", "proj.b",
                           "ln2.w", "ln2.b", "fc.w", "fc.b", "fc2.w", "fc2.b")] + ["lnf.w", "lnf.b"]


def inputs(seed=9):
    r = np.random.default_rng(seed)
    inp = {"idx": r.integers(0, V, (B, T)), "tgt": r.integers(0, V, (B, T))}
    shapes = {"wte": (V, D), "wpe": (T, D), "attn.w": (D, 3 * D), "attn.b": (3 * D,), "proj.w": (D, D),
              "proj.b": (D,), "fc.w": (D, 4 * D), "fc.b": (4 * D,), "fc2.w": (4 * D, D), "fc2.b": (D,)}
    for name in NAMES:
        short = name.split(".", 1)[-1] if name[0].isdigit() else name
        if short.startswith("ln"):
            inp[name] = (1.0 if short.endswith("w") else 0.0) + 0.02 * r.standard_normal(D)
        else:
            inp[name] = 0.02 * r.standard_normal(shapes[short])
    return {k: v.astype(np.float32) if v.dtype.kind == "f" else v for k, v in inp.items()}


def forward(p, idx, tgt, F, causal):
    """The loss, for tracegrad or torch tensors `p` (F: the framework's nn.functional; causal: (T, T)
    additive mask, 0 on and below the diagonal, -inf above). The batch and sequence length are idx's
    (B, T), at most the T rows of wpe and of the mask (the sequence-length workload, ragged.py)."""
    B, T = idx.shape
    x = p["wte"][idx] + p["wpe"][:T]
    for i in range(L):
        w = {n: p[f"{i}.{n}"] for n in ("ln1.w", "ln1.b", "attn.w", "attn.b", "proj.w", "proj.b", "ln2.w", "ln2.b",
                                        "fc.w", "fc.b", "fc2.w", "fc2.b")}
        h = F.layer_norm(x, (D,), w["ln1.w"], w["ln1.b"], LN_EPS)
        qkv = (h @ w["attn.w"] + w["attn.b"]).reshape(B, T, 3, H, D // H).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        att = F.softmax(q @ k.transpose(-1, -2) * (1.0 / math.sqrt(D // H)) + causal[:T, :T], dim=-1)
        y = (att @ v).permute(0, 2, 1, 3).reshape(B, T, D)
        x = x + y @ w["proj.w"] + w["proj.b"]
        h = F.layer_norm(x, (D,), w["ln2.w"], w["ln2.b"], LN_EPS)
        x = x + F.gelu(h @ w["fc.w"] + w["fc.b"]) @ w["fc2.w"] + w["fc2.b"]
    h = F.layer_norm(x, (D,), p["lnf.w"], p["lnf.b"], LN_EPS)
    return F.cross_entropy((h @ p["wte"].T).reshape(B * T, V), tgt.reshape(B * T))


def causal_mask():
    return np.triu(np.full((T, T), -np.inf, np.float32), 1)


# ------------------------------------------------------------------ NumPy, backward by hand
def _erf(x):
    """erf to ~1e-7 (Abramowitz and Stegun 7.1.26): NumPy has none."""
    t = 1.0 / (1.0 + 0.3275911 * np.abs(x))
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    return np.sign(x) * (1.0 - poly * np.exp(-x * x))


def _ln(x, w, b):
    mu = x.mean(-1, keepdims=True)
    xc = x - mu
    rstd = 1.0 / np.sqrt((xc * xc).mean(-1, keepdims=True) + LN_EPS)
    xhat = xc * rstd
    return xhat * w + b, (xhat, rstd, w)


def _ln_back(dy, cache):
    xhat, rstd, w = cache
    dw = (dy * xhat).reshape(-1, D).sum(0)
    db = dy.reshape(-1, D).sum(0)
    dxhat = dy * w
    dx = rstd * (dxhat - dxhat.mean(-1, keepdims=True) - xhat * (dxhat * xhat).mean(-1, keepdims=True))
    return dx, dw, db


def numpy_step(inp):
    p = {k: inp[k].copy() for k in NAMES}
    m = {k: np.zeros_like(v) for k, v in p.items()}
    s = {k: np.zeros_like(v) for k, v in p.items()}
    idx, tgt, mask, n = inp["idx"], inp["tgt"].reshape(-1), causal_mask().astype(p["wte"].dtype), [0]
    scale = 1.0 / math.sqrt(D // H)

    def run():
        g = {}
        x, caches = p["wte"][idx] + p["wpe"], []
        for i in range(L):
            w = {k.split(".", 1)[1]: v for k, v in p.items() if k.startswith(f"{i}.")}
            h, c1 = _ln(x, w["ln1.w"], w["ln1.b"])
            qkv = (h @ w["attn.w"] + w["attn.b"]).reshape(B, T, 3, H, D // H).transpose(2, 0, 3, 1, 4)
            q, k, v = qkv
            sc = q @ k.swapaxes(-1, -2) * scale + mask
            e = np.exp(sc - sc.max(-1, keepdims=True))
            att = e / e.sum(-1, keepdims=True)
            y = (att @ v).transpose(0, 2, 1, 3).reshape(B, T, D)
            x1 = x + y @ w["proj.w"] + w["proj.b"]
            h2, c2 = _ln(x1, w["ln2.w"], w["ln2.b"])
            u = h2 @ w["fc.w"] + w["fc.b"]
            cdf = 0.5 * (1.0 + _erf(u / math.sqrt(2.0)))
            gl = u * cdf
            caches.append((w, h, c1, q, k, v, att, y, h2, c2, u, cdf, gl))
            x = x1 + gl @ w["fc2.w"] + w["fc2.b"]
        hf, cf = _ln(x, p["lnf.w"], p["lnf.b"])
        logits = (hf @ p["wte"].T).reshape(B * T, V)
        z = logits - logits.max(1, keepdims=True)
        ez = np.exp(z)
        se = ez.sum(1, keepdims=True)
        loss = -(z[np.arange(B * T), tgt] - np.log(se[:, 0])).mean()
        dlog = ez / se
        dlog[np.arange(B * T), tgt] -= 1.0
        dlog = (dlog / (B * T)).reshape(B, T, V)
        g["wte"] = dlog.reshape(-1, V).T @ hf.reshape(-1, D)
        dx, g["lnf.w"], g["lnf.b"] = _ln_back(dlog @ p["wte"], cf)
        for i in reversed(range(L)):
            w, h, c1, q, k, v, att, y, h2, c2, u, cdf, gl = caches[i]
            g[f"{i}.fc2.w"], g[f"{i}.fc2.b"] = gl.reshape(-1, 4 * D).T @ dx.reshape(-1, D), dx.reshape(-1, D).sum(0)
            du = (dx @ w["fc2.w"].T) * (cdf + u * np.exp(-0.5 * u * u) / math.sqrt(2 * math.pi))
            g[f"{i}.fc.w"], g[f"{i}.fc.b"] = h2.reshape(-1, D).T @ du.reshape(-1, 4 * D), du.reshape(-1, 4 * D).sum(0)
            dh2, g[f"{i}.ln2.w"], g[f"{i}.ln2.b"] = _ln_back(du @ w["fc.w"].T, c2)
            dx1 = dx + dh2
            g[f"{i}.proj.w"], g[f"{i}.proj.b"] = y.reshape(-1, D).T @ dx1.reshape(-1, D), dx1.reshape(-1, D).sum(0)
            dy = (dx1 @ w["proj.w"].T).reshape(B, T, H, D // H).transpose(0, 2, 1, 3)
            datt, dv = dy @ v.swapaxes(-1, -2), att.swapaxes(-1, -2) @ dy
            dsc = att * (datt - (datt * att).sum(-1, keepdims=True)) * scale
            dq, dk = dsc @ k, dsc.swapaxes(-1, -2) @ q
            dqkv = np.stack([dq, dk, dv]).transpose(1, 3, 0, 2, 4).reshape(B, T, 3 * D)
            g[f"{i}.attn.w"], g[f"{i}.attn.b"] = h.reshape(-1, D).T @ dqkv.reshape(-1, 3 * D), dqkv.reshape(-1, 3 * D).sum(0)
            dh, g[f"{i}.ln1.w"], g[f"{i}.ln1.b"] = _ln_back(dqkv @ w["attn.w"].T, c1)
            dx = dx1 + dh
        np.add.at(g["wte"], idx.reshape(-1), dx.reshape(-1, D))
        g["wpe"] = dx.sum(0)
        n[0] += 1                                      # Adam, PyTorch's formulation
        for key in NAMES:
            m[key] = BETAS[0] * m[key] + (1 - BETAS[0]) * g[key]
            s[key] = BETAS[1] * s[key] + (1 - BETAS[1]) * g[key] * g[key]
            p[key] -= ADAM_LR / (1 - BETAS[0] ** n[0]) * m[key] / (np.sqrt(s[key] / (1 - BETAS[1] ** n[0])) + EPS)
        return [loss] + [g[k] for k in NAMES]
    return run


# ------------------------------------------------------------------ tracegrad and torch
def tg_step(inp, compiled):
    import tracegrad as tg
    step, p = tg_steps(inp, tg.compile if compiled else None)
    idx, tgt = tg.from_numpy(inp["idx"]), tg.from_numpy(inp["tgt"])
    return lambda: [step(idx, tgt)] + [p[k].grad for k in NAMES]


def tg_steps(inp, compile=None):
    """(step(idx, tgt) -> loss, the parameters by name): one Adam step on batches that may change from
    call to call (ragged.py), wrapped in `compile` (e.g. tg.compile) where given."""
    import tracegrad as tg
    import tracegrad.nn.functional as F
    p = {k: tg.tensor(inp[k], requires_grad=True) for k in NAMES}
    mask = tg.from_numpy(causal_mask())
    opt = tg.optim.Adam(list(p.values()), lr=ADAM_LR, betas=BETAS, eps=EPS)

    def step(idx, tgt):
        opt.zero_grad()
        loss = forward(p, idx, tgt, F, mask)
        loss.backward()
        opt.step()
        return loss
    return (compile(step) if compile else step), p


def torch_step(inp, compiled):
    import torch
    step, p = torch_steps(inp, compiled)
    idx, tgt = torch.from_numpy(inp["idx"]), torch.from_numpy(inp["tgt"])
    return lambda: [step(idx, tgt)] + [p[k].grad for k in NAMES]


def torch_steps(inp, compiled):
    """tg_steps' torch twin: torch.compile (compiled) wraps the loss; backward and Adam run as torch runs them."""
    import torch
    import torch.nn.functional as F
    p = {k: torch.tensor(inp[k], requires_grad=True) for k in NAMES}
    mask = torch.from_numpy(causal_mask())
    opt = torch.optim.Adam(list(p.values()), lr=ADAM_LR, betas=BETAS, eps=EPS)
    loss_fn = torch.compile(forward) if compiled else forward

    def step(idx, tgt):
        opt.zero_grad()
        loss = loss_fn(p, idx, tgt, F, mask)
        loss.backward()
        opt.step()
        return loss
    return step, p
