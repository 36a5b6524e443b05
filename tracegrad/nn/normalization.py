"""Normalization layers with PyTorch's parameters and running statistics: BatchNorm1d/2d/3d,
InstanceNorm1d/2d, GroupNorm; and channel dropout (Dropout1d, Dropout2d).

running_mean, running_var and num_batches_tracked are buffers (in state_dict(), moved by .to()): a
compiled step captures them with the module and writes their in-place updates back."""
from .. import dtypes as D
from ..autograd import no_grad
from ..tensor import ones, tensor, zeros
from . import norm_functions as NF
from .layers import Dropout
from .modules import Module


class _NormBase(Module):
    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True, dtype=None,
                 device=None, *, bias=True):
        super().__init__()
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        kw = dict(dtype=dtype if dtype is not None else D.default_float, device=device)
        self.weight = ones(num_features, requires_grad=True, **kw) if affine else None
        self.bias = zeros(num_features, requires_grad=True, **kw) if affine and bias else None
        self.register_buffer("running_mean", zeros(num_features, **kw) if track_running_stats else None)
        self.register_buffer("running_var", ones(num_features, **kw) if track_running_stats else None)
        self.register_buffer("num_batches_tracked",
                             tensor(0, dtype=D.int64, device=device) if track_running_stats else None)

    def reset_running_stats(self):
        if self.track_running_stats:
            with no_grad():
                self.running_mean.zero_()
                self.running_var.fill_(1.0)
                self.num_batches_tracked.zero_()

    def reset_parameters(self):
        self.reset_running_stats()
        with no_grad():
            for p, value in ((self.weight, 1.0), (self.bias, 0.0)):
                if p is not None:
                    p.fill_(value)

    def _check_input_dim(self, x):
        if x.ndim not in self._dims:
            raise ValueError(f"expected {' or '.join(f'{d}D' for d in self._dims)} input (got {x.ndim}D input)")

    def extra_repr(self):
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.affine}, "
                f"bias={self.bias is not None}, track_running_stats={self.track_running_stats}")


class _BatchNorm(_NormBase):
    def forward(self, x):
        self._check_input_dim(x)
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats:
            with no_grad():
                self.num_batches_tracked.add_(1)
            if self.momentum is None:               # cumulative moving average
                factor = 1.0 / self.num_batches_tracked.to(self.running_mean.dtype)
        use_batch = self.training or self.running_mean is None
        keep = not self.training or self.track_running_stats
        return NF.batch_norm(x, self.running_mean if keep else None, self.running_var if keep else None,
                             self.weight, self.bias, use_batch, factor, self.eps)


class BatchNorm1d(_BatchNorm):
    """Batch normalization over (N, C) or (N, C, L)."""
    _dims = (2, 3)


class BatchNorm2d(_BatchNorm):
    """Batch normalization over (N, C, H, W)."""
    _dims = (4,)


class BatchNorm3d(_BatchNorm):
    """Batch normalization over (N, C, D, H, W)."""
    _dims = (5,)


class _InstanceNorm(_NormBase):
    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=False, track_running_stats=False, dtype=None,
                 device=None, *, bias=True):
        super().__init__(num_features, eps, momentum, affine, track_running_stats, dtype, device, bias=bias)

    def forward(self, x):
        self._check_input_dim(x)
        unbatched = x.ndim == self._dims[0]
        y = NF.instance_norm(x.unsqueeze(0) if unbatched else x, self.running_mean, self.running_var, self.weight,
                             self.bias, self.training or not self.track_running_stats,
                             0.0 if self.momentum is None else self.momentum, self.eps)
        return y.squeeze(0) if unbatched else y


class InstanceNorm1d(_InstanceNorm):
    """Instance normalization over (N, C, L) or unbatched (C, L)."""
    _dims = (2, 3)


class InstanceNorm2d(_InstanceNorm):
    """Instance normalization over (N, C, H, W) or unbatched (C, H, W)."""
    _dims = (3, 4)


class GroupNorm(Module):
    """Normalizes groups of channels per sample; a per-channel affine (weight 1, bias 0 at first)."""

    def __init__(self, num_groups, num_channels, eps=1e-5, affine=True, dtype=None, device=None, *, bias=True):
        super().__init__()
        if num_channels % num_groups:
            raise ValueError("num_channels must be divisible by num_groups")
        self.num_groups, self.num_channels, self.eps, self.affine = num_groups, num_channels, eps, affine
        kw = dict(dtype=dtype if dtype is not None else D.default_float, device=device, requires_grad=True)
        self.weight = ones(num_channels, **kw) if affine else None
        self.bias = zeros(num_channels, **kw) if affine and bias else None

    def forward(self, x):
        return NF.group_norm(x, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}, bias={self.bias is not None}"


class Dropout1d(Dropout):
    """Zeroes whole channels of (N, C, L) in training mode."""

    def forward(self, x):
        return NF.dropout1d(x, self.p, self.training)


class Dropout2d(Dropout):
    """Zeroes whole channels of (N, C, H, W) in training mode."""

    def forward(self, x):
        return NF.dropout2d(x, self.p, self.training)
