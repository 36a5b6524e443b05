"""Convolutions (F.conv1d/2d, conv_transpose2d, nn.Conv1d/2d, ConvTranspose2d) and F.pad: values
against direct-loop NumPy references and numbers computed with torch 2.13 (written as literals),
gradients against finite differences (tg.gradcheck, float64), compiled against eager."""
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tracegrad as tg
import tracegrad.nn.functional as F

# ---------------------------------------------------------------- direct-loop references


def ref_conv(x, w, b, stride, pads, dilation, groups):
    """Cross-correlation by loops over output positions and kernel offsets; pads: (lo, hi) per axis."""
    d = x.ndim - 2
    xp = np.pad(x, [(0, 0), (0, 0)] + list(pads))
    kernel, o_ch, cg = w.shape[2:], w.shape[0], w.shape[1]
    out = [(xp.shape[2 + i] - dilation[i] * (kernel[i] - 1) - 1) // stride[i] + 1 for i in range(d)]
    y = np.zeros((x.shape[0], o_ch, *out))
    for o in range(o_ch):
        g = o // (o_ch // groups)
        for pos in np.ndindex(*out):
            for k in np.ndindex(*kernel):
                at = tuple(p * s + kk * dl for p, s, kk, dl in zip(pos, stride, k, dilation))
                y[(slice(None), o) + pos] += xp[(slice(None), slice(g * cg, (g + 1) * cg)) + at] @ w[(o, slice(None)) + k]
    return y if b is None else y + b.reshape(o_ch, *(1,) * d)


def ref_conv_transpose(x, w, stride, padding, output_padding, dilation):
    """Every input element scatters its weighted kernel into the output (groups=1)."""
    d, kernel = x.ndim - 2, w.shape[2:]
    full = [(x.shape[2 + i] - 1) * stride[i] + dilation[i] * (kernel[i] - 1) + 1 + output_padding[i] for i in range(d)]
    y = np.zeros((x.shape[0], w.shape[1], *full))
    for pos in np.ndindex(*x.shape[2:]):
        for k in np.ndindex(*kernel):
            at = tuple(p * s + kk * dl for p, s, kk, dl in zip(pos, stride, k, dilation))
            y[(slice(None), slice(None)) + at] += x[(slice(None), slice(None)) + pos] @ w[(slice(None), slice(None)) + k]
    return y[(slice(None), slice(None)) + tuple(slice(p, f - p) for p, f in zip(padding, full))]


def t64(a, grad=True):
    return tg.tensor(np.asarray(a, np.float64), requires_grad=grad)


@st.composite
def conv_cases(draw):
    d = draw(st.sampled_from([1, 2]))
    groups = draw(st.sampled_from([1, 2, 3]))
    cin, cout = groups * draw(st.integers(1, 2)), groups * draw(st.integers(1, 2))
    kernel = tuple(draw(st.integers(1, 3)) for _ in range(d))
    stride = tuple(draw(st.integers(1, 3)) for _ in range(d))
    dilation = tuple(draw(st.integers(1, 2)) for _ in range(d))
    padding = tuple(draw(st.integers(0, 2)) for _ in range(d))
    size = tuple(max(dl * (k - 1) + 1 - 2 * p, 1) + draw(st.integers(0, 4))
                 for k, dl, p in zip(kernel, dilation, padding))
    bias = draw(st.booleans())
    seed = draw(st.integers(0, 2**16))
    return d, groups, cin, cout, kernel, stride, dilation, padding, size, bias, seed


@settings(max_examples=40, deadline=None)
@given(conv_cases())
def test_conv_matches_direct_loops_and_finite_differences(case):
    d, groups, cin, cout, kernel, stride, dilation, padding, size, bias, seed = case
    rng = np.random.default_rng(seed)
    x, w = rng.standard_normal((2, cin, *size)), rng.standard_normal((cout, cin // groups, *kernel))
    b = rng.standard_normal(cout) if bias else None
    conv = F.conv1d if d == 1 else F.conv2d
    args = (t64(x), t64(w)) + ((t64(b),) if bias else ())

    def f(x, w, b=None):
        return conv(x, w, b, stride=stride, padding=padding, dilation=dilation, groups=groups)
    want = ref_conv(x, w, b, stride, [(p, p) for p in padding], dilation, groups)
    np.testing.assert_allclose(f(*args).detach().numpy(), want, rtol=1e-12, atol=1e-12)
    assert tg.gradcheck(f, args)


@pytest.mark.parametrize("d, groups, stride, padding, dilation", [
    (2, 1, (2, 1), (1, 0), (1, 2)), (2, 2, 1, "same", (2, 1)), (2, 4, 2, 1, 1), (1, 1, 2, 2, 1), (1, 2, 1, "valid", 2)])
def test_compiled_conv_equals_eager_values_and_gradients(d, groups, stride, padding, dilation):
    """The im2col copy, BLAS product and the bias + relu epilogue compiled; gradients through the
    compiled backward (its col2im a host kernel), float32, against eager."""
    rng = np.random.default_rng(0)
    x = tg.tensor(rng.standard_normal((3, 4, *(9,) * d)).astype(np.float32), requires_grad=True)
    w = tg.tensor(rng.standard_normal((6 if groups != 4 else 4, 4 // groups, *(3,) * d)).astype(np.float32),
                  requires_grad=True)
    b = tg.tensor(rng.standard_normal(w.shape[0]).astype(np.float32), requires_grad=True)
    conv = F.conv1d if d == 1 else F.conv2d

    def step(x, w, b):
        y = conv(x, w, b, stride=stride, padding=padding, dilation=dilation, groups=groups).relu()
        return (y * y).sum()
    got = tg.compile(step)(x, w, b)
    got.backward()
    grads = [t.grad.numpy().copy() for t in (x, w, b)]
    for t in (x, w, b):
        t.grad = None
    want = step(x, w, b)
    want.backward()
    np.testing.assert_allclose(got.item(), want.item(), rtol=1e-5)
    for g, t in zip(grads, (x, w, b)):
        np.testing.assert_allclose(g, t.grad.numpy(), rtol=1e-4, atol=1e-4)


def test_compiled_conv_gradcheck_float64():
    rng = np.random.default_rng(1)
    x, w, b = t64(rng.standard_normal((2, 2, 6, 5))), t64(rng.standard_normal((4, 1, 3, 2))), t64(rng.standard_normal(4))
    f = tg.compile(lambda x, w, b: F.conv2d(x, w, b, stride=(2, 1), padding=1, groups=2).tanh())
    assert tg.gradcheck(f, (x, w, b))
    np.testing.assert_allclose(f(x, w, b).detach().numpy(),
                               np.tanh(ref_conv(x.detach().numpy(), w.detach().numpy(), b.detach().numpy(), (2, 1),
                                                [(1, 1), (1, 1)], (1, 1), 2)), rtol=1e-12)


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 11), st.integers(1, 11), st.integers(1, 3), st.integers(1, 2), st.integers(0, 1), st.integers(2, 3),
       st.integers(0, 2 ** 16))
def test_one_product_and_per_entry_convolutions_match_loops_eager_and_compiled(h, w, k, stride, pad, batch, seed):
    """A convolution of one group is one product for the whole batch where each entry has at most
    convolution.ONE_PRODUCT_POSITIONS (100) output positions, else a product per entry (sizes drawn on
    both sides): values against the loops, then a conv-batchnorm-relu-pool block (W10's) compiled against
    eager, values and gradients, float64; the eager output is contiguous (it takes .view, as PyTorch's)."""
    h, w = h + k - 1, 2 * w + k - 1          # 1 to 242 output positions per entry
    rng = np.random.default_rng(seed)
    x, wt = rng.standard_normal((batch, 3, h, w)), rng.standard_normal((5, 3, k, k))
    y = F.conv2d(t64(x), t64(wt), stride=stride, padding=pad)
    np.testing.assert_allclose(y.detach().numpy(), ref_conv(x, wt, None, (stride,) * 2, [(pad, pad)] * 2, (1, 1), 1),
                               rtol=1e-12, atol=1e-12)
    assert y.is_contiguous() and y.view(batch, -1).shape[1] == math.prod(y.shape[1:])
    g = rng.standard_normal(F.max_pool2d(y, 2, ceil_mode=True).shape)

    def step(x, wt, gamma, beta):
        y = F.batch_norm(F.conv2d(x, wt, stride=stride, padding=pad), None, None, gamma, beta, training=True)
        loss = (F.max_pool2d(y.relu(), 2, ceil_mode=True) * tg.tensor(g)).sum()
        loss.backward()
        return loss
    args = [rng.standard_normal(s) for s in ((batch, 3, h, w), (5, 3, k, k), (5,), (5,))]
    eager, compiled = [t64(a) for a in args], [t64(a) for a in args]
    want, got = step(*eager), tg.compile(step)(*compiled)
    np.testing.assert_allclose(got.item(), want.item(), rtol=1e-10, atol=1e-10)
    for c, e in zip(compiled, eager):
        np.testing.assert_allclose(c.grad.numpy(), e.grad.numpy(), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("size", [6, 12])
def test_compiled_one_group_conv_gradcheck_float64(size):
    """Both forms of a one-group convolution (one product: 6x6 outputs; per entry: 12x12), compiled,
    against central differences."""
    rng = np.random.default_rng(size)
    x, w, b = t64(rng.standard_normal((2, 2, size, size))), t64(rng.standard_normal((3, 2, 3, 3))), t64(rng.standard_normal(3))
    f = tg.compile(lambda x, w, b: F.conv2d(x, w, b, padding=1).tanh())
    assert tg.gradcheck(f, (x, w, b))


def test_one_product_convolution_with_a_symbolic_batch_matches_eager():
    """Compiled with dynamic=True, the one product over the batch (6x6 outputs) serves other batch
    sizes, values and gradients as eager's; a 12x12 input retraces (the weight's kernel size is a symbol
    too here, and the windows' count, a size divided by it, pins the spatial sizes: S0 == 6) and takes
    the per-entry products."""
    rng = np.random.default_rng(5)
    w = rng.standard_normal((4, 3, 3, 3))

    def step(x, w):
        loss = (F.conv2d(x, w, padding=1).relu() ** 2).sum()
        loss.backward()
        return loss
    f = tg.compile(step, dynamic=True)
    for n, size in ((2, 6), (3, 6), (1, 6), (2, 12)):
        x = rng.standard_normal((n, 3, size, size))
        leaves, eager = (t64(x), t64(w)), (t64(x), t64(w))
        np.testing.assert_allclose(f(*leaves).item(), step(*eager).item(), rtol=1e-12)
        for a, b in zip(leaves, eager):
            np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-10, atol=1e-12)
    assert f.stats()["traces"] == 2, f.stats()["retrace_reasons"]


# ---------------------------------------------------------------- torch 2.13 literals

def _literal_inputs():
    x = (np.arange(2 * 3 * 5 * 5, dtype=np.float64).reshape(2, 3, 5, 5) % 7 - 3) / 4
    w = (np.arange(4 * 3 * 3 * 2, dtype=np.float64).reshape(4, 3, 3, 2) % 5 - 2) / 3
    return x, w, np.array([0.5, -1.0, 0.25, 2.0])


def test_conv2d_and_its_gradients_match_torch_literals():
    x, w, b = _literal_inputs()
    xt, wt = t64(x), t64(w)
    y = F.conv2d(xt, wt, t64(b, False), stride=(2, 1), padding=(1, 0), dilation=(1, 2))
    assert y.shape == (2, 4, 3, 3) and y.grad_fn.name() == "ConvolutionBackward"
    np.testing.assert_allclose(y.detach().numpy().reshape(-1)[:6], [4 / 3, 0.75, -5 / 12, -7 / 12, 1 / 3, 11 / 6])
    np.testing.assert_allclose(y.detach().numpy().sum(), 31.25)
    (y * y).sum().backward()
    np.testing.assert_allclose(xt.grad.numpy().reshape(-1)[:8], [-1.3333333333333328, 0.16666666666666696,
                               1.2222222222222225, 1.8888888888888888, 2.2777777777777777, 7.61111111111111, 4.5,
                               -11.666666666666668])
    np.testing.assert_allclose(xt.grad.numpy().sum(), 5.944444444444445)
    np.testing.assert_allclose(wt.grad.numpy().reshape(-1)[:6], [-6.374999999999998, -1.1249999999999996,
                               1.1666666666666656, -10.083333333333334, 8.500000000000002, -1.5833333333333337])


def test_conv_transpose2d_matches_torch_literals_and_scatter_loops():
    x, w, _ = _literal_inputs()
    x, w = x[:, :3, :3, :3], w[:3, :2]
    z = F.conv_transpose2d(t64(x), t64(w), stride=2, padding=1, output_padding=1)
    assert z.shape == (2, 2, 6, 5)
    np.testing.assert_allclose(z.detach().numpy().reshape(-1)[:10], [-2 / 3, -5 / 12, -0.5, -0.5, -1 / 3, 5 / 12,
                                                                     -5 / 12, 1 / 3, 7 / 12, 5 / 6], atol=1e-15)
    np.testing.assert_allclose(z.detach().numpy().sum(), -3.666666666666665)
    np.testing.assert_allclose(z.detach().numpy(), ref_conv_transpose(x, w, (2, 2), (1, 1), (1, 1), (1, 1)), atol=1e-14)


@settings(max_examples=20, deadline=None)
@given(st.integers(1, 3), st.integers(0, 2), st.integers(1, 2), st.integers(0, 2), st.integers(1, 3), st.integers(0, 99))
def test_conv_transpose_is_the_input_gradient_of_conv(stride, padding, dilation, extra, k, seed):
    """conv_transpose2d(g, w) is d/dx <conv2d(x, w), g>, and matches the scatter loops; gradcheck."""
    extra = extra % max(stride, dilation)
    rng = np.random.default_rng(seed)
    x, w = rng.standard_normal((2, 2, 4, 3)), rng.standard_normal((2, 3, k, 2))
    args = dict(stride=stride, padding=padding, output_padding=extra, dilation=dilation)
    want = ref_conv_transpose(x, w, (stride,) * 2, (padding,) * 2, (extra,) * 2, (dilation,) * 2)
    if min(want.shape[2:]) < 1:
        with pytest.raises(RuntimeError, match=r"output size of input \[2, 2, 4, 3\] .* is not positive"):
            F.conv_transpose2d(t64(x), t64(w), **args)
        return
    z = F.conv_transpose2d(t64(x), t64(w), **args)
    np.testing.assert_allclose(z.detach().numpy(), want, atol=1e-12)
    probe = t64(rng.standard_normal(z.shape))
    if extra == 0:          # output padding adds positions no input reaches: the identity needs none
        (gx,) = tg.grad((F.conv2d(probe, t64(w, False), stride=stride, padding=padding, dilation=dilation)
                         * t64(x, False)).sum(), probe)
        np.testing.assert_allclose(gx.numpy(), z.detach().numpy(), atol=1e-12)
    assert tg.gradcheck(lambda x, w: F.conv_transpose2d(x, w, **args), (t64(x), t64(w)))


def test_compiled_conv_transpose_equals_eager():
    rng = np.random.default_rng(2)
    x, w = t64(rng.standard_normal((2, 4, 3, 4))), t64(rng.standard_normal((4, 3, 3, 3)))
    b = t64(rng.standard_normal(6))
    f = lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1, groups=2)  # noqa: E731
    np.testing.assert_allclose(tg.compile(f)(x, w, b).detach().numpy(), f(x, w, b).detach().numpy(), rtol=1e-12)
    assert tg.gradcheck(tg.compile(f), (x, w, b))


# ---------------------------------------------------------------- padding

@settings(max_examples=30, deadline=None)
@given(st.sampled_from(["constant", "reflect", "replicate", "circular"]), st.lists(st.integers(0, 3), min_size=2,
       max_size=4), st.integers(0, 99))
def test_pad_matches_numpy_pad(mode, amounts, seed):
    x = np.random.default_rng(seed).standard_normal((2, 4, 5))
    amounts = amounts[: 2 * (len(amounts) // 2)]
    pairs = [(0, 0)] * (3 - len(amounts) // 2) + [tuple(amounts[i:i + 2]) for i in range(len(amounts) - 2, -1, -2)]
    np_mode = {"constant": "constant", "reflect": "reflect", "replicate": "edge", "circular": "wrap"}[mode]
    kw = {"constant_values": 1.5} if mode == "constant" else {}
    got = F.pad(t64(x), amounts, mode=mode, **({"value": 1.5} if mode == "constant" else {}))
    np.testing.assert_array_equal(got.detach().numpy(), np.pad(x, pairs, mode=np_mode, **kw))
    assert tg.gradcheck(lambda t: F.pad(t, amounts, mode=mode) ** 2, (t64(x),))


def test_pad_crops_with_negative_amounts_and_compiles():
    x = t64(np.arange(12.0).reshape(3, 4))
    f = lambda x: F.pad(x, (-1, 2, 1, -2), value=-1.0)   # noqa: E731
    want = np.pad(np.arange(12.0).reshape(3, 4)[:1, 1:], [(1, 0), (0, 2)], constant_values=-1.0)
    np.testing.assert_array_equal(f(x).detach().numpy(), want)
    np.testing.assert_array_equal(tg.compile(f)(x).detach().numpy(), want)
    assert tg.gradcheck(tg.compile(lambda x: f(x) ** 2), (x,))


# ---------------------------------------------------------------- modules

def test_conv_modules_init_as_pytorch_and_run():
    tg.manual_seed(0)
    m = tg.nn.Conv2d(8, 16, 3, padding=1, groups=2)
    assert repr(m) == "Conv2d(8, 16, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1), groups=2)"
    bound = 1 / math.sqrt(4 * 9)
    for p in (m.weight, m.bias):
        assert np.abs(p.detach().numpy()).max() <= bound
    assert m.weight.shape == (16, 4, 3, 3) and abs(m.weight.detach().numpy().std() - bound / math.sqrt(3)) < 0.02
    assert [n for n, _ in m.named_parameters()] == ["weight", "bias"]
    x = np.random.default_rng(0).standard_normal((2, 8, 6, 6)).astype(np.float32)
    np.testing.assert_allclose(m(tg.tensor(x)).detach().numpy(),
                               ref_conv(x, m.weight.detach().numpy(), m.bias.detach().numpy(), (1, 1), [(1, 1)] * 2,
                                        (1, 1), 2), rtol=1e-4, atol=1e-5)
    c1 = tg.nn.Conv1d(3, 5, 4, padding="same", bias=False, padding_mode="reflect")
    assert c1.bias is None and c1(tg.randn(2, 3, 7)).shape == (2, 5, 7) and c1(tg.randn(3, 7)).shape == (5, 7)
    t = tg.nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1)
    assert t.weight.shape == (4, 6, 3, 3) and t(tg.randn(1, 4, 5, 5)).shape == (1, 6, 10, 10)


def test_conv_errors_name_the_shapes():
    x, w = tg.randn(2, 4, 8, 8), tg.randn(6, 2, 3, 3)
    with pytest.raises(RuntimeError, match=r"expected input\[2, 4, 8, 8\] to have 2 channels, but got 4"):
        F.conv2d(x, w)
    with pytest.raises(RuntimeError, match=r"Given groups=4, expected weight to be divisible by 4 at dimension 0"):
        F.conv2d(x, tg.randn(6, 1, 3, 3), groups=4)
    with pytest.raises(RuntimeError, match=r"padded input size per channel: \(4 x 4\). Kernel size: \(5 x 5\)"):
        F.conv2d(tg.randn(1, 2, 4, 4), tg.randn(3, 2, 5, 5))
    with pytest.raises(ValueError, match="padding='same' is not supported for strided convolutions"):
        F.conv2d(x, w, stride=2, padding="same", groups=2)
    with pytest.raises(RuntimeError, match=r"expected bias to be 1-dimensional with 6 elements, but got bias of size \[5\]"):
        F.conv2d(x, w, tg.randn(5), groups=2)
    with pytest.raises(RuntimeError, match=r"Expected 3D \(unbatched\) or 4D \(batched\) input to conv2d, but got "
                                           r"input of size: \[4, 8\]"):
        F.conv2d(tg.randn(4, 8), w)
    with pytest.raises(ValueError, match=r"in_channels \(3\) must be divisible by groups \(2\)"):
        tg.nn.Conv2d(3, 4, 3, groups=2)


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 7), st.integers(1, 7), st.integers(1, 3), st.integers(1, 3), st.integers(1, 3), st.integers(1, 3))
def test_sliding_windows_views_equal_numpy_windows(h, w, kh, kw, sh, sw):
    """The windows view (any step) and its tiling shortcut (step == size: reshape and permute) both
    hold NumPy's sliding windows; the gradient of their sum counts each element's windows."""
    from tracegrad.convolution import sliding
    if kh > h or kw > w:
        return
    x = np.arange(2.0 * h * w).reshape(1, 2, h, w)
    want = np.lib.stride_tricks.sliding_window_view(x, (kh, kw), axis=(2, 3))[:, :, ::sh, ::sw]
    for step in ((sh, sw), (kh, kw)):
        xt = t64(x)
        got = sliding(xt, (2, 3), (kh, kw), step, (1, 1))
        ref = np.lib.stride_tricks.sliding_window_view(x, (kh, kw), axis=(2, 3))[:, :, ::step[0], ::step[1]]
        np.testing.assert_array_equal(got.detach().numpy(), ref)
        got.sum().backward()
        count = np.zeros_like(x)
        for i, j in np.ndindex(*ref.shape[2:4]):
            count[:, :, i * step[0]:i * step[0] + kh, j * step[1]:j * step[1] + kw] += 1
        np.testing.assert_array_equal(xt.grad.numpy(), count)
    assert want.shape[2:] == sliding(t64(x), (2, 3), (kh, kw), (sh, sw), (1, 1)).shape[2:]


@pytest.mark.parametrize("kernel, host", [(3, False), (28, True)])
def test_compiled_input_gradient_is_a_fused_window_sum(kernel, host):
    """The scatter-add of the windows (the input gradient) compiles to a fused sum of gathers, up to
    window_sums.MAX_OFFSETS offsets; beyond, a host kernel. Both equal eager."""
    rng = np.random.default_rng(3)
    x = tg.tensor(rng.standard_normal((2, 3, 40)), requires_grad=True)
    w = tg.tensor(rng.standard_normal((4, 3, kernel)))

    def step(x, w):
        loss = (F.conv1d(x, w, stride=2, padding=2) ** 2).sum()
        loss.backward()
        return loss
    f = tg.compile(step)
    f(x, w)
    got, x.grad = x.grad.numpy().copy(), None
    step(x, w)
    np.testing.assert_allclose(got, x.grad.numpy(), rtol=1e-10)
    assert any(k["kind"] == "host" and "unwindows" in k["ops"] for k in f.profile(x, w)) == host


def test_conv3d_and_forward_mode():
    """conv3d against the loops (the same N-d code path), and tg.jvp of a conv2d (the windows view's
    and its scatter's JVP rules) against central differences."""
    rng = np.random.default_rng(4)
    x, w = rng.standard_normal((1, 2, 4, 5, 3)), rng.standard_normal((4, 1, 2, 3, 2))
    got = F.conv3d(t64(x), t64(w), stride=(1, 2, 1), padding=1, groups=2)
    np.testing.assert_allclose(got.detach().numpy(), ref_conv(x, w, None, (1, 2, 1), [(1, 1)] * 3, (1, 1, 1), 2),
                               atol=1e-12)
    assert tg.gradcheck(lambda x, w: F.conv3d(x, w, stride=(1, 2, 1), padding=1, groups=2), (t64(x), t64(w)))
    x2, v = rng.standard_normal((1, 2, 6, 5)), rng.standard_normal((1, 2, 6, 5))
    w2 = t64(rng.standard_normal((3, 2, 3, 3)), False)
    f = lambda t: F.conv_transpose2d(F.conv2d(t, w2, stride=2, padding=1) ** 2, w2)  # noqa: E731
    _, tangent = tg.jvp(f, (t64(x2, False),), (t64(v, False),))
    eps = 1e-6
    fd = (f(t64(x2 + eps * v, False)).numpy() - f(t64(x2 - eps * v, False)).numpy()) / (2 * eps)
    np.testing.assert_allclose(tangent.numpy(), fd, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
def test_padded_convolution_modules_compile_as_eager(mode):
    rng = np.random.default_rng(6)
    tg.manual_seed(1)
    m = tg.nn.Conv2d(2, 3, 3, padding=(2, 1), padding_mode=mode).double()
    x = t64(rng.standard_normal((2, 2, 5, 4)))
    f = tg.compile(lambda x: m(x).tanh())
    np.testing.assert_allclose(f(x).detach().numpy(), m(x).tanh().detach().numpy(), rtol=1e-12)
    assert tg.gradcheck(f, (x,))


def test_unfold_fold_and_tensor_unfold():
    """F.unfold against NumPy's sliding windows, F.fold against adding windows back by loops,
    Tensor.unfold as torch's (a view), compiled == eager, gradcheck."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 3, 7, 6))
    kw = dict(kernel_size=(2, 3), dilation=(2, 1), padding=1, stride=(2, 1))
    cols = F.unfold(t64(x), **kw)
    win = np.lib.stride_tricks.sliding_window_view(np.pad(x, [(0, 0)] * 2 + [(1, 1)] * 2), (3, 3), axis=(2, 3))
    win = win[:, :, ::2, :, ::2, :]                        # dilation 2 along h: every other row of a 3-window
    want = win.transpose(0, 1, 4, 5, 2, 3).reshape(2, 18, -1)
    np.testing.assert_array_equal(cols.detach().numpy(), want)
    back = np.zeros((2, 3, 9, 8))
    c = want.reshape(2, 3, 2, 3, 4, 6)
    for i, j, a, b in np.ndindex(4, 6, 2, 3):
        back[:, :, 2 * i + 2 * a, j + b] += c[:, :, a, b, i, j]
    np.testing.assert_allclose(F.fold(cols, (7, 6), **kw).detach().numpy(), back[:, :, 1:-1, 1:-1], atol=1e-14)
    f = lambda t: F.fold(F.unfold(t, **kw) ** 2, (7, 6), **kw)   # noqa: E731
    np.testing.assert_allclose(tg.compile(f)(t64(x)).detach().numpy(), f(t64(x)).detach().numpy(), rtol=1e-12)
    assert tg.gradcheck(f, (t64(x),)) and tg.gradcheck(tg.compile(f), (t64(x),))
    t = tg.tensor(np.arange(10.0))
    np.testing.assert_array_equal(t.unfold(0, 3, 2).numpy(), [[0, 1, 2], [2, 3, 4], [4, 5, 6], [6, 7, 8]])
    assert np.shares_memory(t.unfold(0, 3, 2).numpy(), t.numpy())
    assert repr(tg.nn.Fold((4, 5), 2)) == "Fold(output_size=(4, 5), kernel_size=2, dilation=1, padding=0, stride=1)"
    assert tg.nn.Unfold(2)(tg.randn(1, 2, 4, 5)).shape == (1, 8, 12)


def test_empty_batches_pass_through_eager_and_compiled():
    """A batch of 0 (a zero-size dimension everywhere along the way): shapes as PyTorch's, zero gradients."""
    x, w = tg.randn(0, 3, 8, 8, requires_grad=True), tg.randn(4, 3, 3, 3, requires_grad=True)

    def step(x, w):
        loss = F.avg_pool2d(F.max_pool2d(F.conv2d(x, w, padding=1), 2), 3, 1, 1).sum()
        loss.backward()
        return loss
    assert F.conv2d(x, w, padding=1).shape == (0, 4, 8, 8) and F.pad(tg.ones(3), (-3, 0)).shape == (0,)
    assert tg.compile(step)(x, w).item() == 0.0 and w.grad.shape == (4, 3, 3, 3)
    assert not w.grad.numpy().any()
