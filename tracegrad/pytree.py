"""Flatten arguments and results (tuples, lists, dicts of leaves) into leaves plus a structure."""


def flatten(obj, path="arg"):
    """Returns (leaves, paths, structure): structure rebuilds the object from new leaves."""
    leaves, paths = [], []
    return leaves, paths, _walk(obj, path, leaves, paths)


def _walk(o, p, leaves, paths):
    if isinstance(o, tuple) and hasattr(o, "_fields"):     # a named tuple, e.g. x.max(dim)'s (values, indices)
        return ("namedtuple", type(o), tuple(_walk(x, f"{p}_{f}", leaves, paths) for f, x in zip(o._fields, o)))
    if isinstance(o, (tuple, list)):
        return (type(o).__name__, tuple(_walk(x, f"{p}_{i}", leaves, paths) for i, x in enumerate(o)))
    if isinstance(o, dict):
        keys = tuple(o)
        return ("dict", keys, tuple(_walk(o[k], f"{p}_{k}", leaves, paths) for k in keys))
    leaves.append(o)
    paths.append(p)
    return ("leaf",)


def unflatten(structure, leaves):
    if structure[0] == "leaf":
        return leaves[0]
    return _build(structure, iter(leaves))


def _build(s, it):
    # module-level recursion (here and in _walk): a nested recursive closure would form a reference
    # cycle keeping every argument or result alive until the garbage collector runs
    if s[0] == "leaf":
        return next(it)
    if s[0] == "dict":
        return {k: _build(c, it) for k, c in zip(s[1], s[2])}
    if s[0] == "namedtuple":
        return s[1](*[_build(c, it) for c in s[2]])
    items = [_build(c, it) for c in s[1]]
    return tuple(items) if s[0] == "tuple" else items


# ---------------------------------------------------------------------- objects with state
# Modules and optimizers pass through flatten as leaves. A compiled function identifies them by
# identity, reads the tensors they hold while it runs, and guards the Python values they hold. Each
# class registers here how to list what it holds, so the compiler needs no import of nn or optim.
_OBJECTS = {}      # class -> (state function, names of dynamic attributes)


def register_object(cls, state, dynamic=(), watch=None):
    """Objects of `cls` (and subclasses) are leaves identified by identity. `state(obj)` yields
    (name, value) for what obj holds, in a stable order: tensors, registered objects, Python values.
    `dynamic` names attributes holding numbers that may change every call (a learning rate): a
    compiled function reads them at each call instead of retracing; or it is a function of obj
    returning [(label, holder, key)] for numbers held in dicts (holder a dict) or attributes. `watch(obj)`, optional, lists
    the dicts and lists whose contents make up the state: while each holds the same objects, the
    state is unchanged and a guard need not read it again."""
    _OBJECTS[cls] = (state, dynamic if callable(dynamic) else tuple(dynamic), watch)


def object_state(obj):
    """(state, dynamic, watch) as registered for obj's class, or None for no registered object."""
    for cls in type(obj).__mro__:
        reg = _OBJECTS.get(cls)
        if reg is not None:
            return reg
    return None
