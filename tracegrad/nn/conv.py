"""Convolution, pooling and resampling layers: Conv1d/2d/3d, ConvTranspose1d/2d, MaxPool1d/2d/3d,
AvgPool1d/2d/3d, AdaptiveAvgPool1d/2d/3d, Upsample, Unfold, Fold, as torch.nn's (arguments, init, repr)."""
import math

from ..convolution import _padding, conv, conv_transpose, ntuple
from . import functional as F
from .modules import Module, _uniform

_PADDING_MODES = ("zeros", "reflect", "replicate", "circular")


def _by_dims(base, name, dims):
    """The classes `{name}{d}d` of `base` for each number of spatial dimensions d (Conv1d, Conv2d, ...)."""
    return [type(f"{name}{d}d", (base,), {"_d": d, "__module__": __name__}) for d in dims]


class _ConvNd(Module):
    """Weight and bias with PyTorch's default init: kaiming_uniform_(a=sqrt(5)) on the weight, which is
    U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with fan_in = weight.shape[1] * prod(kernel_size), and the bias
    from the same range."""
    _d, _transposed = 2, False

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1,
                 bias=True, padding_mode="zeros", device=None, dtype=None, output_padding=0):
        super().__init__()
        d, name = self._d, type(self).__name__
        if groups <= 0:
            raise ValueError(f"{name}: groups must be a positive integer, got {groups}")
        if in_channels % groups:
            raise ValueError(f"{name}: in_channels ({in_channels}) must be divisible by groups ({groups})")
        if out_channels % groups:
            raise ValueError(f"{name}: out_channels ({out_channels}) must be divisible by groups ({groups})")
        if padding_mode not in _PADDING_MODES:
            raise ValueError(f"padding_mode must be one of {list(_PADDING_MODES)}, but got "
                             f"padding_mode='{padding_mode}'")
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.kernel_size = ntuple(kernel_size, d, f"{name}: kernel_size")
        self.stride, self.dilation = ntuple(stride, d, f"{name}: stride"), ntuple(dilation, d, f"{name}: dilation")
        self.padding = padding if isinstance(padding, str) else ntuple(padding, d, f"{name}: padding")
        self.output_padding = ntuple(output_padding, d, f"{name}: output_padding")
        self.padding_mode = padding_mode
        if isinstance(padding, str):
            _padding(padding, self.kernel_size, self.dilation, self.stride, d, name)    # PyTorch's checks, now
        if self._transposed and padding_mode != "zeros":
            raise ValueError(f'Only "zeros" padding mode is supported for {name}')
        shape = (in_channels, out_channels // groups) if self._transposed else (out_channels, in_channels // groups)
        fan_in = shape[1] * math.prod(self.kernel_size)
        bound = 1.0 / math.sqrt(fan_in) if fan_in else 0.0
        self.weight = _uniform(shape + self.kernel_size, bound, dtype, device)
        self.bias = _uniform((out_channels,), bound, dtype, device) if bias else None

    def forward(self, x):
        if self._transposed:
            return conv_transpose(x, self.weight, self.bias, self.stride, self.padding, self.output_padding,
                                  self.groups, self.dilation, self._d, f"conv_transpose{self._d}d")
        padding = self.padding
        if self.padding_mode != "zeros":
            pairs = _padding(padding, self.kernel_size, self.dilation, self.stride, self._d, type(self).__name__)
            x = F.pad(x, [p for pair in reversed(pairs) for p in pair], mode=self.padding_mode)
            padding = 0
        return conv(x, self.weight, self.bias, self.stride, padding, self.dilation, self.groups, self._d,
                    f"conv{self._d}d")

    def extra_repr(self):
        s = f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}"
        if self.padding != (0,) * self._d:
            s += f", padding={self.padding}"
        if self.dilation != (1,) * self._d:
            s += f", dilation={self.dilation}"
        if self.output_padding != (0,) * self._d:
            s += f", output_padding={self.output_padding}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        if self.padding_mode != "zeros":
            s += f", padding_mode={self.padding_mode}"
        return s





Conv1d, Conv2d, Conv3d = _by_dims(_ConvNd, "Conv", (1, 2, 3))


class _ConvTransposeNd(_ConvNd):
    _transposed = True

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, output_padding=0, groups=1,
                 bias=True, dilation=1, padding_mode="zeros", device=None, dtype=None):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias,
                         padding_mode, device, dtype, output_padding)




ConvTranspose1d, ConvTranspose2d = _by_dims(_ConvTransposeNd, "ConvTranspose", (1, 2))


class _MaxPoolNd(Module):
    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, return_indices=False, ceil_mode=False):
        super().__init__()
        self.kernel_size, self.stride = kernel_size, stride if stride is not None else kernel_size
        self.padding, self.dilation = padding, dilation
        self.return_indices, self.ceil_mode = return_indices, ceil_mode

    def forward(self, x):
        return getattr(F, f"max_pool{self._d}d")(x, self.kernel_size, self.stride, self.padding, self.dilation,
                                                  ceil_mode=self.ceil_mode, return_indices=self.return_indices)

    def extra_repr(self):
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
                f"dilation={self.dilation}, ceil_mode={self.ceil_mode}")





MaxPool1d, MaxPool2d, MaxPool3d = _by_dims(_MaxPoolNd, "MaxPool", (1, 2, 3))


class _AvgPoolNd(Module):
    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
                 divisor_override=None):
        super().__init__()
        self.kernel_size, self.stride = kernel_size, stride if stride is not None else kernel_size
        self.padding, self.ceil_mode = padding, ceil_mode
        self.count_include_pad, self.divisor_override = count_include_pad, divisor_override

    def forward(self, x):
        extra = () if self._d == 1 else (self.divisor_override,)
        return getattr(F, f"avg_pool{self._d}d")(x, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                                                  self.count_include_pad, *extra)

    def extra_repr(self):
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AvgPool1d(_AvgPoolNd):
    _d = 1

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
        super().__init__(kernel_size, stride, padding, ceil_mode, count_include_pad)


AvgPool2d, AvgPool3d = _by_dims(_AvgPoolNd, "AvgPool", (2, 3))


class _AdaptiveAvgPoolNd(Module):
    def __init__(self, output_size):
        super().__init__()
        self.output_size = output_size

    def forward(self, x):
        return getattr(F, f"adaptive_avg_pool{self._d}d")(x, self.output_size)

    def extra_repr(self):
        return f"output_size={self.output_size}"





AdaptiveAvgPool1d, AdaptiveAvgPool2d, AdaptiveAvgPool3d = _by_dims(_AdaptiveAvgPoolNd, "AdaptiveAvgPool", (1, 2, 3))


class Upsample(Module):
    def __init__(self, size=None, scale_factor=None, mode="nearest", align_corners=None, recompute_scale_factor=None):
        super().__init__()
        self.size, self.scale_factor, self.mode = size, scale_factor, mode
        self.align_corners, self.recompute_scale_factor = align_corners, recompute_scale_factor

    def forward(self, x):
        return F.interpolate(x, self.size, self.scale_factor, self.mode, self.align_corners,
                             self.recompute_scale_factor)

    def extra_repr(self):
        what = f"scale_factor={float(self.scale_factor)}" if self.scale_factor is not None and \
            not isinstance(self.scale_factor, (tuple, list)) else \
            f"scale_factor={self.scale_factor}" if self.scale_factor is not None else f"size={self.size}"
        return f"{what}, mode='{self.mode}'"


class Unfold(Module):
    def __init__(self, kernel_size, dilation=1, padding=0, stride=1):
        super().__init__()
        self.kernel_size, self.dilation, self.padding, self.stride = kernel_size, dilation, padding, stride

    def forward(self, x):
        return F.unfold(x, self.kernel_size, self.dilation, self.padding, self.stride)

    def extra_repr(self):
        return f"kernel_size={self.kernel_size}, dilation={self.dilation}, padding={self.padding}, stride={self.stride}"


class Fold(Unfold):
    def __init__(self, output_size, kernel_size, dilation=1, padding=0, stride=1):
        super().__init__(kernel_size, dilation, padding, stride)
        self.output_size = output_size

    def forward(self, x):
        return F.fold(x, self.output_size, self.kernel_size, self.dilation, self.padding, self.stride)

    def extra_repr(self):
        return f"output_size={self.output_size}, " + super().extra_repr()
