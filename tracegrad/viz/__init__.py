"""Pictures of what tracegrad does: broadcasting explained, autograd and IR graphs drawn, kernels on a
roofline, and an HTML page that steps through a backward pass."""
from . import roofline
from .autograd_graph import record
from .dot import Drawing, GraphvizMissing
from .draw import draw, draw_ir
from .explain import explain_broadcast
from .stepper import backward_steps

__all__ = ["backward_steps", "Drawing", "GraphvizMissing", "draw", "draw_ir", "explain_broadcast", "record"]
