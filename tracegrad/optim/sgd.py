"""SGD with momentum, dampening, Nesterov momentum, weight decay and maximize, as torch.optim.SGD."""
from ..tensor import zeros
from .optimizer import Optimizer, add_scaled, first_group, nonzero


class SGD(Optimizer):
    """The momentum buffer starts at zero, which gives PyTorch's first step (buffer = gradient) and
    keeps all state in tensors, so a compiled step can update it; with dampening, a step count in
    the state skips dampening on the first step as PyTorch does."""
    dynamic_keys = ("lr", "momentum")

    def __init__(self, params, lr=1e-3, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False, *,
                 maximize=False, **flags):
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay,
                                      nesterov=nesterov, maximize=maximize), flags)

    momentum, weight_decay = first_group("momentum"), first_group("weight_decay")

    def _check(self, g):
        if g["lr"] < 0 or g["momentum"] < 0 or g["weight_decay"] < 0:
            raise ValueError(f"SGD: lr, momentum and weight_decay must be >= 0, got {g['lr']}, {g['momentum']}, "
                             f"{g['weight_decay']}")
        if g["nesterov"] and (g["momentum"] <= 0 or g["dampening"] != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")

    def _init_state(self, p, group):
        if group["momentum"]:
            self.buffer(p, "momentum_buffer")
            if group["dampening"]:
                self.state[p]["step"] = zeros((), dtype=p.dtype, device=p.device)

    def _load_state(self, p, saved):
        super()._load_state(p, saved)
        st = self.state[p]
        if "step" in st and "step" not in saved and saved.get("momentum_buffer") is not None:
            st["step"].fill_(1)      # torch's state: a buffer made means the first step was taken

    def _update(self, group):
        lr, momentum, dampening, nesterov = group["lr"], group["momentum"], group["dampening"], group["nesterov"]
        for p, g in self.grads(group):
            if nonzero(momentum):
                buf = self.buffer(p, "momentum_buffer")
                buf.mul_(momentum)
                if dampening:
                    st = self.state[p]
                    if "step" not in st:
                        st["step"] = zeros((), dtype=p.dtype, device=p.device)
                    add_scaled(buf, g, 1.0 - dampening * st["step"].clamp(max=1.0))
                    st["step"].add_(1.0)
                else:
                    buf.add_(g)
                g = g + momentum * buf if nesterov else buf
            p.sub_(g * lr)
