"""RMSprop and Adagrad: per-element step sizes from running sums of squared gradients, as torch.optim's."""
from .. import dtypes as D
from ..tensor import full_like, zeros
from .optimizer import Optimizer, add_scaled, first_group, nonzero


class RMSprop(Optimizer):
    """square_avg = alpha * square_avg + (1 - alpha) * g^2; p -= lr * g / (sqrt(square_avg) + eps),
    centered (minus the squared mean gradient) and with momentum as PyTorch."""
    dynamic_keys = ("lr", "momentum")

    def __init__(self, params, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0.0, momentum=0.0, centered=False, *,
                 maximize=False, **flags):
        super().__init__(params, dict(lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay, momentum=momentum,
                                      centered=centered, maximize=maximize), flags)

    alpha, eps, momentum = first_group("alpha"), first_group("eps"), first_group("momentum")

    def _check(self, g):
        if min(g["lr"], g["eps"], g["weight_decay"], g["momentum"], g["alpha"]) < 0:
            raise ValueError(f"RMSprop: lr, alpha, eps, weight_decay and momentum must be >= 0, got {g['lr']}, "
                             f"{g['alpha']}, {g['eps']}, {g['weight_decay']}, {g['momentum']}")

    def _init_state(self, p, group):
        self.state[p]["step"] = zeros((), dtype=p.dtype, device=p.device)
        self.buffer(p, "square_avg")
        if group["momentum"]:
            self.buffer(p, "momentum_buffer")
        if group["centered"]:
            self.buffer(p, "grad_avg")

    def _update(self, group):
        lr, alpha, eps, momentum = group["lr"], group["alpha"], group["eps"], group["momentum"]
        for p, g in self.grads(group):
            self.state[p]["step"].add_(1.0)
            sq = self.buffer(p, "square_avg").mul_(alpha).add_(g * g, alpha=1.0 - alpha)
            if group["centered"]:
                mean = self.buffer(p, "grad_avg").mul_(alpha).add_(g, alpha=1.0 - alpha)
                avg = (sq - mean * mean).sqrt() + eps
            else:
                avg = sq.sqrt() + eps
            if nonzero(momentum):
                buf = self.buffer(p, "momentum_buffer").mul_(momentum).add_(g / avg)
                p.sub_(buf * lr)
            else:
                p.sub_(g / avg * lr)


class Adagrad(Optimizer):
    """sum += g^2; p -= lr / (1 + (step - 1) * lr_decay) * g / (sqrt(sum) + eps)."""

    def __init__(self, params, lr=1e-2, lr_decay=0.0, weight_decay=0.0, initial_accumulator_value=0.0, eps=1e-10, *,
                 maximize=False, **flags):
        super().__init__(params, dict(lr=lr, lr_decay=lr_decay, weight_decay=weight_decay, eps=eps,
                                      initial_accumulator_value=initial_accumulator_value, maximize=maximize), flags)

    def _check(self, g):
        if min(g["lr"], g["lr_decay"], g["weight_decay"], g["initial_accumulator_value"], g["eps"]) < 0:
            raise ValueError(f"Adagrad: lr, lr_decay, weight_decay, initial_accumulator_value and eps must be "
                             f">= 0, got {g['lr']}, {g['lr_decay']}, {g['weight_decay']}, "
                             f"{g['initial_accumulator_value']}, {g['eps']}")

    def _init_state(self, p, group):
        st = self.state[p]
        st["step"] = zeros((), dtype=D.float64, device=p.device)
        st["sum"] = full_like(p, group["initial_accumulator_value"]).detach()

    def _update(self, group):
        lr, lr_decay, eps = group["lr"], group["lr_decay"], group["eps"]
        for p, g in self.grads(group):
            st = self.state[p]
            t = st["step"].add_(1.0)
            clr = lr / ((t - 1.0) * lr_decay + 1.0) if lr_decay else lr
            s = st["sum"].add_(g * g)
            add_scaled(p, g / (s.sqrt() + eps), -clr)
