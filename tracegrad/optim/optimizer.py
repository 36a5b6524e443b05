"""The Optimizer base: parameter groups, per-parameter state, zero_grad, step(closure),
state_dict/load_state_dict in PyTorch's layout, and what a compiled step reads of an optimizer.

Parameters live in `param_groups`, a list of dicts {"params": [...], "lr": ..., ...} as in
torch.optim: `add_param_group` adds one (missing hyperparameters take the optimizer's defaults),
and `opt.param_groups[i]["lr"] = ...` changes one group's learning rate. `opt.lr`, `opt.momentum`,
... read and set the first group's. `state[p]` is a dict of tensors per parameter, made when the
parameter is added (not at the first step), so a compiled step finds every buffer it updates."""
from ..autograd import enable_grad, no_grad
from .. import modes
from ..pytree import register_object
from ..tensor import Tensor, full_like


def first_group(name):
    def get(self):
        return self.param_groups[0][name]

    def set_(self, value):
        self.param_groups[0][name] = value
    return property(get, set_, doc=f"param_groups[0][{name!r}]")


def nonzero(v):
    """Whether a hyperparameter is on: a nonzero number, or a tensor (a number a compiled step reads per call)."""
    return isinstance(v, Tensor) or v != 0


def add_scaled(t, x, a):
    """t += a * x in place (eagerly without a temporary for a number a)."""
    return t.add_(x * a) if isinstance(a, Tensor) else t.add_(x, alpha=a)


class Optimizer:
    # group entries a compiled step reads at each call instead of retracing when they change (a schedule's)
    dynamic_keys = ("lr",)

    def __init__(self, params, defaults, flags=None):
        self.defaults, self.state, self.param_groups = dict(defaults, **_implementation_flags(flags or {})), {}, []
        params = [params] if isinstance(params, Tensor) else list(params)
        if not params:
            raise ValueError("optimizer got an empty parameter list")
        for group in (params if isinstance(params[0], dict) else [{"params": params}]):
            self.add_param_group(group)

    lr = first_group("lr")

    def __repr__(self):
        groups = "".join(f"\nParameter Group {i}\n" + "".join(f"    {k}: {g[k]}\n" for k in sorted(g) if k != "params")
                         for i, g in enumerate(self.param_groups))
        return f"{type(self).__name__} ({groups})"

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
            self.state.setdefault(p, {})
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
        return self.state.setdefault(p, {})

    def buffer(self, p, key, fill=0.0):
        """state[p][key], made filled with `fill` like p if missing (a hyperparameter turned on after
        the group was added, OneCycleLR's momentum): a real tensor even while a compiled step is traced,
        which then reads it as it reads the others (its next call retraces once: the state grew)."""
        st = self.state_for(p)
        if key not in st:
            with modes.interpreting(modes.eager):
                st[key] = full_like(p.detach(), fill)
        return st[key]

    @staticmethod
    def grads(group):
        """(parameter, gradient with maximize's sign and the group's weight decay (L2) applied) for each
        parameter that has a grad."""
        wd, maximize = group.get("weight_decay", 0), group.get("maximize", False)
        for p in group["params"]:
            g = p.grad
            if g is not None:
                g = -g if maximize else g
                yield p, (g + wd * p if wd else g)

    def step(self, closure=None):
        """One update of every parameter that has a .grad; `closure`, if given, recomputes and returns
        the loss first (with grad enabled), and step returns it."""
        loss = None
        if closure is not None:
            with enable_grad():
                loss = closure()
        with no_grad():
            for group in self.param_groups:
                self._update(group)
        return loss

    def _update(self, group):
        raise NotImplementedError(f"{type(self).__name__} must define _update(group)")

    # ------------------------------------------------------------------ saving and loading
    def state_dict(self):
        """{"state": {index: {name: tensor}}, "param_groups": [{hyperparameters, "params": [index, ...]}]},
        parameters numbered in group order, as torch.optim; the tensors are the optimizer's own."""
        index, groups = {}, []
        for g in self.param_groups:
            packed = {k: v for k, v in g.items() if k != "params"}
            packed["params"] = [index.setdefault(id(p), len(index)) for p in g["params"]]
            groups.append(packed)
        state = {index[id(p)]: dict(st) for p, st in self.state.items() if st and id(p) in index}
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict):
        """Restore hyperparameters and state saved by state_dict() (this optimizer's or torch.optim's
        of the same kind). Tensors are copied into the optimizer's own buffers where their shapes
        agree, so a compiled step that holds them does not retrace."""
        groups = state_dict["param_groups"]
        if len(groups) != len(self.param_groups):
            raise ValueError("loaded state dict has a different number of parameter groups")
        if any(len(g["params"]) != len(s["params"]) for g, s in zip(self.param_groups, groups)):
            raise ValueError("loaded state dict contains a parameter group that doesn't match the size of "
                             "optimizer's group")
        by_index = {i: p for g, s in zip(self.param_groups, groups) for i, p in zip(s["params"], g["params"])}
        for i, saved in state_dict["state"].items():
            p = by_index.get(int(i))
            if p is not None:
                self._load_state(p, saved)
        for g, s in zip(self.param_groups, groups):
            g.update((k, v) for k, v in s.items() if k != "params")

    def _load_state(self, p, saved):
        st = self.state_for(p)
        with no_grad():
            for k, v in saved.items():
                own = st.get(k)
                if isinstance(v, Tensor):
                    like = own if isinstance(own, Tensor) else p
                    v = v.to(device=like.device, dtype=like.dtype) if v.dtype.is_floating_point else v.to(like.device)
                    if isinstance(own, Tensor) and own.shape == v.shape and own.dtype == v.dtype:
                        own.copy_(v)
                    else:
                        st[k] = v.clone()
                elif v is None and isinstance(own, Tensor):
                    own.zero_()              # torch's "not made yet" buffer: ours starts at zero
                else:
                    st[k] = v


def _implementation_flags(flags):
    """torch.optim's implementation choices, accepted and kept in the groups as PyTorch does: foreach,
    fused and capturable change nothing here (a compiled step fuses the update anyway);
    differentiable=True (autograd through the update) is not supported."""
    unknown = set(flags) - {"foreach", "fused", "capturable", "differentiable"}
    if unknown:
        raise TypeError(f"unexpected keyword arguments {sorted(unknown)}")
    if flags.get("differentiable"):
        raise NotImplementedError("differentiable=True (autograd through the optimizer step) is not supported: "
                                  "write the update with tensor operations inside the function you differentiate")
    return dict({"foreach": None, "differentiable": False, "fused": None}, **flags)


class _TupleItem:
    """A number inside a tuple of a group (betas[0]) as an attribute `value`, so a compiled step can
    read it per call (pytree's dynamic slots are attributes or dict items)."""

    def __init__(self, group, key, i):
        self.group, self.key, self.i = group, key, i

    @property
    def value(self):
        return self.group[self.key][self.i]

    @value.setter
    def value(self, v):
        t = list(self.group[self.key])
        t[self.i] = v
        self.group[self.key] = tuple(t)


def _dynamic(group, key):
    """[(label, holder, attribute or key)] for a dynamic group entry: "lr", "momentum" (when on:
    zero vs nonzero changes the update's form), "betas[0]"."""
    if key.endswith("]"):
        name, i = key[:-1].split("[")
        return [(key, _TupleItem(group, name, int(i)), "value")] if name in group else []
    if key != "lr" and not (key in group and nonzero(group[key])):
        return []
    return [(key, group, key)]


def _slots(opt):
    """(label, holder, key) of each group's dynamic numbers: read at each call of a compiled step."""
    out = []
    for i, g in enumerate(opt.param_groups):
        where = "" if i == 0 else f"group{i}."
        out += [(where + label, holder, key) for k in opt.dynamic_keys for label, holder, key in _dynamic(g, k)]
    return out


def _optimizer_state(opt):
    """What an optimizer holds, for tg.compile: its parameters, their state tensors, each group's
    size and hyperparameters (the dynamic ones, lr above all, are read at each call instead)."""
    for i, p in enumerate(opt.params):
        yield f"param{i}", p
        for key, val in opt.state.get(p, {}).items():
            yield f"param{i}.{key}", val
    for i, group in enumerate(opt.param_groups):
        where = "" if i == 0 else f"group{i}."
        yield f"{where}size", len(group["params"])
        dynamic = {label for k in opt.dynamic_keys for label, _, _ in _dynamic(group, k)}
        for k, v in group.items():
            if k == "params" or k == "lr":
                continue
            if k in dynamic:        # on (nonzero) and read per call; turning it off retraces
                v = "nonzero, read at each call"
            elif isinstance(v, tuple) and f"{k}[0]" in dynamic:
                v = v[1:]
            yield f"{where}{k}", v
    for k, v in vars(opt).items():
        if k not in ("param_groups", "state", "defaults"):
            yield k, v


register_object(Optimizer, _optimizer_state, dynamic=_slots,
                watch=lambda o: [o.__dict__, o.param_groups, *o.param_groups, *(g["params"] for g in o.param_groups),
                                 o.state, *o.state.values()])
