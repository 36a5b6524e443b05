"""Containers of modules and parameters: ModuleList, ModuleDict, ParameterList, ParameterDict, as
torch.nn's. Items are registered under their index or key, so they appear in parameters() and
state_dict() ("layers.0.weight", "scales.a")."""
from ..tensor import Tensor
from .module import Module, Parameter, _is_parameter


def _index(i, n, kind):
    if not isinstance(i, int) or isinstance(i, bool):
        raise TypeError(f"{kind} indices must be integers or slices, not {type(i).__name__}")
    if not -n <= i < n:
        raise IndexError(f"index {i} is out of range")
    return i + n if i < 0 else i


class _ListBase(Module):
    """A list whose items are held in one of the module's registries under "0", "1", ..."""
    _field = None

    def _items(self):
        return getattr(self, self._field)

    def __len__(self):
        return len(self._items())

    def __iter__(self):
        return iter(list(self._items().values()))

    def __getitem__(self, i):
        items = list(self._items().values())
        if isinstance(i, slice):
            return type(self)(items[i])
        return items[_index(i, len(items), type(self).__name__)]

    def __setitem__(self, i, value):
        setattr(self, str(_index(i, len(self), type(self).__name__)), self._check(value))

    def __delitem__(self, i):
        items = list(self._items().values())
        if isinstance(i, slice):
            del items[i]
        else:
            del items[_index(i, len(items), type(self).__name__)]
        self._reset(items)

    def _reset(self, items):
        for k in list(self._items()):
            delattr(self, k)
        self.extend(items)

    def append(self, value):
        setattr(self, str(len(self)), self._check(value))
        return self

    def extend(self, values):
        for v in values:
            self.append(v)
        return self

    def insert(self, index, value):
        items = list(self._items().values())
        items.insert(index, value)
        self._reset(items)

    def __iadd__(self, values):
        return self.extend(values)

    def __add__(self, other):
        return type(self)([*self, *other])


class ModuleList(_ListBase):
    """A list of modules, registered as submodules "0", "1", ..."""
    _field = "_modules"

    def __init__(self, modules=None):
        super().__init__()
        self.extend(modules or [])

    @staticmethod
    def _check(m):
        if not isinstance(m, Module):
            raise TypeError(f"ModuleList holds modules, got {type(m).__name__}")
        return m

    def forward(self, *args):
        raise NotImplementedError("ModuleList has no forward(): iterate over it and call its modules")


class ParameterList(_ListBase):
    """A list of parameters, registered as "0", "1", ...; a tensor added is made a Parameter."""
    _field = "_params"

    def __init__(self, values=None):
        super().__init__()
        self.extend(values or [])

    @staticmethod
    def _check(p):
        if not isinstance(p, Tensor):
            raise TypeError(f"ParameterList holds tensors, got {type(p).__name__}")
        return p if _is_parameter(p) else Parameter(p)

    def extra_repr(self):
        return _param_lines(enumerate(self))


class _DictBase(Module):
    """A dict whose items are held in one of the module's registries under their keys."""
    _field = None

    def _items(self):
        return getattr(self, self._field)

    def __init__(self, values=None):
        super().__init__()
        if values is not None:
            self.update(values)

    def __getitem__(self, key):
        return self._items()[key]

    def __setitem__(self, key, value):
        if not isinstance(key, str):
            raise TypeError(f"{type(self).__name__} keys must be strings, got {type(key).__name__}")
        self._check_name(key, "module" if self._field == "_modules" else "parameter")
        setattr(self, key, self._check(value))

    def __delitem__(self, key):
        delattr(self, key)

    def __len__(self):
        return len(self._items())

    def __iter__(self):
        return iter(list(self._items()))

    def __contains__(self, key):
        return key in self._items()

    def keys(self):
        return list(self._items().keys())

    def values(self):
        return list(self._items().values())

    def items(self):
        return list(self._items().items())

    def pop(self, key):
        v = self[key]
        del self[key]
        return v

    def clear(self):
        for k in list(self._items()):
            delattr(self, k)

    def update(self, values):
        pairs = values.items() if isinstance(values, (dict, _DictBase)) else values
        for k, v in pairs:
            self[k] = v


class ModuleDict(_DictBase):
    """A dict of modules by string key, registered as submodules."""
    _field = "_modules"
    _check = staticmethod(ModuleList._check)

    def forward(self, *args):
        raise NotImplementedError("ModuleDict has no forward(): index it and call its modules")


class ParameterDict(_DictBase):
    """A dict of parameters by string key; a tensor added is made a Parameter."""
    _field = "_params"
    _check = staticmethod(ParameterList._check)

    def extra_repr(self):
        return _param_lines(self._items().items())



def _param_lines(pairs):
    lines = [f"\n  ({k}): Parameter containing: [{p.dtype} of size {'x'.join(map(str, p.shape))}]" for k, p in pairs]
    return "".join(lines) + ("\n" if lines else "")
