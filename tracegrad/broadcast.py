"""The one broadcasting rule: result shapes, the error, the suspicious-broadcast warning,
and `unbroadcast` (summing a gradient back to an operand's shape)."""
import os
import sys
import warnings


class BroadcastError(ValueError, RuntimeError):
    """Shapes that cannot be broadcast together."""


class BroadcastWarning(UserWarning):
    """Operands of different ranks were both stretched (e.g. (N, 1) with (N,) giving (N, N))."""


_PKG_DIR = os.path.dirname(os.path.abspath(__file__))


def user_frame():
    """The innermost stack frame outside tracegrad (the user's code), or None."""
    f = sys._getframe(1)
    while f is not None and os.path.abspath(f.f_code.co_filename).startswith(_PKG_DIR):
        f = f.f_back
    return f


def _check(shape):
    shape = tuple(shape)
    for s in shape:
        if not isinstance(s, int) or isinstance(s, bool) or s < 0:
            raise TypeError(f"shape {shape} must be a sequence of non-negative ints")
    return shape


def broadcast_shapes(*shapes):
    """The shape that `shapes` broadcast to, aligned from the right; BroadcastError if none."""
    result = ()
    for i, shape in enumerate(shapes):
        shape = _check(shape)
        result = result if i else shape
        if i:
            result = _pair(result, shape)
    return result


def _pair(a, b):
    n = max(len(a), len(b))
    out = []
    for d in range(-n, 0):
        x = a[d] if -d <= len(a) else 1
        y = b[d] if -d <= len(b) else 1
        if x != y and x != 1 and y != 1:
            raise BroadcastError(
                f"shapes {a} and {b} cannot be broadcast: dimension {d} has sizes {x} and {y}")
        out.append(y if x == 1 else x)
    return tuple(out)


_quiet = [0]


class quiet:
    """Suppress the suspicious-broadcast warning (used while running VJP rules)."""

    def __enter__(self):
        _quiet[0] += 1

    def __exit__(self, *exc):
        _quiet[0] -= 1


def _stretched(shape, result):
    """Whether `shape` (right-aligned, missing dims counted as 1) is stretched to `result`."""
    off = len(result) - len(shape)
    return any(r != 1 and (i < off or shape[i - off] == 1) for i, r in enumerate(result))


def elementwise_shape(shapes):
    """Result shape of an elementwise op, warning on the classic rank-mismatch bug."""
    result = shapes[0]
    for s in shapes[1:]:
        if s != result and s:
            result = _pair(result, s) if result else s
    if not _quiet[0] and len(shapes) > 1:
        stretched = {len(s) for s in shapes if s and s != result and _stretched(s, result)}
        if len(stretched) > 1:
            _warn(shapes, result)
    return result


def _warn(shapes, result):
    f = user_frame()
    where = f"{f.f_code.co_filename}:{f.f_lineno}" if f else "<unknown>"
    msg = (f"operands of shapes {' and '.join(str(s) for s in shapes)} of different ranks were both "
           f"stretched to {result} at {where}; this is often a bug (e.g. predictions (N, 1) with targets (N,)). "
           f"Reshape one operand so the ranks match if this is intended.")
    if f is None:
        warnings.warn(msg, BroadcastWarning, stacklevel=2)
    else:
        warnings.warn_explicit(msg, BroadcastWarning, f.f_code.co_filename, f.f_lineno,
                               module=f.f_globals.get("__name__"), registry=f.f_globals.setdefault(
                                   "__warningregistry__", {}))


def unbroadcast(g, shape):
    """Sum `g` over the axes that were stretched to reach g.shape and reshape it to `shape`."""
    shape = tuple(shape)
    if g.shape == shape:
        return g
    lead = len(g.shape) - len(shape)
    axes = tuple(range(lead)) + tuple(lead + i for i, s in enumerate(shape) if s == 1 and g.shape[lead + i] != 1)
    if axes:
        g = g.sum(axis=axes, keepdims=True)
    return g.reshape(shape)
