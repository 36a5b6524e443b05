"""A few SVG primitives and log-scale axes: tracegrad draws its charts itself (no plotting dependency)."""
import math
from xml.sax.saxutils import escape, quoteattr

PALETTE = ["#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#8c8c8c"]


def el(tag, text=None, **attrs):
    """One SVG element; attribute names use _ for - (stroke_width -> stroke-width)."""
    a = "".join(f" {k.rstrip('_').replace('_', '-')}={quoteattr(_fmt(v))}" for k, v in attrs.items() if v is not None)
    return f"<{tag}{a}/>" if text is None else f"<{tag}{a}>{escape(str(text))}</{tag}>"


def _fmt(v):
    return f"{v:.2f}".rstrip("0").rstrip(".") if isinstance(v, float) else str(v)


def document(width, height, body, title):
    return (f'<?xml version="1.0" encoding="UTF-8"?>\n'
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" font-family="Helvetica, Arial, sans-serif" font-size="12">\n'
            + el("title", title) + "\n" + el("rect", width=width, height=height, fill="#ffffff") + "\n"
            + "\n".join(body) + "\n</svg>\n")


class LogAxis:
    """Maps [lo, hi] (positive) onto [a, b] pixels on a log scale; ticks at powers of 10 (and 2, 5 when
    the range is short)."""

    def __init__(self, lo, hi, a, b):
        lo, hi = max(lo, 1e-300), max(hi, lo * 10)
        self.lo, self.hi = 10 ** math.floor(math.log10(lo)), 10 ** math.ceil(math.log10(hi))
        self.a, self.b = a, b

    def __call__(self, v):
        t = (math.log10(max(v, 1e-300)) - math.log10(self.lo)) / (math.log10(self.hi) - math.log10(self.lo))
        return self.a + t * (self.b - self.a)

    def ticks(self):
        decades = range(round(math.log10(self.lo)), round(math.log10(self.hi)) + 1)
        steps = (1, 2, 5) if len(decades) <= 4 else (1,)
        return [m * 10 ** d for d in decades for m in steps if self.lo <= m * 10 ** d <= self.hi]


def tick_label(v):
    return f"{v:g}" if 1e-3 <= v < 1e5 else f"{v:.0e}"
