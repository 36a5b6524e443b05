"""tg.optim: SGD (momentum, weight decay) and Adam, updating parameters in place."""
from ..autograd import no_grad
from ..pytree import register_object
from ..tensor import Tensor, zeros, zeros_like


class Optimizer:
    def __init__(self, params, defaults):
        self.params = list(params)
        if not self.params:
            raise ValueError("optimizer got an empty parameter list")
        for p in self.params:
            if not isinstance(p, Tensor) or not p.requires_grad:
                raise TypeError("optimizer parameters must be tensors that require grad")
        self.defaults = defaults
        self.state = {}

    def zero_grad(self, set_to_none=True):
        for p in self.params:
            if set_to_none or p.grad is None:
                p.grad = None
            else:
                with no_grad():
                    p.grad.zero_()

    def state_for(self, p):
        return self.state.setdefault(id(p), {})


class SGD(Optimizer):
    """SGD with momentum and weight decay. The momentum buffer starts at zero, which gives PyTorch's
    first step (buffer = gradient) and keeps all state in tensors, so a compiled step can update it."""

    def __init__(self, params, lr, momentum=0.0, weight_decay=0.0):
        if lr < 0 or momentum < 0 or weight_decay < 0:
            raise ValueError(f"SGD: lr, momentum and weight_decay must be >= 0, got {lr}, {momentum}, {weight_decay}")
        super().__init__(params, dict(lr=lr, momentum=momentum, weight_decay=weight_decay))
        self.lr, self.momentum, self.weight_decay = lr, momentum, weight_decay
        if momentum:
            for p in self.params:
                self.state_for(p)["momentum_buffer"] = zeros_like(p).detach()

    @no_grad()
    def step(self):
        for p in self.params:
            if p.grad is None:
                continue
            g = p.grad
            if self.weight_decay:
                g = g + self.weight_decay * p
            if self.momentum:
                buf = self.state_for(p)["momentum_buffer"]
                buf.mul_(self.momentum).add_(g)
                g = buf
            p.sub_(g * self.lr)


class Adam(Optimizer):
    """Adam; the step count is a tensor too, so bias corrections stay right under tg.compile."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0):
        if lr < 0 or eps < 0 or not all(0.0 <= b < 1.0 for b in betas):
            raise ValueError(f"Adam: invalid lr={lr}, betas={betas} or eps={eps}")
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))
        self.lr, self.betas, self.eps, self.weight_decay = lr, tuple(betas), eps, weight_decay
        for p in self.params:
            st = self.state_for(p)
            st["step"] = zeros((), dtype=p.dtype, device=p.device)
            st["exp_avg"], st["exp_avg_sq"] = zeros_like(p).detach(), zeros_like(p).detach()

    @no_grad()
    def step(self):
        b1, b2 = self.betas
        for p in self.params:
            if p.grad is None:
                continue
            g = p.grad
            if self.weight_decay:
                g = g + self.weight_decay * p
            st = self.state_for(p)
            st["step"].add_(1.0)
            m, v, t = st["exp_avg"], st["exp_avg_sq"], st["step"]
            m.mul_(b1).add_(g * (1.0 - b1))
            v.mul_(b2).add_(g * g * (1.0 - b2))
            step_size = self.lr / (1.0 - b1 ** t)
            denom = (v / (1.0 - b2 ** t)).sqrt() + self.eps
            p.sub_(m / denom * step_size)


def _optimizer_state(opt):
    """What an optimizer holds, for tg.compile: its parameters, their state tensors and the
    hyperparameters (lr is registered as dynamic: a compiled step reads it at each call)."""
    for i, p in enumerate(opt.params):
        yield f"param{i}", p
        for key, val in opt.state.get(id(p), {}).items():
            yield f"param{i}.{key}", val
    for k, v in vars(opt).items():
        if k not in ("params", "state", "defaults", "lr"):
            yield k, v


register_object(Optimizer, _optimizer_state, dynamic=("lr",),
                watch=lambda o: [o.__dict__, o.params, o.state, *o.state.values()])
