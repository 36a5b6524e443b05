"""Random fills and draws: uniform_, normal_, bernoulli (and bernoulli_), multinomial, from
tracegrad's generator (tg.manual_seed). Each is built on the `rand`/`randn` primitives, so it runs
in compiled code too (a fresh draw at every call)."""
import numpy as np

from .. import dtypes as D
from ..tensor.base import TraceError
from ..tensor.factories import rand, randn
from ..tensor.functions import where
from .sort import argsort


def _float(x, name):
    if not x.dtype.is_floating_point:
        raise RuntimeError(f"{name} not implemented for '{x.dtype}': it fills floating-point tensors")


def uniform_(x, a=0.0, b=1.0, generator=None):
    """Fill x with draws from U[a, b)."""
    _float(x, "uniform_")
    return x.copy_(rand(x.shape, dtype=x.dtype, device=x.device) * (b - a) + a)


def normal_(x, mean=0.0, std=1.0, generator=None):
    """Fill x with draws from N(mean, std**2)."""
    _float(x, "normal_")
    return x.copy_(randn(x.shape, dtype=x.dtype, device=x.device) * std + mean)


def bernoulli(x, p=None, generator=None):
    """1 with probability x (or p), else 0, in x's dtype. Not differentiable."""
    _float(x, "bernoulli")
    prob = x.detach() if p is None else p
    u = rand(x.shape, dtype=x.dtype, device=x.device)
    return (u < prob).to(x.dtype)


def bernoulli_(x, p=0.5, generator=None):
    return x.copy_(bernoulli(x, p))


def _check_weights(w, num_samples, replacement):
    """PyTorch's errors for invalid weights, where the values are known (eager)."""
    try:
        arr = np.asarray(w._host("multinomial"), np.float64)
    except TraceError:
        return                              # inside tg.compile: the weights are not known yet
    if not np.isfinite(arr).all() or (arr < 0).any():
        raise RuntimeError("probability tensor contains either `inf`, `nan` or element < 0")
    nonzero = (arr > 0).sum(-1)
    if (nonzero == 0).any():
        raise RuntimeError("invalid multinomial distribution (sum of probabilities <= 0)")
    if not replacement and (nonzero < num_samples).any():
        raise RuntimeError("invalid multinomial distribution (with replacement=False, not enough non-negative "
                           "category to sample)")


def multinomial(w, num_samples, replacement=False, generator=None):
    """num_samples category indices per row of the non-negative weights w (1-D or 2-D), int64.
    With replacement: each draw inverts the cumulative weights at a uniform point; without: the
    num_samples largest of log(w) + Gumbel noise (a draw without replacement in proportion to w)."""
    if w.ndim not in (1, 2):
        raise RuntimeError(f"prob_dist must be 1 or 2 dim, got shape {tuple(w.shape)}")
    n = w.shape[-1]
    if not replacement and num_samples > n:
        raise RuntimeError("cannot sample n_sample > prob_dist.size(-1) samples without replacement")
    _check_weights(w, num_samples, replacement)
    p = w.detach().to(D.float64)
    rows = p.shape[:-1]
    if replacement:
        cdf = p.cumsum(-1)
        u = rand(*rows, num_samples, 1, dtype=D.float64, device=w.device) * cdf[..., -1:].unsqueeze(-2)
        # the drawn category is the number of cumulative weights at or below the point
        idx = (cdf.unsqueeze(-2) <= u).to(D.int64).sum(-1)
        return idx.clamp(max=n - 1)
    u = rand(*rows, n, dtype=D.float64, device=w.device)
    keys = where(p > 0, p.log() - (-u.log()).log(), float("-inf"))
    return argsort(keys, -1, descending=True).narrow(-1, 0, num_samples)
