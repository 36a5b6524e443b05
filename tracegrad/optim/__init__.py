"""tg.optim: SGD (momentum, weight decay) and Adam, updating parameters in place.

Parameters live in `param_groups`, a list of dicts {"params": [...], "lr": ..., ...} as in
torch.optim: `add_param_group` adds one (missing hyperparameters take the optimizer's defaults),
and `opt.param_groups[i]["lr"] = ...` changes one group's learning rate. `opt.lr`, `opt.momentum`,
... read and set the first group's."""
from ..autograd import no_grad
from ..pytree import register_object
from ..tensor import Tensor, zeros, zeros_like


def _first_group(name):
    def get(self):
        return self.param_groups[0][name]

    def set_(self, value):
        self.param_groups[0][name] = value
    return property(get, set_, doc=f"param_groups[0][{name!r}]")


class Optimizer:
    def __init__(self, params, defaults):
        self.defaults, self.state, self.param_groups = defaults, {}, []
        params = [params] if isinstance(params, Tensor) else list(params)
        if not params:
            raise ValueError("optimizer got an empty parameter list")
        for group in (params if isinstance(params[0], dict) else [{"params": params}]):
            self.add_param_group(group)

    lr = _first_group("lr")

    @property
    def params(self):
        """Every parameter, group after group."""
        return [p for g in self.param_groups for p in g["params"]]

    def add_param_group(self, param_group):
        """Add a group: a dict with "params" (a tensor or an iterable of them) and any
        hyperparameters; the others take the defaults the optimizer was made with."""
        if not isinstance(param_group, dict) or "params" not in param_group:
            raise TypeError(f"add_param_group expects a dict with a 'params' entry, got "
                            f"{type(param_group).__name__}")
        params = param_group["params"]
        params = [params] if isinstance(params, Tensor) else list(params)
        for p in params:
            if not isinstance(p, Tensor) or not p.requires_grad:
                raise TypeError("optimizer parameters must be tensors that require grad")
        held = {id(p) for p in self.params}
        if len({id(p) for p in params}) != len(params) or any(id(p) in held for p in params):
            raise ValueError("some parameters appear in more than one parameter group")
        group = dict(self.defaults, **param_group)
        group["params"] = params
        self._check(group)
        self.param_groups.append(group)
        for p in params:
            self._init_state(p, group)

    def _check(self, group):
        pass

    def _init_state(self, p, group):
        pass

    def zero_grad(self, set_to_none=True):
        for p in self.params:
            if set_to_none or p.grad is None:
                p.grad = None
            else:
                with no_grad():
                    p.grad.zero_()

    def state_for(self, p):
        return self.state.setdefault(id(p), {})

    @staticmethod
    def _grads(group):
        """(parameter, gradient with the group's weight decay added) for each parameter that has a grad."""
        wd = group["weight_decay"]
        for p in group["params"]:
            if p.grad is not None:
                yield p, (p.grad + wd * p if wd else p.grad)


class SGD(Optimizer):
    """SGD with momentum and weight decay. The momentum buffer starts at zero, which gives PyTorch's
    first step (buffer = gradient) and keeps all state in tensors, so a compiled step can update it."""

    def __init__(self, params, lr, momentum=0.0, weight_decay=0.0):
        super().__init__(params, dict(lr=lr, momentum=momentum, weight_decay=weight_decay))

    momentum, weight_decay = _first_group("momentum"), _first_group("weight_decay")

    def _check(self, g):
        if g["lr"] < 0 or g["momentum"] < 0 or g["weight_decay"] < 0:
            raise ValueError(f"SGD: lr, momentum and weight_decay must be >= 0, got {g['lr']}, {g['momentum']}, "
                             f"{g['weight_decay']}")

    def _init_state(self, p, group):
        if group["momentum"]:
            self.state_for(p)["momentum_buffer"] = zeros_like(p).detach()

    @no_grad()
    def step(self):
        for group in self.param_groups:
            lr, momentum = group["lr"], group["momentum"]
            for p, g in self._grads(group):
                if momentum:
                    st = self.state_for(p)
                    if "momentum_buffer" not in st:      # momentum turned on after the group was added
                        st["momentum_buffer"] = zeros_like(p).detach()
                    buf = st["momentum_buffer"]
                    buf.mul_(momentum).add_(g)
                    g = buf
                p.sub_(g * lr)


class Adam(Optimizer):
    """Adam; the step count is a tensor too, so bias corrections stay right under tg.compile."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0):
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay))

    betas, eps, weight_decay = _first_group("betas"), _first_group("eps"), _first_group("weight_decay")

    def _check(self, g):
        g["betas"] = tuple(g["betas"])
        if g["lr"] < 0 or g["eps"] < 0 or not all(0.0 <= b < 1.0 for b in g["betas"]):
            raise ValueError(f"Adam: invalid lr={g['lr']}, betas={g['betas']} or eps={g['eps']}")

    def _init_state(self, p, group):
        st = self.state_for(p)
        st["step"] = zeros((), dtype=p.dtype, device=p.device)
        st["exp_avg"], st["exp_avg_sq"] = zeros_like(p).detach(), zeros_like(p).detach()

    @no_grad()
    def step(self):
        for group in self.param_groups:
            (b1, b2), lr, eps = group["betas"], group["lr"], group["eps"]
            for p, g in self._grads(group):
                st = self.state_for(p)
                st["step"].add_(1.0)
                m, v, t = st["exp_avg"], st["exp_avg_sq"], st["step"]
                m.mul_(b1).add_(g, alpha=1.0 - b1)          # eagerly: no temporary for g * (1 - b1)
                v.mul_(b2).add_(g * g, alpha=1.0 - b2)
                step_size = lr / (1.0 - b1 ** t)
                denom = (v / (1.0 - b2 ** t)).sqrt() + eps
                p.sub_(m / denom * step_size)


def _optimizer_state(opt):
    """What an optimizer holds, for tg.compile: its parameters, their state tensors, each group's
    size and hyperparameters (each group's lr is dynamic: a compiled step reads it at each call)."""
    for i, p in enumerate(opt.params):
        yield f"param{i}", p
        for key, val in opt.state.get(id(p), {}).items():
            yield f"param{i}.{key}", val
    for i, group in enumerate(opt.param_groups):
        where = "" if i == 0 else f"group{i}."
        yield f"{where}size", len(group["params"])
        for k, v in group.items():
            if k not in ("params", "lr"):
                yield f"{where}{k}", v
    for k, v in vars(opt).items():
        if k not in ("param_groups", "state", "defaults"):
            yield k, v


def _learning_rates(opt):
    """(label, group, "lr") of each group's learning rate: numbers read at each call."""
    return [("lr" if i == 0 else f"group{i}.lr", g, "lr") for i, g in enumerate(opt.param_groups)]


register_object(Optimizer, _optimizer_state, dynamic=_learning_rates,
                watch=lambda o: [o.__dict__, o.param_groups, *o.param_groups, *(g["params"] for g in o.param_groups),
                                 o.state, *o.state.values()])
