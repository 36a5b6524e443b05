"""Composite operations, built from primitives (their gradients and fusion come for free):
softmax, log_softmax, logsumexp, var, std, gelu, layer_norm, the losses (mse, l1, nll,
cross_entropy, binary cross-entropy from probabilities and from logits, smooth L1, Huber, KL) and
embedding; silu, leaky_relu, elu, softplus, normalize, cosine_similarity; flip, roll, repeat,
index_select, tril, triu; einsum; log1p and expm1 (accurate for small arguments).

More composites live beside this module: composites_sort.py (sort, topk, kthvalue, nonzero, unique),
composites_linalg.py (cross, diagonal, trace, frac), composites_random.py (uniform_, normal_,
bernoulli, multinomial), composites_nn.py (one_hot, scaled_dot_product_attention).

Tensor methods (`x.softmax(1)`) and tg.nn.functional call these. Each labels its result with the
name PyTorch gives the whole operation's backward node (`grad_fn=<SoftmaxBackward>`)."""
import functools
import math

from . import dtypes as D
from . import return_types
from .broadcast import broadcast_shapes
from .ops import _norm_axis, _reduce_shape, bind, normalize_axes
from .symint import as_size, is_size
from .tensor.base import TensorBase, _ArgError
from .tensor.dispatch import _axis_kw, _float_operand, _keep_kw, _named, in_float32
from .tensor.factories import arange, ones, zeros
from .tensor.functions import cat, where
from .tensor.indexing import _getitem


# ---------------------------------------------------------------- reductions

def _float32_for_half(f):
    """f computed by PyTorch's rule for float16: in float32, the result stored in float16."""
    @functools.wraps(f)
    def wrapped(x, *args, **kwargs):
        return in_float32(f, x, *args, **kwargs) if isinstance(x, TensorBase) else f(x, *args, **kwargs)
    return wrapped


@_float32_for_half
def var(x, axis=None, *, keepdims=False, unbiased=None, correction=None, dim=None, keepdim=None):
    """PyTorch's variance: divides by N - correction; correction is 1 unless `unbiased=False` or
    `correction=` says otherwise (N - correction <= 0 gives inf or nan, as PyTorch). The mean is
    corrected by the mean of the deviations from it (two-pass corrected mean): whatever order a sum
    adds in, data that is constant along the axes has a variance of exactly 0, as PyTorch's Welford
    variance gives (NumPy's x.var() of np.full(100, 0.1) is 7.7e-34), so std's gradient there is
    NaN in eager and compiled code alike."""
    if correction is not None and unbiased is not None:
        raise _ArgError("var/std: give either unbiased= or correction=, not both")
    ddof = correction if correction is not None else 1 if unbiased is None or unbiased else 0
    x = _float_operand(x)
    axis = normalize_axes(_axis_kw(axis, dim), x.ndim)
    n = math.prod(x._shape[a] for a in axis)
    m = x.mean(axis, keepdims=True)
    d = x - (m + (x - m).mean(axis, keepdims=True))
    return _named((d * d)._reduce("sum", axis, _keep_kw(keepdims, keepdim)) / max(n - ddof, 0),   # B: no pin
                  "VarBackward")


def std(x, axis=None, *, keepdims=False, unbiased=None, correction=None, dim=None, keepdim=None):
    return _named(var(x, axis, keepdims=keepdims, unbiased=unbiased, correction=correction, dim=dim,
                      keepdim=keepdim).sqrt(), "StdBackward")


def extreme_along(x, axis, keepdims, kind):
    """x.max(dim) / x.min(dim): the named tuple (values, indices) of PyTorch; the first extreme
    element of each row is selected (NaN counts as the extreme) and gets the whole gradient."""
    if isinstance(axis, (tuple, list)):
        raise TypeError(f"{kind}(): dim must be an int, got {axis!r}; use {kind}() for all dims or a{kind}(dim) "
                        f"for a tuple of dims")
    a = _norm_axis(axis, x.ndim)
    if x.ndim == 0:
        return getattr(return_types, kind)(_named(x * 1, f"{kind.capitalize()}Backward"),
                                           zeros((), dtype=D.int64, device=x.device))
    if x._shape[a] == 0:
        raise IndexError(f"{kind}(): Expected reduction dim {a} to have non-zero size (shape {x._shape})")
    idx = (x.argmax if kind == "max" else x.argmin)(a, keepdims=True)
    index = [idx if d == a else arange(n, device=x.device).reshape(tuple(n if k == d else 1 for k in range(x.ndim)))
             for d, n in enumerate(x._shape)]
    values = x[tuple(index)]
    if not keepdims:
        values, idx = values.squeeze(a), idx.squeeze(a)
    return getattr(return_types, kind)(_named(values, f"{kind.capitalize()}Backward"), idx)


def norm(x, p="fro", dim=None, keepdim=False, dtype=None):
    """Vector p-norm over `dim` (all elements when None): "fro" and 2, 1, inf, -inf, 0, any p > 0.
    The gradient at a zero norm is 0, as PyTorch's (not 0/0)."""
    x = x if dtype is None else x.to(dtype)
    return in_float32(_norm, x, p, dim, keepdim)


def _norm(x, p, dim, keepdim):
    if not x.dtype.is_floating_point:
        raise RuntimeError(f"linalg.vector_norm: Expected a floating point tensor as input. Got {x.dtype}")
    axis = normalize_axes(dim, x.ndim)
    if p == "nuc":
        raise NotImplementedError("norm(p='nuc') needs singular values, which tracegrad does not compute")
    if p == "fro" or p == 2:
        s = (x * x)._reduce("sum", axis, keepdim)
        return _named(where(s == 0, 0.0, where(s == 0, 1.0, s).sqrt()), "LinalgVectorNormBackward")
    if not isinstance(p, (int, float)) or isinstance(p, bool):
        raise ValueError(f"norm: p must be a number, 'fro' or 'nuc', got {p!r}")
    a = x.abs()
    if p == math.inf:
        return _named(a._reduce("max", axis, keepdim), "LinalgVectorNormBackward")
    if p == -math.inf:
        return _named(a._reduce("min", axis, keepdim), "LinalgVectorNormBackward")
    if p == 0:
        return (x != 0).to(x.dtype)._reduce("sum", axis, keepdim)
    if p == 1:
        return _named(a._reduce("sum", axis, keepdim), "LinalgVectorNormBackward")
    s = (a ** p)._reduce("sum", axis, keepdim)
    return _named(where(s == 0, 0.0, where(s == 0, 1.0, s) ** (1.0 / p)), "LinalgVectorNormBackward")


def round_(x, decimals=0):
    """Round half to even (as PyTorch); with `decimals`, to that many decimal places (negative:
    tens, hundreds, ...), as PyTorch does it: round(x * 10^d) / 10^d."""
    if decimals == 0:
        return bind("round", x)
    if not x.dtype.is_floating_point:
        raise RuntimeError(f"round(decimals={decimals}) needs a floating-point tensor, got {x.dtype}")
    scale = 10.0 ** abs(decimals)
    return bind("round", x * scale) / scale if decimals > 0 else bind("round", x / scale) * scale


def cumsum(x, axis, dtype=None):
    if axis is None:
        raise TypeError("cumsum() missing required argument 'dim'")
    x = x if dtype is None else x.to(dtype)
    return in_float32(lambda t: bind("cumsum", t, axis=_norm_axis(axis, x.ndim), reverse=False), x)


def isnan(x):
    return x != x if x.dtype.is_floating_point else zeros(x.shape, dtype=D.bool_, device=x.device)


def isinf(x):
    return x.abs() == math.inf if x.dtype.is_floating_point else zeros(x.shape, dtype=D.bool_, device=x.device)


def isfinite(x):
    return x.abs() < math.inf if x.dtype.is_floating_point else ones(x.shape, dtype=D.bool_, device=x.device)


@_float32_for_half
def logsumexp(x, axis=None, keepdims=False, *, dim=None, keepdim=None):
    x = _float_operand(x)
    axis = normalize_axes(_axis_kw(axis, dim), x.ndim)
    if any(x._shape[a] == 0 for a in axis):      # an empty sum: log 0 = -inf, as PyTorch
        return _named(x.sum(axis, keepdims=_keep_kw(keepdims, keepdim)) + float("-inf"), "LogsumexpBackward")
    m = x._reduce("max", axis, True).detach()
    m = where(m.abs() == float("inf"), 0.0, m)
    out = (x - m).exp()._reduce("sum", axis, True).log() + m
    out = out if _keep_kw(keepdims, keepdim) else out.reshape(_reduce_shape(x._shape, axis, False))
    return _named(out, "LogsumexpBackward")


@_float32_for_half
def softmax(x, axis=None, *, dim=None):
    axis = _axis_kw(axis, dim)
    axis = -1 if axis is None else axis
    x = _float_operand(x)
    if x._shape and x._shape[_norm_axis(axis, x.ndim)] == 0:
        return _named(x * 1, "SoftmaxBackward")     # over an empty axis: empty, as PyTorch
    e = (x - x._reduce("max", axis, True).detach()).exp()
    return _named(e / e.sum(axis, keepdims=True), "SoftmaxBackward")


@_float32_for_half
def log_softmax(x, axis=None, *, dim=None):
    axis = _axis_kw(axis, dim)
    axis = -1 if axis is None else axis
    x = _float_operand(x)
    axis = normalize_axes(axis, x.ndim)
    if any(x._shape[a] == 0 for a in axis):
        return _named(x * 1, "LogSoftmaxBackward")  # over an empty axis: empty, as PyTorch
    m = x._reduce("max", axis, True).detach()    # shift first, as PyTorch: x - m is exact
    d = x - where(m.abs() == float("inf"), 0.0, m)
    return _named(d - d.exp()._reduce("sum", axis, True).log(), "LogSoftmaxBackward")


# ---------------------------------------------------------------- splitting into views

def split(x, split_size_or_sections, dim=0):
    """Views of consecutive pieces along `dim`: pieces of one size (the last may be smaller), or of
    the listed sizes, which must add up to the dimension's size."""
    if x.ndim == 0:
        raise RuntimeError("split expects at least a 1-dimensional tensor")
    a = _norm_axis(dim, x.ndim)
    n = x._shape[a]
    if isinstance(split_size_or_sections, (list, tuple)):
        sizes = [as_size(s) for s in split_size_or_sections]
        if sum(sizes) != n or any(s < 0 for s in sizes):
            raise RuntimeError(f"split_with_sizes expects split_sizes to sum exactly to {n} (input tensor's size "
                               f"at dimension {a}), but got split_sizes={sizes}")
    else:
        size = int(split_size_or_sections)
        if size < 0 or size == 0 and n:
            raise RuntimeError(f"split expects split_size be positive (0 only for a dimension of size 0), but "
                               f"got split_size={size} for dimension {a} of size {n}")
        sizes = [min(size, n - i) for i in range(0, n, size)] if n else [0]
    label = "SplitWithSizesBackward" if isinstance(split_size_or_sections, (list, tuple)) else "SplitBackward"
    out, start = [], 0
    for s in sizes:
        out.append(_named(x[(slice(None),) * a + (slice(start, start + s),)], label, x))
        start += s
    return tuple(out)


def chunk(x, chunks, dim=0):
    """`chunks` views along `dim` of ceil(n / chunks) elements each (fewer pieces when n is small)."""
    if chunks <= 0:
        raise RuntimeError(f"chunk expects `chunks` to be greater than 0, got: {chunks}")
    if x.ndim == 0:
        raise RuntimeError("chunk expects at least a 1-dimensional tensor")
    n = x._shape[_norm_axis(dim, x.ndim)]
    if n == 0:
        return split(x, [0] * chunks, dim)
    return split(x, -(-n // chunks), dim)


# ---------------------------------------------------------------- activations and normalization

def gelu(x, approximate="none"):
    """GELU: x·Φ(x) exactly ("none", via erf) or with the tanh approximation ("tanh")."""
    if approximate == "tanh":
        return _named(0.5 * x * (1.0 + (math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)).tanh()),
                      "GeluBackward")
    if approximate != "none":
        raise _ArgError(f"gelu: approximate argument must be either 'none' or 'tanh', got {approximate!r}")
    return _named(0.5 * x * (1.0 + erf(x * (1.0 / math.sqrt(2.0)))), "GeluBackward")


def erf(x):
    """The error function (a primitive; integer tensors are promoted to float32)."""
    return bind("erf", x if x.dtype.is_floating_point else x.float())


@_float32_for_half
def layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    if is_size(normalized_shape):
        normalized_shape = (normalized_shape,)
    normalized_shape = tuple(normalized_shape)
    k = len(normalized_shape)
    if x.shape[x.ndim - k:] != normalized_shape:
        raise RuntimeError(f"layer_norm: input of shape {x.shape} does not end in normalized_shape "
                           f"{normalized_shape}")
    axes = tuple(range(x.ndim - k, x.ndim))
    mean = x.mean(axes, keepdims=True)
    d = x - mean
    var = (d * d).mean(axes, keepdims=True)
    y = d / (var + eps).sqrt()
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return _named(y, "NativeLayerNormBackward")


# ---------------------------------------------------------------- losses

def _reduce(loss, reduction):
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    if reduction == "none":
        return loss
    raise ValueError(f"{reduction} is not a valid value for reduction; expected 'mean', 'sum' or 'none'")


def legacy_reduction(size_average=None, reduce=None):
    """PyTorch's reading of the deprecated size_average/reduce flags as a reduction string."""
    size_average = True if size_average is None else size_average
    reduce = True if reduce is None else reduce
    return "none" if not reduce else "mean" if size_average else "sum"


def _reduction(reduction, size_average, reduce):
    return reduction if size_average is None and reduce is None else legacy_reduction(size_average, reduce)


def mse_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    d = input - target
    return _named(_reduce(d * d, _reduction(reduction, size_average, reduce)), "MseLossBackward")


def l1_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    return _named(_reduce((input - target).abs(), _reduction(reduction, size_average, reduce)), "L1LossBackward")


def _class_view(w, ndim, axis):
    """A per-class weight of shape (C,) reshaped to broadcast along the class axis."""
    return w.reshape(tuple(w.shape[0] if d == axis else 1 for d in range(ndim)))


def _check_weight(weight, n_classes):
    if weight is not None and (not isinstance(weight, TensorBase) or weight.shape != (n_classes,)):
        raise ValueError(f"weight must be a tensor of shape ({n_classes},) (one entry per class), got "
                         f"{getattr(weight, 'shape', type(weight).__name__)}")


def nll_loss(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None, reduction="mean"):
    """Negative log-likelihood of int class labels under log-probabilities `input` (class axis 1, or
    0 for a 1-D input); `weight` per class; labels equal to `ignore_index` count for nothing.
    The mean divides by the summed weights of the counted labels, as PyTorch."""
    reduction = _reduction(reduction, size_average, reduce)
    if not isinstance(input, TensorBase) or not isinstance(target, TensorBase):
        raise TypeError("nll_loss expects tensors")
    axis = 0 if input.ndim == 1 else 1
    if target.dtype not in (D.int64, D.int32):
        raise TypeError(f"nll_loss: class labels must be an int64 tensor, got {target.dtype}")
    expected = input.shape[:axis] + input.shape[axis + 1:]
    if target.shape != expected:
        raise ValueError(f"nll_loss: labels of shape {target.shape} do not match input of shape "
                         f"{input.shape}; expected labels of shape {expected}")
    _check_weight(weight, input.shape[axis])
    kept = target != ignore_index
    safe = where(kept, target, 0)            # ignored labels index class 0; their loss is masked out
    w = kept.to(input.dtype) if weight is None else where(kept, _take_along(weight, safe, 0), 0.0)
    loss = -_take_along(input, safe, axis) * w
    if reduction == "mean":
        return _named(loss.sum() / w.sum(), "NllLossBackward")
    return _named(_reduce(loss, reduction), "NllLossBackward")


def cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
                  reduction="mean", label_smoothing=0.0):
    """Log-softmax cross-entropy over axis 1 (or 0 for a 1-D input) with int class labels or class
    probabilities of the input's shape; `weight`, `ignore_index` and `label_smoothing` as PyTorch."""
    reduction = _reduction(reduction, size_average, reduce)
    if not isinstance(input, TensorBase) or not isinstance(target, TensorBase):
        raise TypeError("cross_entropy expects tensors")
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"label_smoothing must be between 0.0 and 1.0. Got: {label_smoothing}")
    axis = 0 if input.ndim == 1 else 1
    n_classes = input.shape[axis]
    _check_weight(weight, n_classes)
    logp = log_softmax(input, axis)
    if target.dtype.is_floating_point:
        if target.shape != input.shape:
            raise ValueError(f"cross_entropy: probability targets must have the input's shape {input.shape}, "
                             f"got {target.shape}")
        if ignore_index >= 0:
            raise RuntimeError("ignore_index is not supported for floating point target")
        if label_smoothing > 0:
            target = target * (1 - label_smoothing) + label_smoothing / n_classes
        prod = logp * target if weight is None else logp * target * _class_view(weight, input.ndim, axis)
        if reduction == "mean":
            return _named(-prod.sum() / (input.numel() // max(n_classes, 1)), "NllLossBackward")
        return _named(_reduce(-prod.sum(axis), reduction), "NllLossBackward")
    nll = nll_loss(logp, target, weight, ignore_index=ignore_index, reduction=reduction)
    if label_smoothing == 0:
        return nll
    kept = target != ignore_index
    smooth = -(logp if weight is None else logp * _class_view(weight, input.ndim, axis)).sum(axis)
    smooth = where(kept, smooth, 0.0)
    if reduction == "mean":
        denom = kept.sum() if weight is None else where(kept, _take_along(weight, where(kept, target, 0), 0), 0.0).sum()
        smooth = smooth.sum() / denom
    else:
        smooth = _reduce(smooth, reduction)
    return (1 - label_smoothing) * nll + smooth * (label_smoothing / n_classes)


def _softplus(x):
    """log(1 + exp(x)) without overflow; its gradient is sigmoid(x) everywhere, 0 included."""
    z = where(x > 0, -x, x)                  # -|x|, with slope +1 at 0 so the gradient at 0 is 1/2
    return where(x > 0, x, 0.0) + z.exp().log1p()


def binary_cross_entropy_with_logits(input, target, weight=None, size_average=None, reduce=None,
                                     reduction="mean", pos_weight=None):
    """-[p·t·log σ(x) + (1-t)·log(1-σ(x))] from logits x, stable for any |x|; `pos_weight` p
    weights the positive term (broadcast along the last axis), `weight` each element."""
    reduction = _reduction(reduction, size_average, reduce)
    if not isinstance(input, TensorBase) or not isinstance(target, TensorBase):
        raise TypeError("binary_cross_entropy_with_logits expects tensors")
    if target.shape != input.shape:
        raise ValueError(f"Target size ({list(target.shape)}) must be the same as input size "
                         f"({list(input.shape)})")
    if pos_weight is None:
        loss = _softplus(input) - input * target
    else:
        loss = (1 - target) * input + (1 + (pos_weight - 1) * target) * _softplus(-input)
    if weight is not None:
        loss = loss * weight
    return _named(_reduce(loss, reduction), "BinaryCrossEntropyWithLogitsBackward")


def binary_cross_entropy(input, target, weight=None, size_average=None, reduce=None, reduction="mean"):
    """-[t·log p + (1-t)·log(1-p)] from probabilities p; each log is clamped at -100, as PyTorch."""
    reduction = _reduction(reduction, size_average, reduce)
    if target.shape != input.shape:
        raise ValueError(f"Using a target size ({list(target.shape)}) that is different to the input size "
                         f"({list(input.shape)}) is deprecated. Please ensure they have the same size.")
    loss = -(target * input.log().clamp(min=-100) + (1 - target) * (1 - input).log().clamp(min=-100))
    if weight is not None:
        loss = loss * weight
    return _named(_reduce(loss, reduction), "BinaryCrossEntropyBackward")


def embedding(input, weight, padding_idx=None):
    """Rows of `weight` picked by the int tensor `input` (a gather; the gradient scatter-adds into
    the picked rows). The row `padding_idx` gets no gradient."""
    if not isinstance(input, TensorBase) or input.dtype not in (D.int64, D.int32):
        raise TypeError(f"embedding: indices must be an int64 (or int32) tensor, got "
                        f"{getattr(input, 'dtype', type(input).__name__)}")
    if weight.ndim != 2:
        raise ValueError(f"embedding: weight must be 2-D (num_embeddings, embedding_dim), got {weight.shape}")
    out = _getitem(weight, input, wrap=False)      # a negative index raises, as PyTorch's
    if padding_idx is not None:
        pad = (input == padding_idx % weight.shape[0]).unsqueeze(-1)
        out = where(pad, out.detach(), out)
    return _named(out, "EmbeddingBackward")


def _take_along(x, idx, axis):
    """x[..., idx[...], ...] along `axis` (take_along_axis), through integer-tensor indexing."""
    index = []
    for d in range(x.ndim):
        if d == axis:
            index.append(idx)
        else:
            shape = [1] * idx.ndim
            k = d if d < axis else d - 1
            shape[k] = x.shape[d]
            index.append(arange(x.shape[d], device=x.device).reshape(shape))
    return x[tuple(index)]


def _index_tensor(name, index):
    if not isinstance(index, TensorBase) or index.dtype not in (D.int64, D.int32):
        raise TypeError(f"{name}(): index must be an int64 (or int32) tensor, got "
                        f"{getattr(index, 'dtype', type(index).__name__)}")


def gather(input, dim, index):
    """torch.gather: out[i][j][k] = input[i][index[i][j][k]][k] for dim=1 (out has index's shape;
    index has input's number of axes and, off `dim`, sizes no larger than input's). Fused in compiled
    code: only the picked elements are read, and the gradient scatter-adds into them."""
    _index_tensor("gather", index)
    dim = normalize_axes(dim, input.ndim)[0] if input.ndim else 0
    if index.ndim != max(input.ndim, 1) or any(
            index.shape[d] > input.shape[d] for d in range(input.ndim) if d != dim):
        raise RuntimeError(f"gather(): index {tuple(index.shape)} must have as many axes as input "
                           f"{tuple(input.shape)} and no larger sizes than it except along dim {dim}")
    if not input.ndim:
        return _along(input.reshape(1), index, 0, wrap=False)
    part = input[tuple(slice(0, index.shape[d]) if d != dim else slice(None) for d in range(input.ndim))]
    return _along(part, index, dim, wrap=False)


def take_along_dim(input, indices, dim=None):
    """torch.take_along_dim: input's entries picked along `dim` by `indices` (broadcast with input on
    the other axes; dim None: both flattened). Fused in compiled code, as gather."""
    _index_tensor("take_along_dim", indices)
    if dim is None:
        return _along(input.reshape(-1), indices.reshape(-1), 0)
    dim = normalize_axes(dim, input.ndim)[0]
    if indices.ndim != input.ndim:
        raise RuntimeError(f"take_along_dim(): input {tuple(input.shape)} and indices {tuple(indices.shape)} "
                           f"should have the same number of dimensions")
    rest = broadcast_shapes(*[tuple(1 if d == dim else s for d, s in enumerate(t.shape)) for t in (input, indices)])
    x = input.expand(*[input.shape[d] if d == dim else rest[d] for d in range(input.ndim)])
    i = indices.expand(*[indices.shape[d] if d == dim else rest[d] for d in range(input.ndim)])
    return _along(x, i, dim)


def _along(x, idx, axis, wrap=True):
    """x[..., idx, ...] along `axis` for idx of x's shape but along `axis` (aranges on the other axes);
    a negative idx counts from the end unless `wrap` is False (gather: it raises)."""
    index = [idx if d == axis else arange(x.shape[d], device=x.device).reshape(
        tuple(x.shape[d] if e == d else 1 for e in range(x.ndim))) for d in range(x.ndim)]
    return _named(_getitem(x, tuple(index), wrap), "GatherBackward")



# ---------------------------------------------------------------- more of PyTorch's functional forms

def _maybe_inplace(x, out, inplace):
    """`out`, or x updated in place to it (inplace=True, as PyTorch's activations take)."""
    return x.copy_(out) if inplace else out


def silu(x, inplace=False):
    y = _float_operand(x)
    return _maybe_inplace(x, _named(y * y.sigmoid(), "SiluBackward"), inplace)


def leaky_relu(x, negative_slope=0.01, inplace=False):
    y = _float_operand(x)
    return _maybe_inplace(x, _named(where(y > 0, y, y * negative_slope), "LeakyReluBackward"), inplace)


def elu(x, alpha=1.0, inplace=False):
    y = _float_operand(x)
    return _maybe_inplace(x, _named(where(y > 0, y, y.expm1() * alpha), "EluBackward"), inplace)


def softplus(x, beta=1.0, threshold=20.0):
    """log(1 + exp(beta x)) / beta, x itself where beta x > threshold (PyTorch's linear region)."""
    x = _float_operand(x)
    return _named(where(x * beta > threshold, x, _softplus(x * beta) / beta), "SoftplusBackward")


def normalize(x, p=2.0, dim=1, eps=1e-12):
    """x divided by its p-norm along `dim`, the norm at least `eps`."""
    return x / norm(x, p, dim, True).clamp(min=eps)


def _at_least(n, eps):
    """n with its values raised to eps, its gradient n's own (PyTorch clamps the norms in place)."""
    return n + (n.clamp(min=eps) - n).detach()


def cosine_similarity(x1, x2, dim=1, eps=1e-8):
    """Cosine of the angle between x1 and x2 along `dim` (broadcast); each norm at least `eps`."""
    shape = broadcast_shapes(x1.shape, x2.shape)
    x1, x2 = _float_operand(x1).expand(*shape), _float_operand(x2).expand(*shape)
    n1, n2 = _at_least(norm(x1, 2, dim, True), eps), _at_least(norm(x2, 2, dim, True), eps)
    return _named(((x1 / n1) * (x2 / n2)).sum(dim), "SumBackward")


def smooth_l1_loss(input, target, size_average=None, reduce=None, reduction="mean", beta=1.0):
    d = (input - target).abs()
    loss = d if beta == 0 else where(d < beta, d * d * (0.5 / beta), d - 0.5 * beta)
    return _named(_reduce(loss, _reduction(reduction, size_average, reduce)), "SmoothL1LossBackward")


def huber_loss(input, target, reduction="mean", delta=1.0):
    d = (input - target).abs()
    loss = where(d < delta, d * d * 0.5, (d - 0.5 * delta) * delta)
    return _named(_reduce(loss, _reduction(reduction, None, None)), "HuberLossBackward")


def kl_div(input, target, size_average=None, reduce=None, reduction="mean", log_target=False):
    """Pointwise target * (log target - input) (input: log-probabilities), 0 where target is 0;
    reduction "batchmean" divides the sum by the batch size, as PyTorch."""
    if log_target:
        loss = target.exp() * (target - input)
    else:
        pos = target > 0
        loss = where(pos, target * where(pos, target, 1.0).log(), 0.0) - target * input
    reduction = _reduction(reduction, size_average, reduce)
    if reduction == "batchmean":
        out = loss.sum() / (input.shape[0] if input.ndim else 1)
    else:
        out = _reduce(loss, reduction)
    return _named(out, "KlDivBackward")


# ---------------------------------------------------------------- rearranging elements

def flip(x, dims):
    """The elements in reverse order along each of `dims` (a gather, as PyTorch copies)."""
    dims = normalize_axes(dims, x.ndim)
    out = x
    for d in dims:
        n = x._shape[d]
        out = out[(slice(None),) * d + (arange(n - 1, -1, -1, device=x.device),)] if n > 1 else out
    return _named(out.clone() if out is x else out, "FlipBackward")


def roll(x, shifts, dims=None):
    """Elements shifted by `shifts` along `dims`, wrapping around; no dims: over the flattened tensor."""
    if dims is None:
        return _named(roll(x.reshape(-1), shifts, 0).reshape(x.shape), "RollBackward")
    shifts = (shifts,) if is_size(shifts) else tuple(shifts)
    dims = (dims,) if is_size(dims) else tuple(dims)
    if len(shifts) != len(dims):
        raise RuntimeError(f"shifts and dimensions must align. shifts: {len(shifts)}, dims:{len(dims)}")
    out = x
    for s, d in zip(shifts, dims):
        d = _norm_axis(d, x.ndim)
        n = x._shape[d]
        if n == 0 or s % n == 0:
            continue
        s %= n
        head = (slice(None),) * d
        out = cat([out[head + (slice(n - s, n),)], out[head + (slice(0, n - s),)]], d)
    return _named(out.clone() if out is x else out, "RollBackward")


def repeat(x, sizes):
    """x tiled sizes[i] times along each axis (extra leading sizes add axes), as Tensor.repeat."""
    sizes = tuple(as_size(s) for s in sizes)
    if len(sizes) < x.ndim:
        raise RuntimeError("Number of dimensions of repeat dims can not be smaller than number of dimensions "
                           "of tensor")
    shape = (1,) * (len(sizes) - x.ndim) + tuple(x.shape)
    spread = x.reshape(tuple(a for n in shape for a in (1, n)))
    tiled = spread.expand(*(a for s, n in zip(sizes, shape) for a in (s, n)))
    return _named(tiled.reshape(tuple(s * n for s, n in zip(sizes, shape))), "RepeatBackward")


def index_select(x, dim, index):
    """The slices of x along `dim` at the positions of the 1-D int tensor `index` (a gather)."""
    if not isinstance(index, TensorBase) or index.dtype not in (D.int64, D.int32) or index.ndim > 1:
        raise _ArgError("index_select(): index must be a 1-D int64 or int32 tensor, got "
                        f"{getattr(index, 'dtype', type(index).__name__)} of shape {list(getattr(index, 'shape', ()))}")
    d = _norm_axis(dim, x.ndim)
    return _named(_getitem(x, (slice(None),) * d + (index.reshape(-1),), wrap=False), "IndexSelectBackward")


def _triangle(x, diagonal, upper):
    if x.ndim < 2:
        raise RuntimeError(f"{'triu' if upper else 'tril'}: input tensor must have at least 2 dimensions")
    rows, cols = x.shape[-2:]
    i = arange(rows, device=x.device).reshape(rows, 1)
    j = arange(cols, device=x.device).reshape(1, cols)
    keep = j - i >= diagonal if upper else j - i <= diagonal
    return where(keep, x, False if x.dtype is D.bool_ else 0)     # a bool tensor stays bool, as PyTorch's


def tril(x, diagonal=0):
    return _named(_triangle(x, diagonal, False), "TrilBackward")


def triu(x, diagonal=0):
    return _named(_triangle(x, diagonal, True), "TriuBackward")


# ---------------------------------------------------------------- log1p and expm1

def log1p(x):
    """log(1 + x), accurate for small |x|: log(u) of u = 1 + x, less ((u - 1) - x) / u, the rounding
    of u (its first-order effect); the gradient 1/u. log(1 + x) alone lost the digits of x below u's
    last bit: log1p(8.2e-10) in float64 was 1.2e-7 off relatively, in float32 log1p(1e-8) was 0."""
    x = _float_operand(x)
    u = x + 1.0
    d = x.detach()
    ud = d + 1.0
    c = ((ud - 1.0) - d) / ud
    c = where(c == c, c, 0.0)                # u = 0 or inf: no correction (-inf, inf as log's)
    return _named(where(x == 0.0, x, u.log() - c), "Log1PBackward")      # (-0.0 stays -0.0)


def expm1(x):
    """exp(x) - 1, accurate for small |x|: Kahan's (u - 1) x / log(u) of u = exp(x) (x itself where
    u rounds to 1); the gradient u. exp(x) - 1 alone kept only the digits of u's last bit."""
    x = _float_operand(x)
    u = x.exp()
    d = x.detach()
    ud = d.exp()
    inside = (ud != 1.0) & (ud > 0.0) & (ud < math.inf)
    k = where(inside, (ud - 1.0) * d / where(inside, ud.log(), 1.0), where(ud == 1.0, d, ud - 1.0))
    c = where(inside | (ud == 1.0), k - (ud - 1.0), 0.0)
    return _named(where(x == 0.0, x, (u - 1.0) + c), "Expm1Backward")    # (-0.0 stays -0.0)


# ---------------------------------------------------------------- einsum

def _einsum_terms(equation, operands):
    """(input subscripts per operand, output subscripts) with '...' expanded to letters of its own."""
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    ins = lhs.split(",")
    if len(ins) != len(operands):
        raise ValueError(f"einsum(): the equation {equation!r} has {len(ins)} operands, {len(operands)} were given")
    spare = [c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ" if c not in eq]
    ell = max([operands[k].ndim - len(s.replace("...", "")) for k, s in enumerate(ins) if "..." in s], default=0)
    dots = "".join(spare[:ell])
    terms = []
    for s, x in zip(ins, operands):
        if "..." in s:
            n = x.ndim - len(s.replace("...", ""))
            s = s.replace("...", dots[ell - n:] if n else "")
        if len(s) != x.ndim or not all(c.isalpha() for c in s):
            raise ValueError(f"einsum(): subscripts {s!r} do not match an operand of shape {list(x.shape)} "
                             f"in {equation!r}")
        if len(set(s)) != len(s):
            raise ValueError(f"einsum(): repeated subscripts within one operand ({s!r}: a diagonal) are not "
                             f"supported; take the diagonal with indexing first")
        terms.append(s)
    if arrow:
        out = rhs.replace("...", dots)
        if len(set(out)) != len(out) or any(c not in "".join(terms) for c in out):
            raise ValueError(f"einsum(): output subscripts {rhs!r} must be distinct and appear in an input")
    else:                                    # implicit: the letters seen once, in order, after '...'
        seen = "".join(terms)
        out = dots + "".join(sorted(c for c in set(seen) if seen.count(c) == 1 and c not in dots))
    return terms, out


def _einsum_pair(a, sa, b, sb, keep):
    """a (subscripts sa) times b (sb) summed over the letters not in `keep`: one batched matmul.
    Returns (result, its subscripts)."""
    only_a = [c for c in sa if c not in sb and c not in keep]
    only_b = [c for c in sb if c not in sa and c not in keep]
    if only_a:
        a, sa = a.sum(tuple(sa.index(c) for c in only_a)), "".join(c for c in sa if c not in only_a)
    if only_b:
        b, sb = b.sum(tuple(sb.index(c) for c in only_b)), "".join(c for c in sb if c not in only_b)
    batch = [c for c in sa if c in sb and c in keep]
    con = [c for c in sa if c in sb and c not in keep]
    left = [c for c in sa if c not in sb]
    right = [c for c in sb if c not in sa]
    size = {c: n for s, x in ((sa, a), (sb, b)) for c, n in zip(s, x.shape)}
    for c in batch + con:                    # a length 1 against another broadcasts
        size[c] = max(a.shape[sa.index(c)], b.shape[sb.index(c)])
    a = a.permute(*[sa.index(c) for c in batch + left + con])
    b = b.permute(*[sb.index(c) for c in batch + con + right])
    a = a.expand(*[size[c] for c in batch + left + con])
    b = b.expand(*[size[c] for c in batch + con + right])
    nb, nl, nc, nr = (math.prod(size[c] for c in cs) for cs in (batch, left, con, right))
    out = a.reshape(nb, nl, nc) @ b.reshape(nb, nc, nr)
    return out.reshape(tuple(size[c] for c in batch + left + right)), "".join(batch + left + right)


def einsum(equation, *operands):
    """Einstein summation, as torch.einsum: operands multiplied along shared subscripts and summed
    over those not in the output ('->' given, or the letters seen once), '...' for broadcast
    dimensions; pairs contract left to right as batched matrix products."""
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    if not operands or not all(isinstance(x, TensorBase) for x in operands):
        raise TypeError("einsum(): expected an equation and one or more tensors")
    terms, out = _einsum_terms(equation, operands)
    x, s = operands[0], terms[0]
    for k in range(1, len(operands)):
        keep = set(out) | {c for t in terms[k + 1:] for c in t}
        x, s = _einsum_pair(x, s, operands[k], terms[k], keep)
    gone = tuple(i for i, c in enumerate(s) if c not in out)
    if gone:
        x, s = x.sum(gone), "".join(c for c in s if c in out)
    return _named(x.permute(*[s.index(c) for c in out]) if len(out) > 1 else x * 1, "EinsumBackward")


# ---------------------------------------------------------------- masks, pieces, small products

def masked_fill(x, mask, value):
    """x with `value` where the bool `mask` (broadcast to x's shape) is True."""
    if not isinstance(mask, TensorBase) or mask.dtype != D.bool_:
        raise _ArgError(f"masked_fill only supports boolean masks, but got mask with dtype "
                        f"{getattr(mask, 'dtype', type(mask).__name__)}")
    if broadcast_shapes(x.shape, mask.shape) != tuple(x.shape):
        raise RuntimeError(f"masked_fill: the mask of shape {list(mask.shape)} must broadcast to the tensor's shape "
                           f"{list(x.shape)}")
    if isinstance(value, TensorBase) and value.ndim:
        raise RuntimeError(f"masked_fill only supports a 0-dimensional value tensor, but got tensor with "
                           f"{value.ndim} dimension(s).")
    fill = value.to(x.dtype) if isinstance(value, TensorBase) else value
    return _named(where(mask, fill, x).to(x.dtype), "MaskedFillBackward")


def unbind(x, dim=0):
    d = _norm_axis(dim, x.ndim)
    return tuple(_named(x[(slice(None),) * d + (i,)], "UnbindBackward", x) for i in range(x.shape[d]))


def narrow(x, dim, start, length):
    d = _norm_axis(dim, x.ndim)
    n = x.shape[d]
    start = start + n if start < 0 else start
    if not 0 <= start <= n or length < 0 or start + length > n:
        raise IndexError(f"narrow(): start ({start}) + length ({length}) exceeds dimension size ({n}).")
    return x[(slice(None),) * d + (slice(start, start + length),)]


def outer(a, b):
    if a.ndim != 1 or b.ndim != 1:
        raise RuntimeError(f"outer: expected 1-D vectors, got shapes {list(a.shape)} and {list(b.shape)}")
    return a.reshape(-1, 1) * b.reshape(1, -1)


def lerp(x, end, weight):
    return _named(x + weight * (end - x), "LerpBackward")


def addmm(input, mat1, mat2, *, beta=1, alpha=1):
    prod = mat1 @ mat2
    return _named((input if beta == 1 else input * beta) + (prod if alpha == 1 else prod * alpha), "AddmmBackward")


def repeat_interleave(x, repeats, dim=None):
    """Each element repeated `repeats` times along `dim` (none: over the flattened tensor)."""
    if isinstance(repeats, TensorBase):
        if repeats.numel() != 1:
            raise NotImplementedError("repeat_interleave with a tensor of per-element repeats is not supported; "
                                      "pass an int (or index with the positions it expands to)")
        repeats = int(repeats.item())
    if repeats < 0:
        raise RuntimeError("repeat_interleave: repeats can not be negative")
    if dim is None:
        x, dim = x.reshape(-1), 0
    d = _norm_axis(dim, x.ndim)
    shape = tuple(x.shape)
    spread = x.reshape(shape[:d + 1] + (1,) + shape[d + 1:]).expand(*shape[:d + 1], repeats, *shape[d + 1:])
    return _named(spread.reshape(shape[:d] + (shape[d] * repeats,) + shape[d + 1:]), "RepeatInterleaveBackward")
