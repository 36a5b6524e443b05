"""Composite operations, built from primitives (their gradients and fusion come for free), one module
per family: reductions.py (var, std, norm, cumsum, logsumexp, softmax, log_softmax, round, isnan, ...),
views.py (split, chunk, unbind, narrow, flip, roll, repeat, index_select, tril, triu, masked_fill),
activations.py (gelu, erf, layer_norm, silu, leaky_relu, elu, softplus, normalize, cosine_similarity,
log1p, expm1), losses.py (mse, l1, nll, cross_entropy, binary cross-entropy, smooth L1, Huber, KL),
gather.py (embedding, gather, take_along_dim), products.py (einsum, outer, addmm, lerp); and, imported
by module, sort.py (sort, topk, kthvalue, nonzero, unique), linalg.py (cross, diagonal, trace, frac),
random.py (uniform_, normal_, bernoulli, multinomial), nn.py (one_hot, scaled_dot_product_attention).
This package re-exports the families' names (`composites.softmax`).

Tensor methods (`x.softmax(1)`) and tg.nn.functional call these. Each labels its result with the
name PyTorch gives the whole operation's backward node (`grad_fn=<SoftmaxBackward>`)."""
from .reductions import (cumsum, extreme_along, isfinite, isinf, isnan, log_softmax, logsumexp, norm,  # noqa: F401
                         round_, softmax, std, var)
from .views import (chunk, flip, index_select, masked_fill, narrow, repeat, repeat_interleave, roll, split,  # noqa: F401
                    tril, triu, unbind)
from .activations import (cosine_similarity, elu, erf, expm1, gelu, layer_norm, leaky_relu, log1p,  # noqa: F401
                          normalize, silu, softplus)
from .losses import (binary_cross_entropy, binary_cross_entropy_with_logits, cross_entropy, huber_loss,  # noqa: F401
                     kl_div, l1_loss, legacy_reduction, mse_loss, nll_loss, smooth_l1_loss)
from .gather import embedding, gather, take_along_dim  # noqa: F401
from .products import addmm, einsum, lerp, outer  # noqa: F401
