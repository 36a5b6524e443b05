"""The one broadcasting rule: result shapes, the error, the suspicious-broadcast warning,
and `unbroadcast` (summing a gradient back to an operand's shape)."""
import os
import sys
import threading
import warnings

from .symint import hints, is_size, same_shape, same_size


class BroadcastError(ValueError, RuntimeError):
    """Shapes that cannot be broadcast together.

    The first line of the message is the one-line summary (args[0]); the aligned picture of the
    shapes (`picture`) follows under it."""

    def __init__(self, summary, picture=""):
        super().__init__(summary)
        self.picture = picture

    def __str__(self):
        summary = str(self.args[0]) if self.args else ""
        return f"{summary}\n{self.picture}" if self.picture else summary


class BroadcastWarning(UserWarning):
    """An elementwise op stretched one length into two equal axes: operands of different ranks both
    stretched to the same length, as (N, 1) with (N,) giving (N, N)."""


_PKG_DIR = os.path.dirname(os.path.abspath(__file__))


def user_frame():
    """The innermost stack frame outside tracegrad (the user's code), or None."""
    f = sys._getframe(1)
    while f is not None and in_package(f.f_code.co_filename):
        f = f.f_back
    return f


_IN_PACKAGE = {}        # absolute file name -> whether tracegrad's (asked for every op traced)


def in_package(filename):
    """Whether code from `filename` is tracegrad's own (a relative name: relative to the working directory)."""
    inside = _IN_PACKAGE.get(filename)
    if inside is None:
        inside = os.path.abspath(filename).startswith(_PKG_DIR)
        if os.path.isabs(filename):
            _IN_PACKAGE[filename] = inside
    return inside


def _check(shape):
    shape = tuple(shape)
    for s in shape:
        if not is_size(s) or s < 0:
            raise TypeError(f"shape {shape} must be a sequence of non-negative ints")
    return shape


def broadcast_shapes(*shapes):
    """The shape that `shapes` broadcast to, aligned from the right; BroadcastError if none."""
    shapes = [_check(s) for s in shapes]
    return _combine(shapes)


def _combine(shapes):
    """Fold `shapes` left to right; a mismatch raises BroadcastError carrying the picture of all of them."""
    result = shapes[0] if shapes else ()
    for s in shapes[1:]:
        if not same_shape(s, result):
            try:
                result = _pair(result, s)
            except _Mismatch as m:
                raise BroadcastError(str(m), picture(shapes)) from None
    return result


class _Mismatch(Exception):
    pass


def _pair(a, b):
    """Broadcast two shapes; the error names the first mismatching dimension from the right."""
    out = []
    for d in range(-1, -max(len(a), len(b)) - 1, -1):
        x = a[d] if -d <= len(a) else 1
        y = b[d] if -d <= len(b) else 1
        if same_size(y, 1) or same_size(x, y):      # decided for any value of a symbolic size: no guard
            out.append(x)
            continue
        if same_size(x, 1):
            out.append(y)
            continue
        if x != y and x != 1 and y != 1:            # on symbolic sizes: each decision a guard
            raise _Mismatch(f"shapes {a} and {b} cannot be broadcast: dimension {d} has sizes {x} and {y}")
        out.append(y if x == 1 else x)
    return tuple(reversed(out))


# ---------------------------------------------------------------- the aligned picture

_ANSI = {"kept": "32", "stretched": "33", "mismatch": "1;31"}     # green, yellow, bold red
_LEGEND = {"stretched": "1->n stretched from size 1",
           "missing": ".->n missing dimension (counts as 1) stretched",
           "mismatch": "n! sizes differ and neither is 1"}


def _cells(shape, result, n):
    """(text, kind) per axis of an n-axis picture; `result` holds None where sizes mismatch."""
    row = []
    for i in range(n):
        k = i - (n - len(shape))
        size, r = (shape[k] if k >= 0 else None), result[i]
        if r is None:
            row.append(("." if size is None else f"{size}!" if size != 1 else "1",
                        "mismatch" if size not in (None, 1) else "kept"))
        elif size is None:
            row.append((f".->{r}", "missing") if r != 1 else (".", "kept"))
        elif size != r:
            row.append((f"1->{r}", "stretched"))
        else:
            row.append((str(size), "kept"))
    return row


def picture(shapes, color=False):
    """The shapes right-aligned in columns, one per dimension (-n .. -1), each size marked as kept,
    stretched from 1 or mismatched, then the result row and a key to the markers."""
    shapes = [tuple(s) for s in shapes]
    n = max((len(s) for s in shapes), default=0)
    result = []
    for i in range(n):
        sizes = {s[i - (n - len(s))] for s in shapes if i - (n - len(s)) >= 0} - {1}
        result.append(None if len(sizes) > 1 else (sizes.pop() if sizes else 1))
    rows = [("dim", [(str(i - n), "head") for i in range(n)])]
    rows += [(str(s), _cells(s, result, n)) for s in shapes]
    rows.append(("result", [("?", "mismatch") if r is None else (str(r), "head") for r in result]))
    label_w = max(len(label) for label, _ in rows)
    widths = [max(len(cells[i][0]) for _, cells in rows) for i in range(n)]
    lines = []
    for label, cells in rows:
        parts = [_paint(text.rjust(w), kind, color) for (text, kind), w in zip(cells, widths)]
        lines.append(("  " + label.ljust(label_w) + "  " + "  ".join(parts)).rstrip())
    kinds = {kind for _, cells in rows[1:-1] for _, kind in cells if kind in _LEGEND}
    if kinds:
        lines.append("  " + "; ".join(_LEGEND[k] for k in _LEGEND if k in kinds))
    return "\n".join(lines)


def _paint(text, kind, color):
    code = _ANSI.get("stretched" if kind == "missing" else kind)
    return f"\x1b[{code}m{text}\x1b[0m" if color and code else text


def explain(shapes, color=False):
    """A one-line verdict (the result shape, or the BroadcastError summary) over the picture."""
    shapes = [_check(s) for s in shapes]
    try:
        result = _combine(shapes)
    except BroadcastError as e:
        head = e.args[0]
    else:
        head = f"{' and '.join(map(str, shapes)) or 'no shapes'} broadcast to {result}"
    return f"{head}\n{picture(shapes, color)}"


class _Quiet(threading.local):
    depth = 0          # per thread: one thread's backward does not silence another's warnings


_quiet = _Quiet()


class quiet:
    """Suppress the suspicious-broadcast warning in this thread (used while running VJP rules)."""

    def __enter__(self):
        _quiet.depth += 1

    def __exit__(self, *exc):
        _quiet.depth -= 1


def elementwise_shape(shapes):
    """Result shape of an elementwise op, warning on the classic rank-mismatch bug (SPEC §2)."""
    result = _combine(shapes)
    if not _quiet.depth and len(shapes) > 1:
        length = _one_length_made_two_axes(hints(shapes), hints(result))     # a warning: the sizes seen
        if length is not None:
            _warn(shapes, result, length)
    return result


def _stretched_axes(shape, result):
    """The axes of `result` along which `shape` (right-aligned, missing dims counted as 1) is stretched."""
    off = len(result) - len(shape)
    return {i for i, r in enumerate(result) if r != 1 and (i < off or shape[i - off] == 1)}


def _one_length_made_two_axes(shapes, result):
    """The length N when two operands of different ranks are both stretched to N along different
    axes (so one length became two equal axes, as (N, 1) with (N,) -> (N, N)); else None."""
    for i, a in enumerate(shapes):
        for b in shapes[i + 1:]:
            if len(a) == len(b):
                continue
            sa, sb = _stretched_axes(a, result), _stretched_axes(b, result)
            for p in sorted(sa - sb):
                if any(result[q] == result[p] for q in sb - sa):
                    return result[p]
    return None


def _warn(shapes, result, length):
    f = user_frame()
    where = f"{f.f_code.co_filename}:{f.f_lineno}" if f else "<unknown>"
    shown = ", ".join(map(str, shapes))
    msg = (f"operands of shapes {' and '.join(map(str, shapes))} of different ranks were both stretched to "
           f"{result} at {where}: the length {length} became two axes. This is often a bug (predictions (N, 1) "
           f"with targets (N,) give (N, N)); if it is not intended, make the ranks match (e.g. .squeeze(-1) or "
           f"[:, None]). tg.explain_broadcast({shown}) shows how the axes line up.")
    if f is None:
        warnings.warn(msg, BroadcastWarning, stacklevel=2)
    else:
        warnings.warn_explicit(msg, BroadcastWarning, f.f_code.co_filename, f.f_lineno,
                               module=f.f_globals.get("__name__"), registry=f.f_globals.setdefault(
                                   "__warningregistry__", {}))


def unbroadcast(g, shape):
    """Sum `g` over the axes that were stretched to reach g.shape and reshape it to `shape`."""
    shape = tuple(shape)
    if same_shape(g.shape, shape):
        return g
    lead = len(g.shape) - len(shape)
    # a size-1 axis of `shape` was stretched unless g's is the same size (summing over an axis of
    # size 1 changes nothing, so a symbolic size of g needs no guard)
    axes = tuple(range(lead)) + tuple(lead + i for i, s in enumerate(shape)
                                      if not same_size(s, g.shape[lead + i]) and s == 1)
    if axes:
        g = g.sum(axis=axes, keepdims=True)
    return g.reshape(shape)
