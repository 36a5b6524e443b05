"""Devices: `tg.device("cpu")`, `tg.device("cuda:0")`, and the same-device check."""


class device:
    """A device; compares equal to its string form ("cpu", "cuda:0"; "cuda" means "cuda:0")."""

    __slots__ = ("type", "index")

    def __init__(self, spec="cpu"):
        if isinstance(spec, device):
            self.type, self.index = spec.type, spec.index
            return
        if not isinstance(spec, str):
            raise TypeError(f"device must be a string such as 'cpu' or 'cuda:0', not {type(spec).__name__}")
        kind, _, idx = spec.strip().partition(":")
        if kind not in ("cpu", "cuda") or (idx and not idx.isdigit()) or (kind == "cpu" and idx not in ("", "0")):
            raise RuntimeError(f"Expected one of cpu, cuda device type at start of device string: {spec}")
        self.type = kind
        self.index = (int(idx) if idx else 0) if kind == "cuda" else None

    def __str__(self):
        return self.type if self.index is None else f"{self.type}:{self.index}"

    def __repr__(self):
        return f"device(type='{self.type}')" if self.index is None else f"device(type='{self.type}', index={self.index})"

    def __eq__(self, other):
        if isinstance(other, str):
            try:
                other = device(other)
            except (RuntimeError, TypeError):
                return False
        return isinstance(other, device) and (self.type, self.index) == (other.type, other.index)

    def __hash__(self):
        return hash(str(self))


CPU = device("cpu")
_DEFAULT = [CPU]          # where factories put tensors when no device= is given


def set_default_device(d):
    """tg.set_default_device: the device of new tensors made without device= (None: the cpu)."""
    _DEFAULT[0] = CPU if d is None else to_device(d)


def get_default_device():
    return _DEFAULT[0]


def to_device(d):
    return d if isinstance(d, device) else device(d)


def mismatch_error(a, b):
    return RuntimeError(
        f"Expected all tensors to be on the same device, but found at least two devices, {a} and {b}!")
