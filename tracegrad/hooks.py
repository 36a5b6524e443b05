"""RemovableHandle: what registering a hook returns (Tensor.register_hook, Module.register_forward_hook)."""
import itertools
import weakref

_ids = itertools.count()


class RemovableHandle:
    """`.remove()` (or leaving a `with` block) unregisters the hook from the dict that holds it."""

    def __init__(self, hooks):
        self.hooks_dict_ref, self.id = weakref.ref(hooks), next(_ids)

    def remove(self):
        hooks = self.hooks_dict_ref()
        if hooks is not None:
            hooks.pop(self.id, None)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


class Hooks(dict):
    """Hooks by handle id, in registration order (a dict that a RemovableHandle can refer to weakly)."""

    def add(self, hook, prepend=False):
        h = RemovableHandle(self)
        if prepend:
            items = list(self.items())
            self.clear()
            self[h.id] = hook
            self.update(items)
        else:
            self[h.id] = hook
        return h
