"""Issue 27's attention names: F.scaled_dot_product_attention (masks, is_causal, scale, dropout,
grouped heads) and nn.MultiheadAttention (PyTorch's parameters, init, masks, returned weights), and
F.one_hot. Oracles: a NumPy float64 attention, torch 2.13 literals (inputs sin(0.7 i + 0.3)),
tg.gradcheck eager and compiled, compiled == eager."""
import math

import numpy as np
import pytest

import tracegrad as tg
import tracegrad.nn.functional as F


def n(*shape):
    """The deterministic inputs the torch literals were computed from."""
    return np.sin(np.arange(math.prod(shape)) * 0.7 + 0.3).reshape(shape)


def np_attention(q, k, v, mask=None, scale=None):
    """softmax(q k^T * scale + mask) v, a row masked everywhere giving zeros (PyTorch's)."""
    s = q @ np.swapaxes(k, -1, -2) * (1 / math.sqrt(q.shape[-1]) if scale is None else scale)
    if mask is not None:
        s = s + mask
    m = s.max(-1, keepdims=True)
    e = np.exp(s - np.where(np.isfinite(m), m, 0))
    with np.errstate(invalid="ignore"):
        w = np.where(np.isfinite(m), e / e.sum(-1, keepdims=True), 0.0)
    return w @ v, w


Q, K, V = n(1, 2, 3, 4), n(1, 2, 5, 4) * 0.5, n(1, 2, 5, 4)[..., ::-1].copy()
BOOL_MASK = np.array([[True, False, True, True, False]] * 2 + [[False] * 5])


def test_sdpa_torch_literals():
    q, k, v = tg.tensor(Q), tg.tensor(K), tg.tensor(V)
    causal = F.scaled_dot_product_attention(q, k, v, is_causal=True)[0, 1]
    np.testing.assert_allclose(causal.numpy(), [
        [-0.6381066823479474, 0.007963183785937343, 0.6502878401571168, 0.9867719642746133],
        [0.02831610158289586, -0.2300015519126663, -0.38014588167031704, -0.3515016633351649],
        [-0.2160585513214868, 0.19629437448480586, 0.516326988786686, 0.5935229524304385]], rtol=1e-12)
    masked = F.scaled_dot_product_attention(q, k, v, attn_mask=tg.tensor(BOOL_MASK), scale=0.3)[0, 0]
    np.testing.assert_allclose(masked.numpy(), [
        [0.38998779865957234, 0.5504741847702369, 0.4520639603870549, 0.14104099173961004],
        [0.0041595694963201335, 0.213548019054999, 0.3225014984722696, 0.2797774839331132],
        [0.0, 0.0, 0.0, 0.0]], rtol=1e-12, atol=1e-15)


CAUSAL = np.where(np.tril(np.ones((3, 5), bool)), 0.0, -np.inf)
FLOAT_MASK = n(3, 5)


@pytest.mark.parametrize("kw,mask,scale", [
    ({}, None, None),
    ({"is_causal": True}, CAUSAL, None),
    ({"attn_mask": BOOL_MASK, "scale": 0.3}, np.where(BOOL_MASK, 0.0, -np.inf), 0.3),
    ({"attn_mask": FLOAT_MASK}, FLOAT_MASK, None)], ids=["plain", "causal", "bool", "float"])
def test_sdpa_against_numpy_gradients_and_compiled(kw, mask, scale):
    kw = {k: tg.tensor(v) if isinstance(v, np.ndarray) else v for k, v in kw.items()}
    fn = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, **kw)      # noqa: E731
    args = [tg.tensor(a, requires_grad=True) for a in (Q, K, V)]
    np.testing.assert_allclose(fn(*args).detach().numpy(), np_attention(Q, K, V, mask, scale)[0], rtol=1e-12,
                               atol=1e-15)
    compiled = tg.compile(fn)
    np.testing.assert_allclose(compiled(*[a.detach() for a in args]).numpy(), fn(*args).detach().numpy(),
                               rtol=1e-12, atol=1e-15)
    assert tg.gradcheck(fn, args) and tg.gradcheck(compiled, args)
    f32 = [tg.tensor(a, dtype=tg.float32) for a in (Q, K, V)]
    np.testing.assert_allclose(compiled(*f32).numpy(), fn(*f32).numpy(), rtol=1e-5, atol=1e-6)


def test_sdpa_compiles_to_two_products_around_one_fused_kernel():
    q = tg.randn(2, 4, 16, 8)
    f = tg.compile(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True))
    f(q, q, q)
    assert f.stats()["kernels"] == 3


def test_sdpa_dropout_and_grouped_heads():
    q, k, v = (tg.tensor(a) for a in (Q, K, V))
    assert (F.scaled_dot_product_attention(q, k, v, dropout_p=1.0).numpy() == 0).all()
    tg.manual_seed(3)
    out = F.scaled_dot_product_attention(q, k, v, dropout_p=0.5).numpy()
    assert not np.allclose(out, np_attention(Q, K, V)[0])
    q4 = tg.tensor(n(1, 4, 3, 4))
    grouped = F.scaled_dot_product_attention(q4, k, v, enable_gqa=True).numpy()
    np.testing.assert_allclose(grouped, np_attention(n(1, 4, 3, 4), np.repeat(K, 2, 1), np.repeat(V, 2, 1))[0],
                               rtol=1e-12)
    with pytest.raises(RuntimeError, match="is_causal"):
        F.scaled_dot_product_attention(q, k, v, attn_mask=tg.tensor(BOOL_MASK), is_causal=True)


def _torch_weights(m):
    """The weights the torch literals below were computed with (float64)."""
    with tg.no_grad():
        m.in_proj_weight.copy_(tg.tensor(n(12, 4) * 0.5))
        m.in_proj_bias.copy_(tg.tensor(n(12) * 0.1))
        m.out_proj.weight.copy_(tg.tensor(n(4, 4).T.copy()))
        m.out_proj.bias.copy_(tg.tensor(n(4) * 0.2))
    return m


def test_multihead_attention_torch_literals():
    m = _torch_weights(tg.nn.MultiheadAttention(4, 2, dtype=tg.float64))
    x, kv = tg.tensor(n(3, 2, 4)), tg.tensor(n(5, 2, 4)[::-1].copy())
    kpm = tg.tensor([[False, False, True, False, False], [False] * 5])
    out, w = m(x, kv, kv, key_padding_mask=kpm)
    assert out.shape == (3, 2, 4) and w.shape == (2, 3, 5)
    np.testing.assert_allclose(out[:, 0].detach().numpy(), [
        [0.05766994783347629, 0.5120570822633164, 0.7256157697921, 0.5979060227284988],
        [-0.044124965274734564, 0.5291297992540256, 0.8535265513124368, 0.7764964295683553],
        [-0.01590086815399535, 0.3831572084959386, 0.6020104629937002, 0.53772879007256]], rtol=1e-12)
    np.testing.assert_allclose(w[1].detach().numpy(), [
        [0.16590261478359333, 0.26676251446359045, 0.2831163567853486, 0.19209302800924655, 0.0921254859582212],
        [0.18734152635550905, 0.27206958877454046, 0.2612016560891478, 0.17844045115170568, 0.10094677762909718],
        [0.22616386432048005, 0.2430523675048153, 0.21642419844086652, 0.1723939079292012, 0.14196566180463696]],
        rtol=1e-12)


def np_mha(x, kv, W, b, Wo, bo, heads, mask):
    """PyTorch's multi-head attention, sequence-first (L, N, E), in NumPy."""
    E = x.shape[-1]
    hd = E // heads
    q, k, v = x @ W[:E].T + b[:E], kv @ W[E:2 * E].T + b[E:2 * E], kv @ W[2 * E:].T + b[2 * E:]
    split = lambda t: t.reshape(t.shape[0], t.shape[1], heads, hd).transpose(1, 2, 0, 3)   # noqa: E731
    o, w = np_attention(split(q), split(k), split(v), mask)
    o = o.transpose(2, 0, 1, 3).reshape(x.shape[0], x.shape[1], E)
    return o @ Wo.T + bo, w.mean(1)


@pytest.mark.parametrize("batch_first", [False, True])
def test_multihead_attention_against_numpy_gradients_and_compiled(batch_first):
    tg.manual_seed(0)
    m = tg.nn.MultiheadAttention(6, 3, batch_first=batch_first, dtype=tg.float64)
    names = [name for name, _ in m.named_parameters()]
    assert names == ["in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"]
    W, b, Wo, bo = (p.detach().numpy() for p in m.parameters())
    assert np.abs(W).max() <= math.sqrt(6 / 24) and (b == 0).all() and (bo == 0).all()
    assert np.abs(Wo).max() <= 1 / math.sqrt(6)
    x, kv = n(4, 2, 6), n(5, 2, 6)[::-1].copy()
    attn_mask = np.triu(np.ones((4, 5), bool), 2)                 # True: left out
    kpm = np.array([[False] * 4 + [True], [False] * 5])
    mask = np.where(attn_mask, -np.inf, 0.0)[None, None] + np.where(kpm, -np.inf, 0.0)[:, None, None, :]
    want_out, want_w = np_mha(x, kv, W, b, Wo, bo, 3, mask)
    swap = (lambda a: np.swapaxes(a, 0, 1).copy()) if batch_first else (lambda a: a)   # noqa: E731

    def fn(x, kv):
        return m(x, kv, kv, key_padding_mask=tg.tensor(kpm), attn_mask=tg.tensor(attn_mask))
    out, w = fn(tg.tensor(swap(x)), tg.tensor(swap(kv)))
    np.testing.assert_allclose(out.detach().numpy(), swap(want_out), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(w.detach().numpy(), want_w, rtol=1e-12, atol=1e-14)
    compiled = tg.compile(fn)
    c_out, c_w = compiled(tg.tensor(swap(x)), tg.tensor(swap(kv)))
    np.testing.assert_allclose(c_out.detach().numpy(), out.detach().numpy(), rtol=1e-12, atol=1e-14)
    args = (tg.tensor(swap(x), requires_grad=True), tg.tensor(swap(kv), requires_grad=True))
    assert tg.gradcheck(lambda a, c: fn(a, c)[0], args)
    assert tg.gradcheck(tg.compile(lambda a, c: fn(a, c)[0]), args)


def test_multihead_attention_options():
    m = tg.nn.MultiheadAttention(4, 2, bias=False, kdim=3, vdim=5)
    assert [name for name, _ in m.named_parameters()] == ["q_proj_weight", "k_proj_weight", "v_proj_weight",
                                                          "out_proj.weight"]
    q, k, v = tg.randn(2, 4), tg.randn(6, 3), tg.randn(6, 5)           # unbatched
    out, w = m(q, k, v, need_weights=True, average_attn_weights=False)
    assert out.shape == (2, 4) and w.shape == (2, 2, 6)
    assert m(q, k, v, need_weights=False)[1] is None
    np.testing.assert_allclose(w.detach().numpy().sum(-1), 1.0, rtol=1e-6)
    with pytest.raises(RuntimeError, match="is_causal"):
        m(q, k, v, is_causal=True)
    with pytest.raises(NotImplementedError):
        tg.nn.MultiheadAttention(4, 2, add_bias_kv=True)
    with pytest.raises(AssertionError, match="divisible"):
        tg.nn.MultiheadAttention(5, 2)


def test_one_hot():
    """torch 2.13: F.one_hot(torch.tensor([0, 2, 1])) and num_classes=4 (int64)."""
    assert F.one_hot(tg.tensor([0, 2, 1])).tolist() == [[1, 0, 0], [0, 0, 1], [0, 1, 0]]
    h = F.one_hot(tg.tensor([[0], [3]]), 4)
    assert h.dtype is tg.int64 and h.tolist() == [[[1, 0, 0, 0]], [[0, 0, 0, 1]]]
    assert tg.compile(lambda t: F.one_hot(t, 5))(tg.tensor([4, 0])).tolist() == [[0, 0, 0, 0, 1], [1, 0, 0, 0, 0]]
    with pytest.raises(RuntimeError, match="smaller than num_classes"):
        F.one_hot(tg.tensor([3]), 3)
    with pytest.raises(RuntimeError, match="LongTensor"):
        F.one_hot(tg.tensor([1.0]))


def test_multihead_attention_rows_masked_everywhere():
    """torch 2.13: every key padded gives NaN with need_weights=True (its math path), the fused path's
    zeros (then out_proj's zero bias) with need_weights=False."""
    m = tg.nn.MultiheadAttention(4, 2)
    x, kpm = tg.randn(2, 1, 4), tg.tensor([[True, True]])
    out, w = m(x, x, x, key_padding_mask=kpm)
    assert np.isnan(out.detach().numpy()).all() and np.isnan(w.detach().numpy()).all()
    out, w = m(x, x, x, key_padding_mask=kpm, need_weights=False)
    assert w is None and (out.detach().numpy() == 0).all()
