"""Named tuples of (values, indices), as torch.return_types: what x.max(dim) and x.min(dim) return."""
from collections import namedtuple


def _values_indices(name):
    cls = namedtuple(name, ["values", "indices"], module=__name__)
    cls.__repr__ = lambda self: f"{__name__}.{name}(\nvalues={self.values!r},\nindices={self.indices!r})"
    return cls


max = _values_indices("max")   # noqa: A001  (PyTorch's names)
min = _values_indices("min")   # noqa: A001
sort = _values_indices("sort")
topk = _values_indices("topk")
kthvalue = _values_indices("kthvalue")
