"""What a value read by a trace holds, walked for the guards: the rule, by kind of value.

- a tensor, a module or optimizer, a Python module, a class, a library object: by identity;
- a number, string, None, dtype, or a tuple of them: by value (floats bit for bit: -0.0 is not
  0.0, NaN is NaN);
- a list, dict or tuple: its length and each item (by this rule);
- a module or optimizer: what it registered with pytree (submodules, parameters, every attribute
  of each module by this rule: functions, lists, dicts, config objects, modules in plain lists);
- a function of the user's code: its code, its default values and its closure cells' contents;
  a bound method: its function and its object;
- an object of a class from the user's code (a plain class, a dataclass) or a SimpleNamespace: each
  attribute in its __dict__;
- a NumPy array: its dtype, shape and bytes (the trace may have read it as Python numbers).
Each object is walked once (a second path to it compares identity only); at most MAX_ITEMS items and
MAX_DEPTH levels are walked, past which `truncated` names what was not.
"""
import types

import numpy as np

from ..pytree import object_state
from ..tensor import Tensor
from .free_vars import cell_value, defaults, is_plain, is_user_code, user_class
from .signature import STATIC

MAX_ITEMS = 4096     # items of containers and objects walked per compiled entry
MAX_DEPTH = 12
CONTAINERS = (dict, list, tuple)


def is_static(v):
    return isinstance(v, STATIC) or isinstance(v, tuple) and all(is_static(x) for x in v)


def walk_state(objects, lifted_dynamic=None, module_attrs=None):
    """What the (name, object) pairs hold: `entries` [(path, value, by_identity)] in a stable order
    (state_change compares two readings); the `holders` whose contents make them up (dicts, lists,
    attribute dicts, classes' dicts, registered watch lists; None in the list: an object without a
    watch list), the attributes read (`attrs`: (object, name), a function's code and defaults, a
    closure cell's contents), the NumPy `arrays` read by content, and the paths not walked
    (`truncated`). An optimizer's dynamic numbers (its lr) are compared by kind where the object's
    id is in `lifted_dynamic` (read at each call), else by value. Of a module of the user's, only the
    attributes named in `module_attrs` (those the code that ran loads; None: all) are walked."""
    w = _Walk(lifted_dynamic or (), module_attrs)
    for name, obj in objects:
        w.inside(name, obj, 0)
    return w


class _Walk:
    def __init__(self, lifted_dynamic, module_attrs):
        self.entries, self.holders, self.arrays, self.attrs, self.truncated = [], [], [], [], []
        self.seen, self.budget, self.lifted_dynamic = set(), MAX_ITEMS, lifted_dynamic
        self.module_attrs = module_attrs

    def inside(self, path, v, depth):
        if id(v) in self.seen:
            return
        self.seen.add(id(v))
        if depth > MAX_DEPTH:
            self.truncated.append(path)
            return
        reg = object_state(v)
        if reg is not None:
            self._registered(path, v, reg, depth)
        elif isinstance(v, CONTAINERS):
            self.entries.append((f"{path} length", len(v), False))
            if not isinstance(v, tuple):
                self.holders.append(v)
            self._items(path, v.items() if isinstance(v, dict) else enumerate(v), depth, "[{!r}]")
        elif isinstance(v, np.ndarray):
            self.entries.append((f"{path} values", array_key(v), False))
            self.arrays.append(v)
        elif isinstance(v, types.FunctionType):
            self.attrs += [(v, "__code__"), (v, "__defaults__"), (v, "__kwdefaults__")]
            self.attrs += [(c, "cell_contents") for c in v.__closure__ or () if _filled(c)]
            self.entries.append((f"{path} code", v.__code__, True))
            items = [(f" default {n}", x) for n, x in defaults(v).items()]
            items += [(f" closure {n}", cell_value(c)) for n, c in zip(v.__code__.co_freevars, v.__closure__ or ())]
            self._items(path, items, depth, "{}")
        elif isinstance(v, types.MethodType):
            self._items(path, [(".__func__", v.__func__), (".__self__", v.__self__)], depth, "{}")
        elif is_plain(v):
            self.holders.append(v.__dict__)
            self._items(path, [(" class", type(v))], depth, "{}")
            self._items(path, vars(v).items(), depth, ".{}")
        elif isinstance(v, types.ModuleType):   # a module of the user's: the attributes the code loads (not
            self.holders.append(vars(v))            # inside functions and classes: those a trace read are walked)
            names = self.module_attrs
            self._items(path, [(k, x) for k, x in vars(v).items() if not k.startswith("__") and
                               (names is None or k in names)], depth, ".{}", shallow=True)
        elif isinstance(v, type):             # a class of the user's: its attributes and its bases'
            for c in v.__mro__:
                if user_class(c):
                    self.holders.append(vars(c))
                    self._items(f"{c.__qualname__}", [(k, x) for k, x in vars(c).items()
                                                      if not (k.startswith("__") and k.endswith("__"))], depth, ".{}")

    def _registered(self, path, v, reg, depth):
        state, _, watch = reg
        items = list(state(v))
        held = [x for _, x in items if object_state(x) is not None]
        self.seen.update(map(id, held))        # its own walk covers them
        self._items(path, items, depth, ".{}")
        classes = {type(x): None for x in [v, *held] if user_class(type(x))}
        self._items(path, [(f" class {c.__qualname__}", c) for c in classes], depth, "{}")
        for label, holder, key in dynamic_slots(v):
            x = slot_value(holder, key)
            if isinstance(x, Tensor):
                self.entries.append((f"{path}.{label}", x, True))
            elif id(v) in self.lifted_dynamic:    # a number read per call: only its kind is guarded
                self.entries.append((f"{path}.{label}", "a number" if is_number(x) else type(x).__name__, False))
            else:
                self.entries.append((f"{path}.{label}", x, False))
        self.holders.extend(watch(v) if watch is not None else [None])

    def _items(self, path, items, depth, form, shallow=False):
        for k, x in items:
            self.budget -= 1
            if self.budget < 0:
                self.truncated.append(path)
                return
            p = path + form.format(k)
            static = is_static(x)
            self.entries.append((p, x, not static))
            if not static and not isinstance(x, Tensor) and has_inside(x) and \
                    not (shallow and isinstance(x, (type, types.FunctionType, types.ModuleType))):
                self.inside(p, x, depth + 1)


def has_inside(v):
    """Whether walk_state walks into v (else v is compared by identity or value alone)."""
    return object_state(v) is not None or isinstance(v, (*CONTAINERS, np.ndarray, types.MethodType)) \
        or isinstance(v, types.FunctionType) and is_user_code(v.__code__.co_filename) or is_plain(v) \
        or isinstance(v, type) and user_class(v) or \
        isinstance(v, types.ModuleType) and is_user_code(getattr(v, "__file__", None) or "<module>")


def array_key(a):
    """A NumPy array's dtype, shape and bytes: equal keys, equal values bit for bit."""
    return ("array", a.dtype.str, a.shape, a.tobytes())


def dynamic_slots(obj):
    """[(label, holder, key)] for the numbers a registered object holds that a call reads afresh:
    an attribute (holder: the object) or a dict item (holder: the dict, an optimizer's group)."""
    dynamic = object_state(obj)[1]
    return dynamic(obj) if callable(dynamic) else [(attr, obj, attr) for attr in dynamic]


def slot_value(holder, key):
    return holder.get(key) if isinstance(holder, dict) else getattr(holder, key, None)


def is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _filled(cell):
    try:
        cell.cell_contents
    except ValueError:
        return False
    return True
