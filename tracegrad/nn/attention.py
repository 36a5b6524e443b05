"""nn.MultiheadAttention, as PyTorch's: its parameters (in_proj_weight, in_proj_bias, out_proj),
their initialization, masks and returned weights."""
import math

from .. import dtypes as D
from ..composites.nn import attention, masked_scores
from ..tensor import zeros
from . import functional as F
from .modules import Linear, Module, _uniform


class MultiheadAttention(Module):
    """Attention over num_heads heads of embed_dim // num_heads features each (PyTorch's layout:
    in_proj_weight (3E, E) stacks the query, key and value projections, xavier-uniform; biases zero;
    out_proj a Linear). Separate q/k/v_proj_weight when kdim or vdim differ from embed_dim."""

    def __init__(self, embed_dim, num_heads, dropout=0.0, bias=True, add_bias_kv=False, add_zero_attn=False,
                 kdim=None, vdim=None, batch_first=False, device=None, dtype=None):
        super().__init__()
        if add_bias_kv or add_zero_attn:
            raise NotImplementedError("MultiheadAttention: add_bias_kv and add_zero_attn are not supported by "
                                      "tracegrad; append learned or zero key/value rows to the inputs instead")
        if embed_dim <= 0 or num_heads <= 0 or embed_dim % num_heads:
            raise AssertionError(f"embed_dim must be divisible by num_heads (got {embed_dim} and {num_heads})")
        self.embed_dim, self.num_heads, self.dropout, self.batch_first = embed_dim, num_heads, dropout, batch_first
        self.kdim, self.vdim = kdim or embed_dim, vdim or embed_dim
        self.head_dim = embed_dim // num_heads
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        e = embed_dim
        if self._qkv_same_embed_dim:
            self.in_proj_weight = _uniform((3 * e, e), math.sqrt(6.0 / (4 * e)), dtype, device)
        else:
            for name, d in (("q_proj_weight", e), ("k_proj_weight", self.kdim), ("v_proj_weight", self.vdim)):
                setattr(self, name, _uniform((e, d), math.sqrt(6.0 / (e + d)), dtype, device))
        self.in_proj_bias = zeros(3 * e, dtype=dtype or D.default_float, device=device,
                                  requires_grad=True) if bias else None
        self.out_proj = Linear(e, e, bias=bias, dtype=dtype, device=device)
        if bias:
            self.out_proj.bias = zeros(e, dtype=dtype or D.default_float, device=device, requires_grad=True)

    def _project(self, x, i, weight):
        b = None if self.in_proj_bias is None else self.in_proj_bias[i * self.embed_dim:(i + 1) * self.embed_dim]
        return F.linear(x, weight, b)

    def _weights(self):
        if self._qkv_same_embed_dim:
            w, e = self.in_proj_weight, self.embed_dim
            return w[:e], w[e:2 * e], w[2 * e:]
        return self.q_proj_weight, self.k_proj_weight, self.v_proj_weight

    def forward(self, query, key, value, key_padding_mask=None, need_weights=True, attn_mask=None,
                average_attn_weights=True, is_causal=False):
        """(output, weights): output like query; weights (N, L, S) averaged over the heads, (N, H, L, S)
        with average_attn_weights=False, None with need_weights=False. Masks: True (bool) leaves a key
        out, floats are added to the scores; attn_mask (L, S) or (N * H, L, S), key_padding_mask (N, S).
        A query with every key masked gives NaN with need_weights=True, zeros without, as PyTorch's."""
        if is_causal and attn_mask is None:
            raise RuntimeError("Need attn_mask if specifying the is_causal hint. You may use the Transformer module "
                               "method `generate_square_subsequent_mask` to create this mask.")
        batched = query.ndim == 3
        if not batched:
            query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
            key_padding_mask = None if key_padding_mask is None else key_padding_mask.unsqueeze(0)
        elif self.batch_first:
            query, key, value = query.transpose(0, 1), key.transpose(0, 1), value.transpose(0, 1)
        L, N, E = query.shape
        S, H, hd = key.shape[0], self.num_heads, self.head_dim
        wq, wk, wv = self._weights()
        # (L, N, E) -> (N, H, L, hd)
        q, k, v = (self._project(x, i, w).reshape(x.shape[0], N, H, hd).permute(1, 2, 0, 3)
                   for i, (x, w) in enumerate(((query, wq), (key, wk), (value, wv))))
        mask = _float_mask(attn_mask, query)
        if mask is not None and mask.ndim == 3:
            mask = mask.reshape(N, H, L, S)
        if key_padding_mask is not None:
            pad = _float_mask(key_padding_mask, query).reshape(N, 1, 1, S)
            mask = pad if mask is None else mask + pad
        # need_weights: PyTorch's path without the fused kernel, whose rows masked everywhere give NaN
        out, weights = attention(q, k, v, mask, self.dropout if self.training else 0.0, None, safe=not need_weights)
        out = self.out_proj(out.permute(2, 0, 1, 3).reshape(L, N, E))
        if batched and self.batch_first:
            out = out.transpose(0, 1)
        elif not batched:
            out = out.squeeze(1)
        if not need_weights:
            return out, None
        if average_attn_weights:
            weights = weights.mean(1)
        return out, weights if batched else weights.squeeze(0)


def _float_mask(mask, like):
    if mask is None:
        return None
    return masked_scores(mask) if mask.dtype is D.bool_ else mask.to(like.dtype)
