"""Flatten arguments and results (tuples, lists, dicts of leaves) into leaves plus a structure."""


def flatten(obj, path="arg"):
    """Returns (leaves, paths, structure): structure rebuilds the object from new leaves."""
    leaves, paths = [], []
    return leaves, paths, _walk(obj, path, leaves, paths)


def _walk(o, p, leaves, paths):
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
    items = [_build(c, it) for c in s[1]]
    return tuple(items) if s[0] == "tuple" else items


# ---------------------------------------------------------------------- objects with state
# Modules and optimizers pass through flatten as leaves: a compiled function identifies them by
# identity and reads the tensors they hold while it runs. Each registers here how to list what it
# holds, so the compiler needs no import of nn or optim.
_OBJECTS = {}      # class -> function(obj) yielding (name, value) for what obj holds


def register_object(cls, state):
    """Objects of `cls` (and subclasses) are leaves identified by identity; `state(obj)` yields
    (relative name, value) pairs: the tensors the object holds, in a stable order."""
    _OBJECTS[cls] = state


def object_state(obj):
    """The registered state function of obj's class, or None when obj is no registered object."""
    for cls in type(obj).__mro__:
        state = _OBJECTS.get(cls)
        if state is not None:
            return state
    return None
