"""nn modules a PyTorch user reaches for: losses (MSE, L1, NLL, CrossEntropy with weight /
ignore_index / label_smoothing, BCE, BCEWithLogits), Flatten, Dropout, Softmax, GELU, Embedding.
Expected numbers follow PyTorch's formulas (computed in NumPy, written in); gradients are checked with
tg.gradcheck in float64, compiled code against eager."""
import numpy as np
import pytest

import tracegrad as tg
import tracegrad.nn.functional as F

nn = tg.nn
BACKENDS = ["interpret", "llvm"]
LOGITS = np.array([[1.0, 2.0, 3.0], [0.5, -1.0, 2.0]])
LABELS = np.array([2, 0])


def f64(a, grad=True):
    return tg.tensor(np.asarray(a, dtype=np.float64), requires_grad=grad)


def test_mse_and_l1_loss_reductions():
    a, b = tg.tensor([[1.0, 2.0], [3.0, 4.0]]), tg.tensor([[1.5, 2.0], [2.0, 6.0]])
    assert nn.MSELoss()(a, b).item() == pytest.approx(1.3125)
    assert nn.MSELoss(reduction="sum")(a, b).item() == pytest.approx(5.25)
    np.testing.assert_allclose(nn.MSELoss(reduction="none")(a, b).numpy(), [[0.25, 0.0], [1.0, 4.0]])
    assert nn.MSELoss(size_average=False)(a, b).item() == pytest.approx(5.25)     # the legacy flags
    assert nn.L1Loss()(a, b).item() == pytest.approx(0.875)
    assert nn.MSELoss()(a, b).grad_fn is None
    with pytest.raises(ValueError, match="not a valid value for reduction"):
        nn.MSELoss(reduction="avg")
    assert tg.gradcheck(lambda x, y: F.mse_loss(x, y, reduction="sum"), (f64([[1.0, 2.0]]), f64([[0.5, 3.0]])))


@pytest.mark.parametrize("kwargs, expected", [
    ({}, 1.0744586305507686),
    ({"label_smoothing": 0.1}, 1.1244586305507687),
    ({"weight": [1.0, 2.0, 3.0]}, 0.7410322974975744),
    ({"weight": [1.0, 2.0, 3.0], "label_smoothing": 0.1}, 0.795208264136227),
    ({"ignore_index": 0}, 0.40760596444438),
    ({"reduction": "sum"}, 2 * 1.0744586305507686),
])
def test_cross_entropy_options(kwargs, expected):
    if "weight" in kwargs:
        kwargs = dict(kwargs, weight=f64(kwargs["weight"], grad=False))
    loss = nn.CrossEntropyLoss(**kwargs)(f64(LOGITS), tg.tensor(LABELS))
    assert loss.item() == pytest.approx(expected, rel=1e-12)
    assert tg.gradcheck(lambda x: F.cross_entropy(x, tg.tensor(LABELS), **kwargs), (f64(LOGITS),))


def test_cross_entropy_probability_targets_and_nll_loss():
    t = f64([[0.2, 0.3, 0.5], [1.0, 0.0, 0.0]], grad=False)
    assert F.cross_entropy(f64(LOGITS), t).item() == pytest.approx(1.4244586305507685, rel=1e-12)
    w = f64([1.0, 2.0, 3.0], grad=False)
    assert nn.CrossEntropyLoss(weight=w)(f64(LOGITS), t).item() == pytest.approx(1.8394025074396159, rel=1e-12)
    logp = nn.LogSoftmax(dim=1)(f64(LOGITS))
    assert nn.NLLLoss()(logp, tg.tensor(LABELS)).item() == pytest.approx(1.0744586305507686, rel=1e-12)
    # (N, C, d) inputs: the class axis is 1
    x = np.random.default_rng(0).standard_normal((2, 3, 4))
    y = np.random.default_rng(1).integers(0, 3, (2, 4))
    lp = x - np.log(np.exp(x).sum(1, keepdims=True))
    ref = -np.take_along_axis(lp, y[:, None], 1).mean()
    assert F.cross_entropy(f64(x), tg.tensor(y)).item() == pytest.approx(ref, rel=1e-12)
    with pytest.raises(ValueError, match=r"weight must be a tensor of shape \(3,\)"):
        F.cross_entropy(f64(LOGITS), tg.tensor(LABELS), weight=f64([1.0, 2.0], grad=False))
    with pytest.raises(RuntimeError, match="ignore_index is not supported for floating point target"):
        F.cross_entropy(f64(LOGITS), t, ignore_index=1)


def test_bce_with_logits_is_stable_and_has_pytorchs_gradient():
    x = f64([0.0, 1000.0, -1000.0, 2.0, -3.0])
    t = f64([1.0, 0.0, 1.0, 0.5, 0.25], grad=False)
    loss = nn.BCEWithLogitsLoss(reduction="none")(x, t)
    xv, tv = x.detach().numpy(), t.numpy()
    np.testing.assert_allclose(loss.detach().numpy(), np.logaddexp(0, xv) - xv * tv, rtol=1e-12)
    F.binary_cross_entropy_with_logits(x, t).backward()
    sig = np.array([0.5, 1.0, 0.0, 1 / (1 + np.exp(-2.0)), 1 / (1 + np.exp(3.0))])
    np.testing.assert_allclose(x.grad.numpy(), (sig - tv) / 5, rtol=1e-12, atol=1e-15)   # 0.5 - t at x = 0
    pw = f64([3.0], grad=False)
    x.grad = None
    out = F.binary_cross_entropy_with_logits(x, t, pos_weight=pw, reduction="sum")
    ref = 3.0 * tv * np.logaddexp(0, -xv) + (1 - tv) * np.logaddexp(0, xv)
    assert out.item() == pytest.approx(ref.sum(), rel=1e-12)
    out.backward()
    np.testing.assert_allclose(x.grad.numpy(), (3 * tv + 1 - tv) * sig - 3 * tv, rtol=1e-12, atol=1e-15)
    small = f64([0.3, -1.2, 2.5])
    tt = f64([0.0, 1.0, 0.4], grad=False)
    assert tg.gradcheck(lambda a: F.binary_cross_entropy_with_logits(a, tt, weight=tt + 1, pos_weight=pw), (small,))
    p = f64([0.2, 0.9, 0.5])
    assert nn.BCELoss()(p, tt).item() == pytest.approx(
        -np.mean([np.log(0.8), np.log(0.9), 0.4 * np.log(0.5) + 0.6 * np.log(0.5)]), rel=1e-12)
    assert tg.gradcheck(lambda a: F.binary_cross_entropy(a, tt), (p,))
    with pytest.raises(ValueError, match=r"Target size \(\[2\]\) must be the same as input size \(\[3\]\)"):
        F.binary_cross_entropy_with_logits(small, tt[:2])


@pytest.mark.parametrize("backend", BACKENDS)
def test_losses_compile_like_eager(backend):
    w = f64([1.0, 2.0, 3.0], grad=False).float()
    pw = tg.tensor([2.0, 0.5, 1.0])

    def f(x, y, t):
        return (F.cross_entropy(x, y, weight=w, ignore_index=1, label_smoothing=0.2)
                + F.binary_cross_entropy_with_logits(x, t, pos_weight=pw) + F.mse_loss(x, t, reduction="sum"))

    rng = np.random.default_rng(3)
    xv = rng.standard_normal((4, 3)).astype(np.float32)
    yv, tv = np.array([0, 1, 2, 2]), rng.uniform(0, 1, (4, 3)).astype(np.float32)
    x, xe = tg.tensor(xv, requires_grad=True), tg.tensor(xv, requires_grad=True)
    out = tg.compile(f, backend=backend)(x, tg.tensor(yv), tg.tensor(tv))
    ref = f(xe, tg.tensor(yv), tg.tensor(tv))
    out.backward()
    ref.backward()
    assert out.item() == pytest.approx(ref.item(), rel=1e-5)
    np.testing.assert_allclose(x.grad.numpy(), xe.grad.numpy(), rtol=1e-4, atol=1e-6)


def test_flatten_softmax_gelu_identity_modules():
    x = tg.randn(2, 3, 4, 5)
    assert nn.Flatten()(x).shape == (2, 60)
    assert nn.Flatten(2)(x).shape == (2, 3, 20)
    assert nn.Flatten(0, 1)(x).shape == (6, 4, 5)
    v = np.array([[1.0, 2.0, 3.0], [0.0, 0.0, 1.0]])
    e = np.exp(v)
    np.testing.assert_allclose(nn.Softmax(dim=1)(f64(v)).detach().numpy(), e / e.sum(1, keepdims=True), rtol=1e-12)
    np.testing.assert_allclose(nn.Softmax(dim=0)(f64(v)).detach().numpy(), e / e.sum(0, keepdims=True), rtol=1e-12)
    with pytest.warns(UserWarning, match="Implicit dimension choice for softmax"):
        implicit = nn.Softmax()(f64(v))            # PyTorch's legacy choice: dim 1 for a 2-D input
    np.testing.assert_allclose(implicit.detach().numpy(), e / e.sum(1, keepdims=True), rtol=1e-12)
    np.testing.assert_allclose(nn.LogSoftmax(1)(f64(v)).detach().numpy(), np.log(e / e.sum(1, keepdims=True)),
                               rtol=1e-12)
    g = nn.GELU()(tg.tensor([1.0, -1.0]))
    np.testing.assert_allclose(g.numpy(), [0.8413447, -0.1586553], rtol=1e-6)
    np.testing.assert_allclose(nn.GELU(approximate="tanh")(tg.tensor([1.0])).numpy(), [0.8411920], rtol=1e-6)
    assert nn.Identity(3, foo=1)(x) is x
    assert "Flatten(start_dim=1, end_dim=-1)" in repr(nn.Sequential(nn.Flatten(), nn.ReLU()))


def test_dropout_respects_train_and_eval():
    tg.manual_seed(0)
    drop = nn.Dropout(p=0.25)
    x = tg.ones(4000)
    y = drop(x).numpy()
    assert set(np.unique(y)) == {0.0, np.float32(1 / 0.75)}
    assert 0.2 < (y == 0).mean() < 0.3
    m = nn.Sequential(nn.Linear(3, 3), nn.Dropout(0.5))
    m.eval()
    assert not m[1].training
    z = tg.randn(2, 3)
    np.testing.assert_array_equal(m(z).detach().numpy(), m[0](z).detach().numpy())
    m.train()
    assert m[1].training
    assert nn.Dropout(0.0)(x) is x and (nn.Dropout(1.0)(x).numpy() == 0).all()
    with pytest.raises(ValueError, match="dropout probability has to be between 0 and 1, but got 1.5"):
        nn.Dropout(1.5)
    xx = f64(np.linspace(-1, 1, 6))
    tg.manual_seed(1)
    keep = F.dropout(tg.ones(6, dtype=tg.float64), 0.5).numpy() != 0
    tg.manual_seed(1)
    F.dropout(xx, 0.5).sum().backward()
    np.testing.assert_allclose(xx.grad.numpy(), keep * 2.0)


def test_embedding_gathers_rows_and_scatter_adds_gradients():
    tg.manual_seed(0)
    emb = nn.Embedding(5, 3, padding_idx=1)
    w = emb.weight.detach().numpy().copy()
    assert emb.weight.requires_grad and (w[1] == 0).all() and w.std() > 0.3       # N(0, 1) init
    idx = tg.tensor([[0, 2, 0], [1, 4, 2]])
    out = emb(idx)
    np.testing.assert_array_equal(out.detach().numpy(), w[idx.numpy()])
    (out * tg.arange(3, dtype=tg.float32)).sum().backward()
    counts = np.array([2, 0, 2, 0, 1])[:, None]          # index 1 is the padding row: no gradient
    np.testing.assert_allclose(emb.weight.grad.numpy(), counts * np.arange(3.0))
    assert [n for n, _ in emb.named_parameters()] == ["weight"]
    pre = nn.Embedding.from_pretrained(tg.tensor([[1.0, 2.0], [3.0, 4.0]]))
    assert not pre.weight.requires_grad
    np.testing.assert_array_equal(pre(tg.tensor([1, 1, 0])).numpy(), [[3, 4], [3, 4], [1, 2]])
    with pytest.raises(TypeError, match="indices must be an int64"):
        emb(tg.tensor([0.0, 1.0]))
    with pytest.raises(IndexError):
        emb(tg.tensor([5]))
    table = f64(np.random.default_rng(0).standard_normal((4, 2)))
    assert tg.gradcheck(lambda t: F.embedding(tg.tensor([3, 0, 3, 2]), t), (table,))


@pytest.mark.parametrize("backend", BACKENDS)
def test_embedding_compiles(backend):
    tg.manual_seed(0)
    emb = nn.Embedding(6, 4)
    head = nn.Linear(4, 2)
    idx = tg.tensor([[0, 5, 5], [2, 1, 0]])

    def f(i):
        return head(emb(i)).pow(2).sum()

    out = tg.compile(f, backend=backend)(idx)
    out.backward()
    grads = [p.grad.numpy().copy() for p in (emb.weight, head.weight)]
    emb.zero_grad()
    head.zero_grad()
    ref = f(idx)
    ref.backward()
    assert out.item() == pytest.approx(ref.item(), rel=1e-5)
    for g, p in zip(grads, (emb.weight, head.weight)):
        np.testing.assert_allclose(g, p.grad.numpy(), rtol=1e-4, atol=1e-6)
