"""The reverse-mode transform: the backward graph of a traced forward graph.

It runs the autograd engine (the same VJP rules as eager backward) on the forward trace's
stand-ins under a second tracer: every primitive the engine applies is recorded into the backward
graph, and every forward value it reads becomes a *saved* value — an extra output of the forward
graph, an input of the backward graph.
"""
from ...autograd import run_backward
from ...modes import interpreting
from ...trace import Traced, Tracer
from ..graph import Graph


class Backward:
    """graph: inputs are the cotangents, the saved values, then tensors it reads directly (in
    `reads`); outputs are the gradients of `targets` (Lifted entries of the forward tracer).
    diff_outputs: which tensor outputs of the forward get a cotangent. saved: forward Values."""

    def __init__(self, graph, diff_outputs, targets, reads, saved):
        self.graph, self.diff_outputs, self.targets, self.reads, self.saved = \
            graph, diff_outputs, targets, reads, saved


def reverse_mode(tracer, outputs, name):
    """The Backward of the stand-ins `outputs` [(index among tensor outputs, stand-in)] with respect
    to every lifted input that requires grad and that they depend on, or None when nothing needs a
    gradient."""
    diff = [(i, st) for i, st in outputs if st.requires_grad and st._dtype.is_floating_point]
    targets = [e for e in tracer.order if e.standin.requires_grad and e.source[0] in ("arg", "captured")]
    if not diff or not targets:
        return None
    bgraph = Graph(name + "_backward")
    btr = Tracer(bgraph, parent=tracer)
    cots = [Traced.of(st._shape, st._dtype, st._device, bgraph.add_input(f"g{j}", st._shape, st._dtype))
            for j, (_, st) in enumerate(diff)]
    with interpreting(btr):
        grads = run_backward([st for _, st in diff], cots, False, False,
                             inputs=[e.standin for e in targets], allow_unused=True)
        # an input the outputs do not depend on gets no gradient (None, as eagerly): no output
        used = [(e, g) for e, g in zip(targets, grads) if g is not None]
        outs = [btr.lift(g)._ir for _, g in used]
    if not used:
        return None
    targets = [e for e, _ in used]
    bgraph.outputs = outs
    # inputs in the order the compiled node passes them: cotangents, saved values, constants
    bgraph.inputs = ([c._ir for c in cots] + [btr._saved[id(v)]._ir for v in btr.saved]
                     + [e.value for e in btr.order])
    return Backward(bgraph, [i for i, _ in diff], targets, list(btr.order), list(btr.saved))
