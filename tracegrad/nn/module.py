"""Module and Parameter: what a module holds (parameters, buffers, submodules), how it is walked,
saved, loaded, moved and hooked, as torch.nn.Module."""
import weakref
from collections import OrderedDict, namedtuple

from .. import dtypes as D
from ..autograd import no_grad
from ..hooks import Hooks
from ..pytree import register_object
from ..tensor import Tensor, tensor

_FROZEN = {}      # id -> weakref of tensors made by Parameter(..., requires_grad=False): parameters all the same


def Parameter(data=None, requires_grad=True):
    """A leaf tensor registered as a parameter when assigned to a module (tracegrad has no separate
    Parameter class: any leaf tensor that requires grad is one, and so is Parameter(t, requires_grad=False))."""
    if data is None:
        from ..tensor import empty
        data = empty(0)
    if not isinstance(data, Tensor):
        raise TypeError(f"Parameter expects a tensor, got {type(data).__name__}")
    p = data.detach().requires_grad_(requires_grad)
    if not requires_grad:
        key = id(p)
        _FROZEN[key] = weakref.ref(p, lambda _: _FROZEN.pop(key, None))
    return p


def _is_parameter(v):
    if not isinstance(v, Tensor):
        return False
    frozen = _FROZEN.get(id(v))
    return v.requires_grad and v.is_leaf or frozen is not None and frozen() is v


class _IncompatibleKeys(namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])):
    def __repr__(self):
        if not self.missing_keys and not self.unexpected_keys:
            return "<All keys matched successfully>"
        return super().__repr__()


class Module:
    """Base class: parameters (leaf tensors that require grad), buffers (register_buffer) and
    submodules set as attributes are registered, in assignment order."""

    def __init__(self):
        d = self.__dict__
        d["_params"], d["_buffers"], d["_modules"] = OrderedDict(), OrderedDict(), OrderedDict()
        d["_non_persistent_buffers"], d["training"] = set(), True
        d["_forward_hooks"], d["_forward_pre_hooks"] = Hooks(), Hooks()

    def __setattr__(self, name, value):
        if "_params" not in self.__dict__:
            raise RuntimeError(f"call super().__init__() in {type(self).__name__}.__init__ before assigning "
                               f"attributes")
        tensor_or_none = value is None or isinstance(value, Tensor)
        if isinstance(value, Module):
            where = self._modules
        elif name in self._buffers and tensor_or_none and not _is_parameter(value):
            where = self._buffers            # a buffer stays a buffer when a tensor is assigned to it
        elif _is_parameter(value) or name in self._params and tensor_or_none:
            if value is not None and not value.is_leaf:      # the result of an operation: PyTorch's error
                raise TypeError(f"cannot assign a tensor computed by an operation (grad_fn={value.grad_fn.name()}) "
                                f"as parameter '{name}' (nn.Parameter or None expected); wrap it: "
                                f"nn.Parameter(t), or delete the parameter first")
            where = self._params             # (a leaf that does not require grad there: a frozen parameter)
        else:
            where = None
        if where is None or name not in where:
            self._forget(name)
        if where is not None:
            where[name] = value              # a name already there keeps its place, as in PyTorch
        object.__setattr__(self, name, value)

    def __delattr__(self, name):
        self._forget(name)
        object.__delattr__(self, name)

    def _forget(self, name):
        self._params.pop(name, None)
        self._modules.pop(name, None)
        self._buffers.pop(name, None)
        self._non_persistent_buffers.discard(name)

    def _check_name(self, name, what):
        if not isinstance(name, str):
            raise TypeError(f"{what} name should be a string, got {type(name).__name__}")
        if "." in name or name == "":
            raise KeyError(f'{what} name can\'t contain "." and can\'t be empty, got {name!r}')
        if name in self.__dict__ and not (name in self._params or name in self._buffers or name in self._modules):
            raise KeyError(f"attribute '{name}' already exists")

    def register_buffer(self, name, tensor, persistent=True):
        """A tensor the module holds that is not a parameter (running statistics): in state_dict()
        unless persistent=False, moved and converted by .to(), never given to optimizers."""
        self._register(self._buffers, "buffer", name, tensor)
        if not persistent:
            self._non_persistent_buffers.add(name)

    def register_parameter(self, name, param):
        self._register(self._params, "parameter", name, param)

    def _register(self, registry, what, name, t):
        self._check_name(name, what)
        if t is not None and not isinstance(t, Tensor):
            raise TypeError(f"cannot assign '{type(t).__name__}' object to {what} '{name}' (a tensor or None required)")
        self._forget(name)
        registry[name] = t
        object.__setattr__(self, name, t)

    def add_module(self, name, module):
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"{type(module).__name__} is not a Module subclass")
        self._check_name(name, "module")
        self._forget(name)
        self._modules[name] = module
        object.__setattr__(self, name, module)

    register_module = add_module

    def get_submodule(self, target):
        m = self
        for part in target.split(".") if target else []:
            if part not in m._modules:
                raise AttributeError(f"{type(m).__name__} has no attribute `{part}`")
            m = m._modules[part]
        return m

    # ------------------------------------------------------------------ calling, hooks
    def __call__(self, *args, **kwargs):
        if not (self._forward_pre_hooks or self._forward_hooks):
            return self.forward(*args, **kwargs)
        for hook, with_kwargs in list(self._forward_pre_hooks.values()):
            if with_kwargs:
                res = hook(self, args, kwargs)
                if res is not None:
                    args, kwargs = res
            else:
                res = hook(self, args)
                if res is not None:
                    args = res if isinstance(res, tuple) else (res,)
        out = self.forward(*args, **kwargs)
        for hook, with_kwargs in list(self._forward_hooks.values()):
            res = hook(self, args, kwargs, out) if with_kwargs else hook(self, args, out)
            if res is not None:
                out = res
        return out

    def forward(self, *args):
        raise NotImplementedError(f"{type(self).__name__} must define forward()")

    def register_forward_pre_hook(self, hook, *, prepend=False, with_kwargs=False):
        """hook(module, args) runs before forward and may return new args (a tuple, or one value);
        with_kwargs=True: hook(module, args, kwargs) returning None or (args, kwargs)."""
        return self._forward_pre_hooks.add((hook, with_kwargs), prepend)

    def register_forward_hook(self, hook, *, prepend=False, with_kwargs=False):
        """hook(module, args, output) runs after forward and may return a new output;
        with_kwargs=True: hook(module, args, kwargs, output)."""
        return self._forward_hooks.add((hook, with_kwargs), prepend)

    # ------------------------------------------------------------------ walking
    def named_modules(self, memo=None, prefix="", remove_duplicate=True):
        if memo is None:
            memo = set()
        if remove_duplicate:
            if id(self) in memo:
                return
            memo.add(id(self))
        yield prefix, self
        for name, m in self._modules.items():
            if m is not None:
                yield from m.named_modules(memo, prefix + ("." if prefix else "") + name, remove_duplicate)

    def modules(self):
        for _, m in self.named_modules():
            yield m

    def named_children(self):
        seen = set()
        for name, m in self._modules.items():
            if m is not None and id(m) not in seen:
                seen.add(id(m))
                yield name, m

    def children(self):
        for _, m in self.named_children():
            yield m

    def _named_members(self, field, prefix, recurse, remove_duplicate):
        seen = set()
        mods = self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate) if recurse else [(prefix, self)]
        for mod_prefix, mod in mods:
            for name, v in getattr(mod, field).items():
                if v is None or remove_duplicate and id(v) in seen:
                    continue
                seen.add(id(v))
                yield mod_prefix + ("." if mod_prefix else "") + name, v

    def named_parameters(self, prefix="", recurse=True, remove_duplicate=True):
        return self._named_members("_params", prefix, recurse, remove_duplicate)

    def parameters(self, recurse=True):
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_buffers(self, prefix="", recurse=True, remove_duplicate=True):
        return self._named_members("_buffers", prefix, recurse, remove_duplicate)

    def buffers(self, recurse=True):
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    def apply(self, fn):
        for m in self.children():
            m.apply(fn)
        fn(self)
        return self

    def zero_grad(self, set_to_none=True):
        for p in self.parameters():
            if set_to_none or p.grad is None:
                p.grad = None
            else:
                with no_grad():
                    p.grad.zero_()

    def requires_grad_(self, requires_grad=True):
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def train(self, mode=True):
        if not isinstance(mode, bool):
            raise ValueError("training mode is expected to be boolean")
        for m in self.modules():
            object.__setattr__(m, "training", mode)
        return self

    def eval(self):
        return self.train(False)

    # ------------------------------------------------------------------ saving and loading
    def state_dict(self, destination=None, prefix="", keep_vars=False):
        """Parameters and persistent buffers by dotted name, module by module (its parameters, then
        its buffers, then its children), as PyTorch: detached tensors sharing memory with the module's
        (copy them, e.g. with tg.save or {k: v.clone()}, to keep a snapshot)."""
        out = OrderedDict() if destination is None else destination
        for name, p in self._params.items():
            if p is not None:
                out[prefix + name] = p if keep_vars else p.detach()
        for name, b in self._buffers.items():
            if b is not None and name not in self._non_persistent_buffers:
                out[prefix + name] = b if keep_vars else b.detach()
        for name, m in self._modules.items():
            if m is not None:
                m.state_dict(destination=out, prefix=prefix + name + ".", keep_vars=keep_vars)
        return out

    def load_state_dict(self, state_dict, strict=True, assign=False):
        """Copy values into this module's parameters and persistent buffers; returns
        (missing_keys, unexpected_keys). strict=True raises on either; a shape mismatch always raises."""
        own = self.state_dict(keep_vars=True)
        missing = [k for k in own if k not in state_dict]
        unexpected = [k for k in state_dict if k not in own]
        errors = []
        if strict:
            if unexpected:
                errors.append("Unexpected key(s) in state_dict: " + ", ".join(f'"{k}"' for k in unexpected) + ". ")
            if missing:
                errors.insert(0, "Missing key(s) in state_dict: " + ", ".join(f'"{k}"' for k in missing) + ". ")
        pairs = []
        for k, target in own.items():
            if k not in state_dict:
                continue
            v = state_dict[k]
            v = v if isinstance(v, Tensor) else tensor(v)
            if v.shape != target.shape:
                errors.append(f"size mismatch for {k}: copying a param with shape {_size(v)} from checkpoint, "
                              f"the shape in current model is {_size(target)}.")
            else:
                pairs.append((k, target, v))
        if errors:
            raise RuntimeError(f"Error(s) in loading state_dict for {type(self).__name__}:\n\t" + "\n\t".join(errors))
        with no_grad():
            for k, target, v in pairs:
                if assign:
                    self._assign(k, v.detach().requires_grad_(target.requires_grad) if _is_parameter(target) else v)
                else:
                    target.copy_(v)
        return _IncompatibleKeys(missing, unexpected)

    def _assign(self, key, value):
        *path, name = key.split(".")
        setattr(self.get_submodule(".".join(path)), name, value)

    # ------------------------------------------------------------------ conversion
    def to(self, *args, **kwargs):
        """Convert parameters (and their grads) and buffers in place, keeping the same tensor objects, as
        PyTorch does, so optimizers built before the conversion still update the module. A dtype
        converts the floating-point tensors only (an int64 counter stays int64)."""
        dtype, device = _to_args(args, kwargs)
        with no_grad():
            for t in [*self.parameters(), *self.buffers()]:
                conv = {}
                if device is not None:
                    conv["device"] = device
                if dtype is not None and t.dtype.is_floating_point:
                    conv["dtype"] = dtype
                if conv:
                    t.data = t.detach().to(**conv)
                    if t.grad is not None:
                        t.grad = t.grad.to(**conv)
        return self

    def cuda(self, device="cuda"):
        return self.to(device)

    def cpu(self):
        return self.to("cpu")

    float, double, half = (lambda self: self.to(D.float32)), (lambda self: self.to(D.float64)), \
        (lambda self: self.to(D.float16))

    def __repr__(self):
        lines = [f"({n}): {m!r}".replace("\n", "\n  ") for n, m in self._modules.items()]
        body = "".join(f"\n  {line}" for line in lines)
        return f"{type(self).__name__}({self.extra_repr()}{body}{chr(10) if body else ''})"

    def extra_repr(self):
        return ""


def _size(t):
    return f"tracegrad.Size({list(t.shape)})"


def _to_args(args, kwargs):
    """(dtype, device) of Module.to(...)'s forms: to(device), to(dtype), to(device, dtype), to(tensor),
    keywords dtype= and device=."""
    from ..device import device as Device
    dtype, device = kwargs.pop("dtype", None), kwargs.pop("device", None)
    kwargs.pop("non_blocking", None)
    if kwargs:
        raise TypeError(f"to() got unexpected keyword arguments {sorted(kwargs)}")
    for a in args:
        if isinstance(a, Tensor):
            dtype, device = a.dtype, a.device
        elif isinstance(a, D.DType):
            dtype = a
        elif isinstance(a, (str, Device)):
            device = a
        else:
            raise TypeError(f"to() expects a device, a dtype or a tensor, got {type(a).__name__}")
    if dtype is not None and not D.to_dtype(dtype).is_floating_point:
        raise TypeError(f"nn.Module.to only accepts floating point dtypes, but got desired dtype={dtype}")
    return dtype, device


def _module_state(m):
    """What a module holds, for tg.compile: each submodule, and each module's attributes (training
    flag, parameters, buffers, tensors, numbers and strings), named by their path; its hooks by
    handle id (registering or removing one retraces: hooks run while tracing, so they are traced)."""
    for prefix, mod in m.named_modules():
        base = prefix + "." if prefix else ""
        if prefix:
            yield prefix, mod
        for k, v in mod.__dict__.items():
            if k in ("_forward_hooks", "_forward_pre_hooks"):
                yield base + k, tuple(v)
            elif k not in ("_params", "_modules", "_buffers") and not isinstance(v, Module):
                yield base + k, v


register_object(Module, _module_state, watch=lambda m: [d for _, mod in m.named_modules()
                                                        for d in (mod.__dict__, mod._forward_hooks,
                                                                  mod._forward_pre_hooks)])
