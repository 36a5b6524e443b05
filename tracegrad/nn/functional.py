"""tg.nn.functional: PyTorch's functional forms; the composites themselves live in tracegrad.composites."""
from ..composites import (binary_cross_entropy, binary_cross_entropy_with_logits, cosine_similarity,  # noqa: F401
                          cross_entropy, elu, embedding, erf, gelu, huber_loss, kl_div, l1_loss, layer_norm,
                          leaky_relu, legacy_reduction, log_softmax, mse_loss, nll_loss, normalize, silu,
                          smooth_l1_loss, softmax, softplus)
from ..composites.nn import one_hot, scaled_dot_product_attention  # noqa: F401
from ..convolution import conv1d, conv2d, conv3d, conv_transpose1d, conv_transpose2d, fold, pad, unfold  # noqa: F401
from ..pooling import (adaptive_avg_pool1d, adaptive_avg_pool2d, adaptive_avg_pool3d, avg_pool1d,  # noqa: F401
                       avg_pool2d, avg_pool3d, max_pool1d, max_pool2d, max_pool3d)
from ..resample import interpolate  # noqa: F401
from ..tensor import _named
from .norm_functions import batch_norm, dropout1d, dropout2d, group_norm, instance_norm  # noqa: F401
from .norm_functions import masked_dropout as _masked_dropout


def relu(x):
    return x.relu()


def sigmoid(x):
    return x.sigmoid()


def tanh(x):
    return x.tanh()


def linear(x, weight, bias=None):
    y = x @ weight.mT
    if bias is None:
        return y
    return _named(y + bias, "AddmmBackward") if x.ndim == 2 else y + bias


def dropout(x, p=0.5, training=True):
    return _masked_dropout(x, p, training, x.shape)
