"""Flatten arguments and results (tuples, lists, dicts of leaves) into leaves plus a structure."""


def flatten(obj, path="arg"):
    """Returns (leaves, paths, structure): structure rebuilds the object from new leaves."""
    leaves, paths = [], []

    def walk(o, p):
        if isinstance(o, (tuple, list)):
            return (type(o).__name__, tuple(walk(x, f"{p}_{i}") for i, x in enumerate(o)))
        if isinstance(o, dict):
            keys = tuple(o)
            return ("dict", keys, tuple(walk(o[k], f"{p}_{k}") for k in keys))
        leaves.append(o)
        paths.append(p)
        return ("leaf",)

    return leaves, paths, walk(obj, path)


def unflatten(structure, leaves):
    it = iter(leaves)

    def build(s):
        if s[0] == "leaf":
            return next(it)
        if s[0] == "dict":
            return {k: build(c) for k, c in zip(s[1], s[2])}
        items = [build(c) for c in s[1]]
        return tuple(items) if s[0] == "tuple" else items

    return build(structure)
