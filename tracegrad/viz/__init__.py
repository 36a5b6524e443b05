"""Pictures of what tracegrad does: broadcasting explained, autograd and IR graphs drawn, kernels on a
roofline, and an HTML page that steps through a backward pass."""
from .explain import explain_broadcast

__all__ = ["explain_broadcast"]
