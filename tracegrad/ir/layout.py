"""Facts about memory order (no decisions): which axis an operand walks fastest, and its axes by stride.
The planners (ir/passes/schedule.py) decide from these."""


def unit_axis(shape, strides):
    """The axis an operand walks fastest: the smallest nonzero |stride| among axes longer than 1."""
    best = None
    for d, (n, s) in enumerate(zip(shape, strides)):
        if n > 1 and s and (best is None or abs(s) <= abs(strides[best])):
            best = d
    return best


def memory_order(shape, strides):
    """Axes by |stride| of one operand, largest first (ties and broadcast axes keep logical order)."""
    return sorted(range(len(shape)), key=lambda d: (-abs(strides[d]) if shape[d] > 1 else 0, d))
