"""Gradient clipping, in place on the parameters' .grad, with tensor operations only, so it runs
eagerly and inside a compiled training step alike."""
import math

from ...autograd import no_grad
from ...tensor import Tensor, stack, tensor


def _grads(parameters):
    params = [parameters] if isinstance(parameters, Tensor) else list(parameters)
    return [p.grad for p in params if p.grad is not None]


def _norm(t, norm_type):
    a = t.abs()
    if norm_type == math.inf:
        return a.max()
    if norm_type == -math.inf:
        return a.min()
    if norm_type == 2:
        return (a * a).sum().sqrt()
    if norm_type == 1:
        return a.sum()
    return (a ** norm_type).sum() ** (1.0 / norm_type)


@no_grad()
def get_total_norm(tensors, norm_type=2.0, error_if_nonfinite=False, foreach=None):
    """The norm of the norms of `tensors` (the norm of all their elements as one vector)."""
    tensors = [tensors] if isinstance(tensors, Tensor) else [t for t in tensors if t is not None]
    norm_type = float(norm_type)
    if not tensors:
        return tensor(0.0)
    dtype = tensors[0].dtype
    total = _norm(stack([_norm(t, norm_type).to(dtype) for t in tensors]), norm_type)
    if error_if_nonfinite and not bool(total.isfinite()):
        raise RuntimeError(f"The total norm of order {norm_type} for gradients from `parameters` is non-finite, so "
                           f"it cannot be clipped. To disable this error and scale the gradients by the non-finite "
                           f"norm anyway, set `error_if_nonfinite=False`")
    return total


@no_grad()
def clip_grad_norm_(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False, foreach=None):
    """Scale the gradients so that their total norm is at most max_norm (by
    min(1, max_norm / (norm + 1e-6)), as PyTorch); returns the total norm before clipping."""
    grads = _grads(parameters)
    total = get_total_norm(grads, norm_type, error_if_nonfinite)
    if not grads:
        return total
    coef = (float(max_norm) / (total + 1e-6)).clamp(max=1.0)
    for g in grads:
        g.mul_(coef.to(g.dtype))
    return total


@no_grad()
def clip_grad_value_(parameters, clip_value, foreach=None):
    """Clamp every gradient element into [-clip_value, clip_value]."""
    clip_value = float(clip_value)
    for g in _grads(parameters):
        g.clamp_(min=-clip_value, max=clip_value)
