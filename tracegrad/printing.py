"""PyTorch-compatible tensor ``repr`` formatting.

``format_tensor`` reproduces what ``repr(torch_tensor)`` prints (the algorithm
of ``torch/_tensor_str.py`` with the default print options: precision 4,
threshold 1000, edgeitems 3, linewidth 80) from a NumPy array of values plus a
list of already-formatted suffix strings.
"""

import numpy as np

PRECISION = 4     # digits after the point (fixed) or in the mantissa (sci)
THRESHOLD = 1000  # summarize with "..." when numel exceeds this
EDGEITEMS = 3     # items kept at each end of a summarized dimension
LINEWIDTH = 80    # wrap 1-D rows and suffixes at this width
PREFIX = "tensor("


def format_tensor(values, suffixes):
    """Return PyTorch's ``repr`` of a tensor holding ``values``.

    ``values`` is a NumPy array (float16/32/64, int32/64, bool; any ndim,
    including 0-d and empty).  ``suffixes`` are appended as given, separated
    by ", ", each moved to its own line (indented under the data) when it
    would overflow the line width.  PyTorch emits them in this order:

    1. ``device='cuda:0'`` when the device differs from the default device.
    2. Empty tensors only (numel == 0, data prints as ``[]``):
       ``size=(2, 0)`` when ndim != 1, then ``dtype=<dtype>`` whenever the
       dtype is not the default float dtype (float32) -- int64 and bool too.
    3. Non-empty tensors: ``dtype=<dtype>`` unless the dtype is float32
       (default), int64 or bool.
    4. ``grad_fn=<MulBackward0>`` when the tensor has a grad_fn, otherwise
       ``requires_grad=True`` when it requires grad.
    """
    values = np.asarray(values)
    if values.size == 0:
        body = "[]"
    else:
        summarize = values.size > THRESHOLD
        formatter = _Formatter(_edges(values) if summarize else values)
        body = _body(values, len(PREFIX), summarize, formatter)
    return _add_suffixes(PREFIX + body, suffixes, len(PREFIX))


def _edges(a):
    """Elements a summarized print shows (EDGEITEMS at each end per axis)."""
    for axis, n in enumerate(a.shape):
        if n > 2 * EDGEITEMS:
            keep = list(range(EDGEITEMS)) + list(range(n - EDGEITEMS, n))
            a = np.take(a, keep, axis=axis)
    return a


class _Formatter:
    """Chooses one element width and float mode for the whole tensor."""

    def __init__(self, a):
        self.floating = a.dtype.kind == "f"
        self.int_mode, self.sci_mode, self.width = True, False, 1
        flat = a.ravel()
        if not self.floating:
            self.width = max(len(str(v)) for v in flat.tolist())
            return
        vals = flat[np.isfinite(flat) & (flat != 0)].astype(np.float64)
        if vals.size == 0:
            return
        lo, hi = np.abs(vals).min(), np.abs(vals).max()
        self.int_mode = bool(np.all(vals == np.ceil(vals)))
        self.sci_mode = bool(hi / lo > 1000.0 or hi > 1.0e8 or lo < 1.0e-4)
        if self.sci_mode:
            widths = [len(f"{v:.{PRECISION}e}") for v in vals.tolist()]
        elif self.int_mode:  # room for the trailing "." of "1."
            widths = [len(f"{v:.0f}") + 1 for v in vals.tolist()]
        else:
            widths = [len(f"{v:.{PRECISION}f}") for v in vals.tolist()]
        self.width = max(widths)

    def format(self, v):
        if not self.floating:
            s = str(v)
        elif self.sci_mode:
            s = f"{v:.{PRECISION}e}"
        elif self.int_mode:
            s = f"{v:.0f}" + ("." if v == v and abs(v) != float("inf") else "")
        else:
            s = f"{v:.{PRECISION}f}"
        return s.rjust(self.width)


def _body(a, indent, summarize, fmt):
    """Bracketed data; ``indent`` is the column of the opening bracket."""
    if a.ndim == 0:
        return fmt.format(a.item())
    n = a.shape[0]
    cut = summarize and n > 2 * EDGEITEMS
    if a.ndim == 1:
        vals = a.tolist()
        if cut:
            items = [fmt.format(v) for v in vals[:EDGEITEMS]] + [" ..."]
            items += [fmt.format(v) for v in vals[-EDGEITEMS:]]
        else:
            items = [fmt.format(v) for v in vals]
        per_line = max(1, (LINEWIDTH - indent) // (fmt.width + 2))
        lines = [", ".join(items[i:i + per_line])
                 for i in range(0, len(items), per_line)]
        return "[" + (",\n" + " " * (indent + 1)).join(lines) + "]"
    rows = range(n)
    if cut:  # None marks the "..." row
        rows = [*range(EDGEITEMS), None, *range(n - EDGEITEMS, n)]
    parts = ["..." if i is None else _body(a[i], indent + 1, summarize, fmt)
             for i in rows]
    sep = "," + "\n" * (a.ndim - 1) + " " * (indent + 1)
    return "[" + sep.join(parts) + "]"


def _add_suffixes(text, suffixes, indent):
    # Mirrors PyTorch: its running line length over-counts by 2.
    line_len = len(text) - text.rfind("\n") + 1
    out = [text]
    for s in suffixes:
        if line_len + len(s) + 2 > LINEWIDTH:
            out.append(",\n" + " " * indent + s)
            line_len = indent + len(s)
        else:
            out.append(", " + s)
            line_len += len(s) + 2
    return "".join(out) + ")"
