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
