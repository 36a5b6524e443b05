"""What a traced function can reach besides its tensor arguments: the objects registered with
pytree (modules, optimizers) and plain objects (a method's `self`) among its arguments, the values
of the globals its code and every user function it called read, its closure variables and default
values, or the function itself (`tg.compile(model)`), and what they hold (walk.py: the rule).

A compiled entry guards this state: a tensor or object held is compared by identity, a Python value
(a module's training flag, an optimizer's momentum) by value. Attributes registered as dynamic (an
optimizer's lr) are runtime inputs instead: read at each call, never baked into the graph.
"""
import operator
import types
from itertools import chain

from ..backends.cpu.native_call import versions_check
from ..pytree import object_state
from ..tensor import Tensor
from .free_vars import free_objects
from .signature import same_value
from .walk import array_key, has_inside, is_plain, is_static, walk_state


def reachable(fn, leaves, paths):
    """[(name, object)] for what a call of fn can reach besides its tensor arguments, known before
    the trace: registered objects (modules, optimizers) and plain objects among the arguments, the
    function's `self`, and the values of the globals and closure variables its code reads that
    hold something (roots), then the registered objects inside those."""
    found = [(p, x) for x, p in zip(leaves, paths) if object_state(x) is not None or is_plain(x)]
    if isinstance(fn, types.MethodType):
        found.append(("self", fn.__self__))
        fn = fn.__func__
    if not isinstance(fn, types.FunctionType):       # tg.compile(model)
        found.append(("self", fn))
    found += [(n, obj) for _, n, _, obj in free_objects(fn)]
    out = roots(found)
    inner = [(p, v) for p, v, ident in walk_state(out).entries if ident and object_state(v) is not None]
    return out + roots(inner, out)


def roots(found, have=()):
    """The (name, value) pairs of `found` that hold something to walk, each once, none of `have`."""
    out, seen = [], {id(obj) for _, obj in have}
    for name, obj in found:
        if has_inside(obj) and not is_static(obj) and id(obj) not in seen:
            seen.add(id(obj))
            out.append((name, obj))
    return out


def set_slot(holder, key, value):
    if isinstance(holder, dict):
        holder[key] = value
    else:
        setattr(holder, key, value)


def state_change(before, now):
    """None when two readings of the state agree, else a readable reason for the first difference."""
    for (n, a, ident), (m, b, _) in zip(before, now):
        if n != m:
            return f"{n}: no longer held (now {m})"
        if ident:
            if a is not b:
                return f"{n}: replaced by another " + ("tensor" if isinstance(a, Tensor) else
                                                       f"object ({_label(a)} -> {_label(b)})")
        elif a is not b and not same_value(a, b):
            return f"{n}: {a!r} -> {b!r}"
    if len(before) != len(now):
        longer = before if len(before) > len(now) else now
        return f"{longer[min(len(before), len(now))][0]}: {'removed' if longer is before else 'added'}"
    return None


def _label(v):
    """A function or class by its name, another object by its type's."""
    name = getattr(v, "__qualname__", None) if isinstance(v, (type, types.FunctionType)) else None
    return name or type(v).__name__


def watched(walk):
    """A Watch of what walk_state found (holders, attributes, arrays); None when a registered
    object has no watch list (its state is read at each call)."""
    if any(h is None for h in walk.holders):
        return None
    return Watch([h for h in walk.holders if not isinstance(h, tuple)], walk.attrs, walk.arrays)


class Watch:
    """Whether watched holders still hold what they held, attributes the same objects, and arrays
    their bytes: dicts by their version tags where the interpreter's can be trusted
    (backends/cpu/native_call.versions_check: 263 dicts of a 64-layer model and its Adam in 0.3 us),
    lists, classes' and the other dicts item by item, by identity (1438 items: 50 us)."""

    def __init__(self, containers, attrs=(), arrays=()):
        dicts = [c for c in containers if type(c) is dict]
        self.same = versions_check(dicts) if dicts else None
        rest = [c for c in containers if type(c) is not dict] if self.same is not None else containers
        self.views = [c.values() if isinstance(c, (dict, types.MappingProxyType)) else c for c in rest]
        self.items = tuple(chain.from_iterable(self.views))
        self.owners, self.names = [o for o, _ in attrs], [n for _, n in attrs]
        self.values = list(map(getattr, self.owners, self.names))
        self.arrays = [(a, array_key(a)) for a in arrays]

    def unchanged(self):
        if self.same is not None and not self.same():
            return False
        if self.views:
            now = tuple(chain.from_iterable(self.views))
            if len(now) != len(self.items) or not all(map(operator.is_, now, self.items)):
                return False
        if self.owners and not all(map(operator.is_, map(getattr, self.owners, self.names), self.values)):
            return False
        for a, key in self.arrays:
            if array_key(a) != key:
                return False
        return True
