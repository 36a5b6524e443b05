"""How shapes broadcast, as a picture: `tg.explain_broadcast(*shapes)` and the `broadcast` command."""
import os
import sys

from ..broadcast import BroadcastError, broadcast_shapes, explain


def use_color(stream=None):
    """ANSI colours only on a terminal, and never when NO_COLOR is set (https://no-color.org) or TERM=dumb."""
    stream = sys.stdout if stream is None else stream
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def explain_broadcast(*shapes, color=None):
    """The shapes right-aligned, one column per dimension, each size marked kept, stretched from 1
    (`1->n`), missing and stretched (`.->n`) or mismatched (`n!`), the result row, and a first line that
    states the result shape or the BroadcastError it raises. Shapes are tuples/lists or tensors/arrays
    (their `.shape`). `color=None` colours the markers when stdout is a terminal and NO_COLOR is unset.

    >>> print(tg.explain_broadcast((3, 1), (4,)))
    (3, 1) and (4,) broadcast to (3, 4)
      dim       -2    -1
      (3, 1)     3  1->4
      (4,)    .->3     4
      result     3     4
      1->n stretched from size 1; .->n missing dimension (counts as 1) stretched
    """
    shapes = [tuple(s.shape) if hasattr(s, "shape") else s for s in shapes]
    return explain(shapes, use_color() if color is None else color)


def parse_shape(text):
    """'3,1' -> (3, 1); '4' -> (4,); '()' or '' -> (); spaces, brackets and 'x' separators allowed."""
    body = text.strip().strip("()[]").replace("x", ",").replace(" ", ",")
    try:
        return tuple(int(p) for p in body.split(",") if p)
    except ValueError:
        raise ValueError(f"cannot read the shape {text!r}: write sizes separated by commas, e.g. 3,1 or 4") from None


def main(texts, out=None):
    """`python -m tracegrad broadcast 3,1 4`: print the picture; exit status 1 when they do not broadcast."""
    out = sys.stdout if out is None else out
    shapes = [parse_shape(t) for t in texts]
    print(explain(shapes, use_color(out)), file=out)
    try:
        broadcast_shapes(*shapes)
    except BroadcastError:
        return 1
    return 0
