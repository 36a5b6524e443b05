"""Which float divisions have a divisor broadcast along the axis their dividend walks in memory (a
softmax's row sum, a layer norm's std, a batch norm's per-channel std, a scalar or 0-d divisor such as
a mean's count: one divisor per run of contiguous elements). Fusion lowers those as BROADCAST_DIV,
which a target may compute as a multiply by the divisor's reciprocal, once per run (the CPU's
backends/cpu/scalar.py: within two roundings of the quotient, as PyTorch's softmax and layer norm).
Decided by the expression's shapes and its dividend's strides, so every kernel computing the same node
rounds it alike."""
from .. import scalar as S
from .kernels import known, loads

BROADCAST_DIV = S.a / S.b


def broadcast_divisor(out_shape, divisor_shape, dividend):
    """Whether a divisor of `divisor_shape` is broadcast (lacks the axis or has it of size 1) along the
    memory-innermost axis of a division's result of `out_shape`: the one where a load of the dividend
    tree has stride 1 (none: the last axis longer than 1). Along another axis (softmax over dim 0,
    softmax(x.T, 1)) the divisor varies with the walk, and a reciprocal per element only adds work."""
    long = [d for d, n in enumerate(out_shape) if not known(n, 1)]
    if not long:
        return False
    unit = [d for ld in loads(dividend) for d in long if known(ld.strides[d], 1)]
    inner = unit[0] if unit else long[-1]
    lead = len(out_shape) - len(divisor_shape)
    return inner < lead or known(divisor_shape[inner - lead], 1)
