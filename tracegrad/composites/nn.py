"""one_hot and scaled_dot_product_attention, as torch.nn.functional's (composites: attention is
two matrix products around a softmax that compiled code fuses with its scale and mask)."""
import math

import numpy as np

from .. import dtypes as D
from ..tensor.base import TraceError
from ..tensor.factories import arange, ones, rand
from ..tensor.functions import where
from .reductions import softmax


def one_hot(x, num_classes=-1):
    """int64 of x's shape + (num_classes,): 1 at each value's class. num_classes=-1 takes the largest
    value + 1, which needs the values: inside tg.compile pass num_classes."""
    if x.dtype not in (D.int64, D.int32, D.int16, D.int8, D.uint8):
        raise RuntimeError("one_hot is only applicable to index tensor of type LongTensor.")
    try:
        arr = np.asarray(x._host("one_hot"))
    except TraceError as e:
        if num_classes < 0:
            raise TraceError(f"one_hot(num_classes=-1) reads the largest value to size its result; inside a "
                             f"compiled function pass num_classes= ({e})") from None
        arr = None
    if arr is not None:
        if arr.size and arr.min() < 0:
            raise RuntimeError("Class values must be non-negative.")
        if num_classes < 0:
            num_classes = int(arr.max()) + 1 if arr.size else 0
        elif arr.size and arr.max() >= num_classes:
            raise RuntimeError("Class values must be smaller than num_classes.")
    classes = arange(num_classes, device=x.device).reshape((1,) * x.ndim + (num_classes,))   # equal ranks
    return (x.to(D.int64).unsqueeze(-1) == classes).to(D.int64)


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                                 enable_gqa=False):
    """softmax(query @ key^T * scale + mask) @ value over the last two axes (batch axes broadcast).
    attn_mask: bool (True takes part) or float (added); is_causal: query i sees keys j <= i; a row
    with every key masked gives zeros, as PyTorch's; dropout_p drops attention weights (always,
    as the functional form does); scale defaults to 1/sqrt(query.size(-1)); enable_gqa lets key
    and value have fewer heads (axis -3), each serving a group of query heads."""
    if is_causal and attn_mask is not None:
        raise RuntimeError("_scaled_dot_product_attention: Explicit attn_mask should not be set when is_causal=True")
    if enable_gqa and key.ndim >= 3 and key.shape[-3] != query.shape[-3]:
        group = query.shape[-3] // key.shape[-3]
        key, value = key.repeat_interleave(group, -3), value.repeat_interleave(group, -3)
    if is_causal:
        attn_mask = ones(query.shape[-2], key.shape[-2], dtype=D.bool_, device=query.device).tril()
    if attn_mask is not None and attn_mask.dtype is D.bool_:
        attn_mask = masked_scores(~attn_mask)
    return attention(query, key, value, attn_mask, dropout_p, scale)[0]


def masked_scores(masked):
    """A float mask to add to scores from a bool one that is True where a key is left out."""
    return where(masked, float("-inf"), 0.0)


def attention(query, key, value, mask, dropout_p, scale, safe=True):
    """(softmax(query @ key^T * scale + mask) @ value, the weights); mask a float tensor or None.
    safe: a row with every key masked gives zeros (else NaN, as PyTorch's need_weights=True path)."""
    s = 1.0 / math.sqrt(query.shape[-1]) if scale is None else float(scale)
    scores = (query @ key.transpose(-2, -1)) * s
    if mask is not None:
        scores = scores + mask.to(scores.dtype)
    if safe:     # rows masked everywhere: softmax over zeros instead of -inf (finite gradients), then zeroed
        empty = scores.amax(-1, keepdims=True) == float("-inf")
        weights = where(empty, 0.0, softmax(where(empty, 0.0, scores), -1))
    else:
        weights = softmax(scores, -1)
    if dropout_p >= 1.0:
        weights = weights * 0.0
    elif dropout_p > 0.0:
        keep = rand(weights.shape, dtype=weights.dtype, device=weights.device) >= dropout_p
        weights = where(keep, weights * (1.0 / (1.0 - dropout_p)), 0.0)
    return weights @ value, weights
