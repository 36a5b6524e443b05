"""tg.Size: what x.size() returns, a tuple of ints as torch.Size (numel(), PyTorch's repr)."""
import math


class Size(tuple):
    """A tensor's shape: a tuple (compares equal to one), with numel() and torch.Size's printing."""
    __slots__ = ()

    def numel(self):
        return math.prod(self)

    def __getitem__(self, index):
        out = tuple.__getitem__(self, index)
        return Size(out) if isinstance(index, slice) else out

    def __add__(self, other):
        return Size(tuple(self) + tuple(other))

    def __repr__(self):
        return f"tracegrad.Size({list(self)})"

    __str__ = __repr__
