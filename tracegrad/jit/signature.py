"""The signature of a call: what must match for a compiled entry to be reused.

Pytree structure; per tensor its shape, dtype, device, requires_grad, whether .grad is None, which
earlier argument is the same tensor (one tensor passed twice is one graph input) and which is over
the same array (a and a.detach(): two autograd identities of one storage); the
values of other arguments; the identity of modules and optimizers (objects registered with pytree);
the grad mode; the default float dtype and device (tg.set_default_dtype / set_default_device decide
what Python floats and factories inside the function make). Each part comes with a readable description, so a retrace can say what changed.
"""
import inspect

from .. import dtypes as D
from ..autograd import _Mode, is_grad_enabled
from ..device import get_default_device
from ..pytree import flatten, object_state
from ..tensor import Tensor, TraceError
from ..trace import Traced
from .free_vars import is_plain

STATIC = (int, float, bool, str, type(None), D.DType)


def value_key(x):
    """A number's part of a signature: the number, except a float that is zero or NaN, which is its
    text: -0.0 and 0.0 compare equal but are not the same value (1 / x tells), and NaN equals
    nothing, not even itself."""
    return x.hex() if type(x) is float and not (x and x == x) else x


def same_value(a, b):
    """Whether two Python values read by a trace are the same: of one type and equal, floats bit for
    bit (-0.0 is not 0.0, NaN is NaN), tuples item by item."""
    if type(a) is not type(b):
        return False
    if type(a) is float:
        return value_key(a) == value_key(b)
    if type(a) is tuple:
        return len(a) == len(b) and all(map(same_value, a, b))
    return a == b


def leaf_key(x, path):
    """Signature component and a readable description of one flattened argument."""
    if isinstance(x, Tensor):
        if isinstance(x, Traced):
            raise TraceError(f"argument {path} is a traced tensor of another function; pass real tensors")
        return ("T", x._shape, x._dtype.name, str(x._device), x.requires_grad, x._grad is None), \
            {"shape": x._shape, "dtype": x._dtype.name, "device": str(x._device),
             "requires_grad": x.requires_grad, "grad is None": x._grad is None}
    if object_state(x) is not None or is_plain(x):
        return (type(x).__name__, id(x)), {"object": f"{type(x).__name__} at {id(x):#x}"}
    if isinstance(x, STATIC):
        return ("S", type(x).__name__, value_key(x)), {"value": repr(x)}
    raise TypeError(f"compiled functions take tensors, Python numbers, strings, None, tg.nn.Module, tg.optim "
                    f"optimizers, objects of the user's classes (a method's self) and tuples/lists/dicts of them; "
                    f"argument {path} is a {type(x).__name__}")



def call_signature(fn, args, kwargs):
    """(leaves, paths, key, desc) of a call: the flattened arguments, their readable paths, the
    signature key and its description {(path, attribute): value}."""
    try:
        bound = inspect.signature(fn).bind(*args, **kwargs)
        named = list(bound.arguments.items())
    except (TypeError, ValueError):
        named = [(f"arg{i}", a) for i, a in enumerate(args)] + list(kwargs.items())
    leaves, paths, struct = flatten(tuple(v for _, v in named), "")
    paths = [_name_path(named, p) for p in paths]
    keys, desc, first = [], {}, {}
    for x, p in zip(leaves, paths):
        k, d = leaf_key(x, p)
        if isinstance(x, Tensor):       # the aliasing pattern: f(x, x) is not f(x, z), nor f(x, x.detach())
            same, storage = first.setdefault(id(x), p), first.setdefault(("array", id(x._data)), p)
            k += (same, storage)
            d["same tensor as"], d["same storage as"] = same, storage
        keys.append(k)
        desc.update({(p, a): v for a, v in d.items()})
    grad_mode = is_grad_enabled()      # an entry traced under no_grad has no backward graph
    desc[("grad mode", "enabled")] = grad_mode
    defaults = (D.default_float, str(get_default_device()))
    desc[("default dtype", "is")], desc[("default device", "is")] = defaults[0].name, defaults[1]
    return leaves, paths, (struct, tuple(keys), tuple(kwargs), grad_mode, defaults), desc


def general_key(key, dims):
    """A signature `key` with the sizes of the dims `dims` {(leaf position, dim)} left out (None)."""
    struct, keys, *rest = key
    keys = list(keys)
    for k in {k for k, _ in dims}:
        shape = tuple(None if (k, d) in dims else n for d, n in enumerate(keys[k][1]))
        keys[k] = (keys[k][0], shape) + keys[k][2:]
    return (struct, tuple(keys), *rest)


def sizeless_key(key):
    """A signature `key` with every tensor argument's shape reduced to its rank."""
    struct, keys, *rest = key
    return (struct, tuple((k[0], len(k[1])) + k[2:] if k[0] == "T" else k for k in keys), *rest)


def fast_key(args, kwargs):
    """The signature of a call whose arguments are tensors, numbers, modules and optimizers (the hot
    path), else None: one flat tuple (a tensor's part starts with its shape, a number's with its
    type), the device as its fields (hashing a device object runs Python code)."""
    if kwargs:
        return None
    dd = get_default_device()
    key, first = [_Mode.grad, D.default_float, dd.type, dd.index], {}
    for i, x in enumerate(args):
        if type(x) is Tensor:
            dev = x._device
            key += (x._shape, x._dtype, dev.type, dev.index, x._requires_grad, x._grad is None,
                    first.setdefault(id(x), i), first.setdefault(("array", id(x._data)), i))
        elif type(x) in (int, float, bool):
            key += (type(x), value_key(x))
        elif object_state(x) is not None or is_plain(x):     # by identity, as in the full signature
            key += (object_state, id(x))
        else:
            return None
    return tuple(key)


class LastCall:
    """The signature of one hot-path call (see fast_key), checked against a new call's positional
    arguments with a few attribute reads each: a match has the same fast_key. Tensors are
    compared by shape, dtype, device, requires_grad and whether .grad is None, numbers by type and
    value, modules and optimizers by identity; the aliasing pattern is checked only when the
    recorded call's tensors were all over distinct arrays (last_call makes no LastCall otherwise)
    and the new call's must be too. Any other call is a miss: the caller falls back to fast_key."""

    __slots__ = ("n", "tensors", "numbers", "objects", "grad", "dtype", "device")

    def __init__(self, args):
        self.n, self.grad, self.dtype, self.device = len(args), _Mode.grad, D.default_float, get_default_device()
        self.tensors, self.numbers, self.objects = [], [], []
        for i, x in enumerate(args):
            if type(x) is Tensor:
                self.tensors.append((i, x._shape, x._dtype, x._device, x._requires_grad, x._grad is None))
            elif type(x) in (int, float, bool):
                self.numbers.append((i, type(x), x))
            else:
                self.objects.append((i, x))

    def matches(self, args):
        if len(args) != self.n or _Mode.grad is not self.grad or D.default_float is not self.dtype or \
                get_default_device() is not self.device:
            return False
        for i, shape, dtype, dev, rg, no_grad in self.tensors:
            x = args[i]
            if type(x) is not Tensor or x._shape != shape or x._dtype is not dtype or x._requires_grad is not rg \
                    or (x._grad is None) is not no_grad or x._device is not dev and x._device != dev:
                return False
        for i, kind, v in self.numbers:
            x = args[i]
            if type(x) is not kind or x != v or not x and kind is float and value_key(x) != value_key(v):
                return False
        for i, obj in self.objects:
            if args[i] is not obj:
                return False
        tensors = self.tensors
        return len(tensors) < 2 or len({id(args[t[0]]._data) for t in tensors}) == len(tensors)


def last_call(args):
    """A LastCall for the arguments of a hot-path call whose tensors are over distinct arrays, else None."""
    arrays = [id(x._data) for x in args if type(x) is Tensor]
    return LastCall(args) if len(set(arrays)) == len(arrays) else None


def changes(before, now):
    """Readable reasons for a retrace: what differs between two signature descriptions."""
    return [f"{p}: {a} {before[(p, a)]} -> {v}" if (p, a) in before else f"{p}: new argument"
            for (p, a), v in now.items() if before.get((p, a)) != v]


def _name_path(named, p):
    """'_0_1' -> 'x_1' (the argument's name, then the positions inside it)."""
    parts = p.split("_")[1:]
    if not parts:
        return "arg"
    base = named[int(parts[0])][0]
    return "_".join([base] + parts[1:])
