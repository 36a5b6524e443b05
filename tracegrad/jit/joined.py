"""A call that computes its gradient with its forward, chosen per entry from observed use.

`loss = f(x, w); loss.backward()` runs two programs, and the backward reads the inputs again: for a
memory-bound function (a layer norm's loss over a large x) that is the inputs moved twice. When an
entry's calls are regularly followed by `backward()` of their result, the call instead runs the
forward joined with the backward (ir/passes/join.py: the gradients of the implicit unit cotangent,
fused with the forward so the inputs are read once) and keeps the gradients on the autograd node;
`backward()` then only hands them over (callgen.straight_backward).

The choice follows what the entry's calls see, so a loop that never calls backward() (an evaluation
without no_grad) never pays for gradients: an entry switches to the joined call after JOIN_AFTER
calls in a row were each followed by `backward()` through the generated backward before the next
call, and back at once after a call that was not. A wrong guess costs one call the gradients' work;
it is never a wrong result, since the gradients are those of the node's own saved state (backward()
still checks the saved values' versions first), and every other use of the node (an explicit
gradient, retain_graph, autograd.grad, non-leaf inputs) runs the backward program as before.

Only entries where it pays: a one-element result through the generated call and backward, on the
LLVM target, whose forward moves at least JOIN_MIN_BYTES, and whose joined program moves at least
pipeline.JOIN_GAIN less than the two apart (built on the first switch; if it does not pay, the
entry's calls go back to the plain call for good). Results and gradients are the same computation
as apart; float sums may round differently.
"""

from ..autograd import _Mode
from .callgen import sized_run, straight_call
from .index_checks import checking
from .pipeline import forward_with_gradient

JOIN_AFTER = 2
JOIN_MIN_BYTES = 1 << 20


def joinable(entry):
    """Whether `entry` may get a joined call (see the module docstring)."""
    return (entry.backward is not None and entry.backend == "llvm" and entry.call_source is not None
            and sum(k.bytes_moved() for k in entry.programs[0].kernels) >= JOIN_MIN_BYTES)


def choosing_call(entry, plain):
    """entry.call: `plain` (the generated call), or the joined one once the calls' use asks for it."""
    entry.backed, entry.streak, entry.joined = False, 0, None

    def call(leaves):
        followed, entry.backed = entry.backed, False
        entry.streak = streak = entry.streak + 1 if followed else 0
        if streak >= JOIN_AFTER and _Mode.grad:
            joined = entry.joined
            if joined is None:
                joined = entry.joined = _build(entry)
                if not joined:
                    entry.call = plain            # never again: calls skip this choice
            if joined:
                return joined(leaves)
        return plain(leaves)
    return call


def _build(entry):
    """The joined call, or False where joining does not pay (a race builds it twice, harmlessly)."""
    if entry.shared is None:
        got = forward_with_gradient(entry)
    else:                   # a symbolic trace's entries share one (its program takes every size)
        if "joined" not in entry.shared:
            entry.shared["joined"] = forward_with_gradient(entry)
        got = entry.shared["joined"]
    if got is None:
        return False
    entry.joined_program, run, keeps_saved = got
    if entry.shared is not None:        # a symbolic trace's program: this entry's sizes at each call
        run = sized_run(run, entry.sizes)
    call, entry.joined_source = straight_call(entry, checking(run, entry.traced, entry.sizes), keeps_saved)
    return call
