"""What a traced function can reach besides its tensor arguments: the objects registered with
pytree (modules, optimizers) among its arguments, its globals and closure variables, or the
function itself (`tg.compile(model)`, a method's `self`), and what they hold.

A compiled entry guards this state: a tensor or object held is compared by identity, a Python value
(a module's training flag, an optimizer's momentum) by value. Attributes registered as dynamic (an
optimizer's lr) are runtime inputs instead: read at each call, never baked into the graph.
"""
import operator
import types
from itertools import chain

from ..codegen.native_call import versions_check
from ..pytree import object_state
from ..tensor import Tensor
from .free_vars import free_objects
from .signature import STATIC


def is_static(v):
    return isinstance(v, STATIC) or isinstance(v, tuple) and all(is_static(x) for x in v)


MAX_ITEMS = 1024      # a container (dict, list, tuple) read by the code is guarded up to this many items


def reachable(fn, leaves, paths):
    """[(name, object)] for what a call of fn can reach besides its tensor arguments, each once:
    registered objects (modules, optimizers) and the dicts, lists and tuples among the globals and
    closure variables (a config dict), with the registered objects inside those."""
    found = [(p, x) for x, p in zip(leaves, paths) if object_state(x) is not None]
    if isinstance(fn, types.MethodType):
        found.append(("self", fn.__self__))
        fn = fn.__func__
    found.append(("self", fn))
    for _, n, _, obj in free_objects(fn):
        found.append((n, obj))
        if isinstance(obj, CONTAINERS):
            found += [(p, v) for p, v, _ in _walk(n, obj) if object_state(v) is not None]
    out, seen = [], set()
    for name, obj in found:
        if (object_state(obj) is not None or isinstance(obj, CONTAINERS) and not is_static(obj)) \
                and id(obj) not in seen:
            seen.add(id(obj))
            out.append((name, obj))
    return out


def read_state(objects):
    """[(name, value, by_identity)] of everything the objects hold that a guard compares."""
    out = []
    for name, obj in objects:
        if isinstance(obj, CONTAINERS):
            out += [(p, v, ident) for p, v, ident in _walk(name, obj) if ident is not None]
            continue
        state = object_state(obj)[0]
        for n, v in state(obj):
            if isinstance(v, Tensor) or object_state(v) is not None:
                out.append((f"{name}.{n}", v, True))
            elif is_static(v):
                out.append((f"{name}.{n}", v, False))
        for label, holder, key in dynamic_slots(obj):
            v = slot_value(holder, key)
            if isinstance(v, Tensor):
                out.append((f"{name}.{label}", v, True))
            else:           # a number read per call: only its kind is guarded
                out.append((f"{name}.{label}", "a number" if is_number(v) else type(v).__name__, False))
    return out


def dynamic_slots(obj):
    """[(label, holder, key)] for the numbers a registered object holds that a call reads afresh:
    an attribute (holder: the object) or a dict item (holder: the dict, an optimizer's group)."""
    dynamic = object_state(obj)[1]
    return dynamic(obj) if callable(dynamic) else [(attr, obj, attr) for attr in dynamic]


def slot_value(holder, key):
    return holder.get(key) if isinstance(holder, dict) else getattr(holder, key, None)


def set_slot(holder, key, value):
    if isinstance(holder, dict):
        holder[key] = value
    else:
        setattr(holder, key, value)


CONTAINERS = (dict, list, tuple)


def _walk(name, obj, depth=0, budget=None):
    """(path, value, by_identity) for a container's items: tensors and registered objects by
    identity, Python values by value, nested containers walked (by_identity None: not compared
    themselves); past MAX_ITEMS items, the rest is summarized by its length."""
    budget = [MAX_ITEMS] if budget is None else budget
    items = obj.items() if isinstance(obj, dict) else enumerate(obj)
    out = [(f"{name} length", len(obj), False)]
    for k, v in items:
        budget[0] -= 1
        if budget[0] < 0:
            break
        path = f"{name}[{k!r}]"
        if isinstance(v, Tensor) or object_state(v) is not None:
            out.append((path, v, True))
        elif is_static(v):
            out.append((path, v, False))
        elif isinstance(v, CONTAINERS) and depth < 4:
            out.append((path, v, None))
            out += _walk(path, v, depth + 1, budget)
    return out


def is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def state_change(before, now):
    """None when two readings of the state agree, else a readable reason for the first difference."""
    for (n, a, ident), (m, b, _) in zip(before, now):
        if n != m:
            return f"{n}: no longer held (now {m})"
        if ident:
            if a is not b:
                return f"{n}: replaced by another " + ("tensor" if isinstance(a, Tensor) else
                                                       f"object ({type(a).__name__} -> {type(b).__name__})")
        elif a is not b and (type(a) is not type(b) or a != b):
            return f"{n}: {a!r} -> {b!r}"
    if len(before) != len(now):
        longer = before if len(before) > len(now) else now
        return f"{longer[min(len(before), len(now))][0]}: {'removed' if longer is before else 'added'}"
    return None


def watched(objects):
    """A Watch of the registered objects' watch lists and of the containers (a dict, a list) and what
    they hold now; None when an object has no watch list. While they hold the same objects in the
    same order, the state reads the same."""
    containers = []
    for name, obj in objects:
        if isinstance(obj, CONTAINERS):
            containers += [obj] + [v for _, v, ident in _walk(name, obj) if ident is None]
        else:
            watch = object_state(obj)[2]
            if watch is None:
                return None          # an object without a watch list: read its state at each call
            containers += watch(obj)
    return Watch([c for c in containers if not isinstance(c, tuple)])


class Watch:
    """Whether watched containers still hold what they held: dicts by their version tags where the
    interpreter's can be trusted (codegen/native_call.versions_check: 263 dicts of a 64-layer model
    and its Adam in 0.3 us), lists and the other dicts item by item, by identity (1438 items: 50 us)."""

    def __init__(self, containers):
        dicts = [c for c in containers if type(c) is dict]
        self.same = versions_check(dicts) if dicts else None
        rest = [c for c in containers if type(c) is not dict] if self.same is not None else containers
        self.views = [c.values() if isinstance(c, dict) else c for c in rest]
        self.items = tuple(chain.from_iterable(self.views))

    def unchanged(self):
        if self.same is not None and not self.same():
            return False
        now = tuple(chain.from_iterable(self.views))
        return len(now) == len(self.items) and all(map(operator.is_, now, self.items))
