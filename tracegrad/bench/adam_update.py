"""W13, a multi-tensor Adam update: one optimizer step over 60 parameter tensors of a transformer's shapes
(2.4M elements in all) whose gradients are given; each call is one `step()` and returns the parameters.
The NumPy column loops over the tensors; torch's eager Adam uses its multi-tensor (foreach) path, its
built-in column the fused Adam kernel (`fused=True`)."""
import numpy as np

LR, BETAS, EPS, WEIGHT_DECAY = 1e-3, (0.9, 0.999), 1e-8, 0.0
SHAPES = [(512, 128), (64, 128)] + [s for _ in range(4) for s in
                                    ((128,), (128,), (128, 384), (384,), (128, 128), (128,), (128,), (128,),
                                     (128, 512), (512,), (512, 128), (128,), (256, 256), (256,))] + [(128,), (128,)]


def inputs(seed=10):
    r = np.random.default_rng(seed)
    inp = {}
    for i, shape in enumerate(SHAPES):
        inp[f"p{i}"] = (0.02 * r.standard_normal(shape)).astype(np.float32)
        inp[f"g{i}"] = (0.01 * r.standard_normal(shape)).astype(np.float32)
    return inp


def numpy_update(inp):
    p = [inp[f"p{i}"].copy() for i in range(len(SHAPES))]
    g = [inp[f"g{i}"] for i in range(len(SHAPES))]
    m, v, n = [np.zeros_like(a) for a in p], [np.zeros_like(a) for a in p], [0]

    def run():
        n[0] += 1
        c1, c2 = 1 - BETAS[0] ** n[0], 1 - BETAS[1] ** n[0]
        for a, ga, ma, va in zip(p, g, m, v):
            ma *= BETAS[0]
            ma += (1 - BETAS[0]) * ga
            va *= BETAS[1]
            va += (1 - BETAS[1]) * ga * ga
            a -= LR / c1 * ma / (np.sqrt(va / c2) + EPS)
        return list(p)
    return run


def tg_update(inp, compiled):
    import tracegrad as tg
    p = [tg.tensor(inp[f"p{i}"], requires_grad=True) for i in range(len(SHAPES))]
    for i, a in enumerate(p):
        a.grad = tg.tensor(inp[f"g{i}"])
    opt = tg.optim.Adam(p, lr=LR, betas=BETAS, eps=EPS)
    step = tg.compile(opt.step) if compiled else opt.step

    def run():
        step()
        return list(p)
    return run


def torch_update(inp, compiled, fused=False):
    import torch
    p = [torch.tensor(inp[f"p{i}"], requires_grad=True) for i in range(len(SHAPES))]
    for i, a in enumerate(p):
        a.grad = torch.tensor(inp[f"g{i}"])
    opt = torch.optim.Adam(p, lr=LR, betas=BETAS, eps=EPS, **({"fused": True} if fused else {"foreach": True}))
    step = torch.compile(opt.step) if compiled else opt.step

    def run():
        step()
        return list(p)
    return run
