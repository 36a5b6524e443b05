"""Adam and AdamW (decoupled weight decay), with amsgrad and maximize, as torch.optim's."""
from .. import dtypes as D
from ..tensor import zeros, zeros_like
from .optimizer import Optimizer, add_scaled, first_group


class Adam(Optimizer):
    """Adam; the step count is a tensor too (float64, so that 1 - beta2 ** step keeps its digits, as
    PyTorch's Python floats do), so bias corrections stay right under tg.compile. beta1 is read at each
    call of a compiled step, like lr (OneCycleLR cycles it)."""
    dynamic_keys = ("lr", "betas[0]")
    decoupled = False

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, amsgrad=False, *,
                 maximize=False, **flags):
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                                      amsgrad=amsgrad, maximize=maximize), flags)

    betas, eps, weight_decay = first_group("betas"), first_group("eps"), first_group("weight_decay")

    def _check(self, g):
        g["betas"] = tuple(g["betas"])
        if g["lr"] < 0 or g["eps"] < 0 or not all(0.0 <= b < 1.0 for b in g["betas"]) or g["weight_decay"] < 0:
            raise ValueError(f"{type(self).__name__}: invalid lr={g['lr']}, betas={g['betas']}, eps={g['eps']} or "
                             f"weight_decay={g['weight_decay']}")

    def _init_state(self, p, group):
        st = self.state[p]
        st["step"] = zeros((), dtype=D.float64, device=p.device)
        st["exp_avg"], st["exp_avg_sq"] = zeros_like(p).detach(), zeros_like(p).detach()
        if group["amsgrad"]:
            st["max_exp_avg_sq"] = zeros_like(p).detach()

    def _update(self, group):
        (b1, b2), lr, eps, wd = group["betas"], group["lr"], group["eps"], group["weight_decay"]
        decay = dict(group, weight_decay=0) if self.decoupled else group
        for p, g in self.grads(decay):
            if self.decoupled and wd:
                p.mul_(1.0 - lr * wd)
            st = self.state_for(p)
            st["step"].add_(1.0)
            m, v, t = st["exp_avg"], st["exp_avg_sq"], st["step"]
            add_scaled(m.mul_(b1), g, 1.0 - b1)
            v.mul_(b2).add_(g * g, alpha=1.0 - b2)
            if group["amsgrad"]:
                top = self.buffer(p, "max_exp_avg_sq")
                v = top.copy_(top.maximum(v))
            step_size = lr / (1.0 - b1 ** t)
            denom = (v / (1.0 - b2 ** t)).sqrt() + eps
            p.sub_(m / denom * step_size)


class AdamW(Adam):
    """Adam with decoupled weight decay: p *= 1 - lr * weight_decay before the Adam update."""
    decoupled = True

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, amsgrad=False, *,
                 maximize=False, **flags):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, maximize=maximize, **flags)
