"""Pooling (max, average, adaptive average) and F.interpolate: values against direct-loop NumPy
references and torch 2.13 literals, the max pool's gradient routed to the argmax, gradcheck in
float64 eager and compiled, compiled == eager."""
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tracegrad as tg
import tracegrad.nn.functional as F


def t64(a, grad=True):
    return tg.tensor(np.asarray(a, np.float64), requires_grad=grad)


def out_size(n, k, s, p, d, ceil_mode):
    span = d * (k - 1) + 1
    o = (n + 2 * p - span + (s - 1 if ceil_mode else 0)) // s + 1
    return o - 1 if ceil_mode and (o - 1) * s >= n + p else o


def ref_max_pool2d(x, k, s, p, d, ceil_mode):
    """(values, flat indices, gradient of values.sum()) by loops; the first maximum of a window wins."""
    H, W = x.shape[2:]
    oh, ow = out_size(H, k, s, p, d, ceil_mode), out_size(W, k, s, p, d, ceil_mode)
    vals, idx, grad = np.zeros(x.shape[:2] + (oh, ow)), np.zeros(x.shape[:2] + (oh, ow), int), np.zeros(x.shape)
    for n, c, i, j in np.ndindex(*vals.shape):
        best, at = -np.inf, None
        for a, b in np.ndindex(k, k):
            h, w = i * s - p + a * d, j * s - p + b * d
            if 0 <= h < H and 0 <= w < W and (at is None or x[n, c, h, w] > best):
                best, at = x[n, c, h, w], (h, w)
        if at is None:        # a window of padding only (dilated): -inf, no gradient, an index of no meaning
            vals[n, c, i, j], idx[n, c, i, j] = -np.inf, -1
            continue
        vals[n, c, i, j], idx[n, c, i, j] = best, at[0] * W + at[1]
        grad[(n, c) + at] += 1
    return vals, idx, grad


def ref_avg_pool2d(x, k, s, p, ceil_mode, count_include_pad):
    H, W = x.shape[2:]
    oh, ow = out_size(H, k, s, p, 1, ceil_mode), out_size(W, k, s, p, 1, ceil_mode)
    out = np.zeros(x.shape[:2] + (oh, ow))
    for i, j in np.ndindex(oh, ow):
        h0, w0 = i * s - p, j * s - p
        h1, w1 = min(h0 + k, H + p), min(w0 + k, W + p)
        size = (h1 - h0) * (w1 - w0)
        h0, w0, h1, w1 = max(h0, 0), max(w0, 0), min(h1, H), min(w1, W)
        div = size if count_include_pad else (h1 - h0) * (w1 - w0)
        out[:, :, i, j] = x[:, :, h0:h1, w0:w1].sum((2, 3)) / div
    return out


def ref_adaptive_avg_pool2d(x, oh, ow):
    H, W = x.shape[2:]
    out = np.zeros(x.shape[:2] + (oh, ow))
    for i, j in np.ndindex(oh, ow):
        h0, h1 = i * H // oh, -(-(i + 1) * H // oh)
        w0, w1 = j * W // ow, -(-(j + 1) * W // ow)
        out[:, :, i, j] = x[:, :, h0:h1, w0:w1].mean((2, 3))
    return out


@st.composite
def pool_cases(draw):
    k = draw(st.integers(1, 4))
    d = draw(st.integers(1, 2))
    p = draw(st.integers(0, (d * (k - 1) + 1) // 2))
    s = draw(st.integers(1, 3))
    size = (max(d * (k - 1) + 1 - 2 * p, 1) + draw(st.integers(0, 4)), max(d * (k - 1) + 1 - 2 * p, 1) + draw(st.integers(0, 4)))
    return k, s, p, d, draw(st.booleans()), size, draw(st.integers(0, 999))


@settings(max_examples=40, deadline=None)
@given(pool_cases())
def test_max_pool2d_values_indices_and_gradient_match_loops(case):
    k, s, p, d, ceil_mode, size, seed = case
    x = np.random.default_rng(seed).integers(-3, 3, (2, 2) + size).astype(np.float64)   # ties: the first wins
    xt = t64(x)
    vals, idx = F.max_pool2d(xt, k, s, p, d, ceil_mode=ceil_mode, return_indices=True)
    want_vals, want_idx, want_grad = ref_max_pool2d(x, k, s, p, d, ceil_mode)
    np.testing.assert_array_equal(vals.detach().numpy(), want_vals)
    np.testing.assert_array_equal(np.where(want_idx < 0, -1, idx.numpy()), want_idx)
    vals.sum().backward()
    np.testing.assert_array_equal(xt.grad.numpy(), want_grad)


@settings(max_examples=40, deadline=None)
@given(pool_cases(), st.booleans())
def test_avg_pool2d_matches_loops_and_finite_differences(case, count_include_pad):
    k, s, p, _, ceil_mode, size, seed = case
    p = min(p, k // 2)                     # no dilation here
    x = np.random.default_rng(seed).standard_normal((2, 2) + size)
    f = lambda t: F.avg_pool2d(t, k, s, p, ceil_mode, count_include_pad)  # noqa: E731
    np.testing.assert_allclose(f(t64(x)).detach().numpy(), ref_avg_pool2d(x, k, s, p, ceil_mode, count_include_pad),
                               rtol=1e-12, atol=1e-14)
    assert tg.gradcheck(f, (t64(x),))


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 9), st.integers(1, 9), st.integers(1, 6), st.integers(1, 6), st.integers(0, 99))
def test_adaptive_avg_pool2d_matches_loops(h, w, oh, ow, seed):
    x = np.random.default_rng(seed).standard_normal((2, 3, h, w))
    got = F.adaptive_avg_pool2d(t64(x), (oh, ow))
    np.testing.assert_allclose(got.detach().numpy(), ref_adaptive_avg_pool2d(x, oh, ow), rtol=1e-12, atol=1e-14)
    assert tg.gradcheck(lambda t: F.adaptive_avg_pool2d(t, (oh, ow)), (t64(x[:1, :1]),))


def test_pools_compiled_equal_eager_and_gradcheck():
    rng = np.random.default_rng(0)
    x = t64(rng.standard_normal((2, 3, 9, 8)))

    def f(x):
        return (F.max_pool2d(x, 3, 2, 1, ceil_mode=True) ** 2).sum() + F.avg_pool2d(x, 3, 2, 1, True, False).sum() \
            + (F.adaptive_avg_pool2d(x, (4, 3)) ** 2).sum() + F.max_pool1d(x.flatten(2), 4, 3).sum()
    cf = tg.compile(f)
    got = cf(x)
    got.backward()
    g = x.grad.numpy().copy()
    x.grad = None
    want = f(x)
    want.backward()
    np.testing.assert_allclose(got.item(), want.item(), rtol=1e-12)
    np.testing.assert_allclose(g, x.grad.numpy(), rtol=1e-12)
    assert tg.gradcheck(cf, (t64(rng.standard_normal((1, 2, 7, 6))),))


def test_pools_match_torch_literals():
    x = t64((np.arange(2 * 3 * 5 * 5).reshape(2, 3, 5, 5) % 7 - 3) / 4, False)
    v, i = F.max_pool2d(x, 3, 2, 1, ceil_mode=True, return_indices=True)
    assert v.shape == (2, 3, 3, 3) and i.dtype == tg.int64
    np.testing.assert_array_equal(v[0, 0].numpy(), [[0.75, 0.75, 0.25], [0.75, 0.75, 0.75], [0.75, 0.25, 0.5]])
    np.testing.assert_array_equal(i[0, 0].numpy(), [[6, 6, 4], [6, 6, 13], [20, 18, 19]])
    np.testing.assert_allclose(F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False)[1, 2].numpy(),
                               [[0.1875, -1 / 6, -0.375], [-0.125, 1 / 18, 1 / 24], [0.0, -5 / 24, -0.125]], atol=1e-15)
    np.testing.assert_allclose(F.avg_pool2d(x, 2, 2, 1, ceil_mode=True)[0, 1].numpy(),
                               [[0.0625, 0.3125, -0.3125], [-0.25, -0.125, 0.375], [0.125, 0.1875, -0.1875]])
    np.testing.assert_allclose(F.adaptive_avg_pool2d(x, (3, 2))[0, 0].numpy(),
                               [[-1 / 6, -0.25], [1 / 18, -1 / 36], [-5 / 24, 0.0]], atol=1e-15)


def test_pool_modules_and_errors():
    x = tg.randn(2, 3, 8, 8)
    assert repr(tg.nn.MaxPool2d(2)) == "MaxPool2d(kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=False)"
    assert tg.nn.MaxPool2d(2)(x).shape == (2, 3, 4, 4) and tg.nn.AvgPool2d(3, 1, 1)(x).shape == (2, 3, 8, 8)
    assert tg.nn.AdaptiveAvgPool2d(1)(x).shape == (2, 3, 1, 1) and tg.nn.MaxPool1d(3)(x[0]).shape == (3, 8, 2)
    v, i = tg.nn.MaxPool2d(2, return_indices=True)(x[0])
    assert v.shape == i.shape == (3, 4, 4)
    with pytest.raises(RuntimeError, match="pad should be at most half of effective kernel size"):
        F.max_pool2d(x, 2, padding=2)
    with pytest.raises(RuntimeError, match=r"Given input size: \(3x2x2\). Calculated output size: \(3x0x0\). Output "
                                           r"size is too small"):
        F.max_pool2d(tg.randn(1, 3, 2, 2), 3)


# ---------------------------------------------------------------- interpolate

def ref_bilinear(x, oh, ow, align_corners):
    """PyTorch's source positions and weights (area_pixel_compute_source_index), by loops."""
    H, W = x.shape[2:]

    def src(n, o, i):
        if align_corners:
            return i * (n - 1) / (o - 1) if o > 1 else 0.0
        return max((i + 0.5) * n / o - 0.5, 0.0)
    out = np.zeros(x.shape[:2] + (oh, ow))
    for i, j in np.ndindex(oh, ow):
        h, w = src(H, oh, i), src(W, ow, j)
        h0, w0 = int(h), int(w)
        h1, w1, lh, lw = min(h0 + 1, H - 1), min(w0 + 1, W - 1), h - h0, w - w0
        out[:, :, i, j] = (1 - lh) * ((1 - lw) * x[:, :, h0, w0] + lw * x[:, :, h0, w1]) + \
            lh * ((1 - lw) * x[:, :, h1, w0] + lw * x[:, :, h1, w1])
    return out


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 6), st.integers(1, 6), st.integers(1, 9), st.integers(1, 9), st.booleans(), st.integers(0, 99))
def test_bilinear_and_nearest_match_loops(h, w, oh, ow, align_corners, seed):
    x = np.random.default_rng(seed).standard_normal((1, 2, h, w))
    got = F.interpolate(t64(x), size=(oh, ow), mode="bilinear", align_corners=align_corners)
    np.testing.assert_allclose(got.detach().numpy(), ref_bilinear(x, oh, ow, align_corners), rtol=1e-12, atol=1e-12)
    rows = np.minimum(np.floor(np.arange(oh, dtype=np.float32) * np.float32(h / oh)).astype(int), h - 1)
    cols = np.minimum(np.floor(np.arange(ow, dtype=np.float32) * np.float32(w / ow)).astype(int), w - 1)
    np.testing.assert_array_equal(F.interpolate(t64(x), size=(oh, ow)).detach().numpy(), x[:, :, rows][:, :, :, cols])
    assert tg.gradcheck(lambda t: F.interpolate(t, size=(oh, ow), mode="bilinear", align_corners=align_corners), (t64(x),))


def test_interpolate_matches_torch_literals_compiles_and_refuses_what_it_lacks():
    x = t64(((np.arange(2 * 3 * 5 * 5).reshape(2, 3, 5, 5) % 7 - 3) / 4)[:1, :1, :3, :3])
    np.testing.assert_allclose(F.interpolate(x, size=(4, 5), mode="bilinear")[0, 0, 1].detach().numpy(),
                               [0.03125, 0.13124999999999998, 0.28125, -0.22499999999999984, -0.5625])
    np.testing.assert_allclose(F.interpolate(x, size=(4, 5), mode="bilinear", align_corners=True)[0, 0, 2]
                               .detach().numpy(), [1 / 3, 0.45833333333333337, 0.5833333333333333, 0.125, -1 / 3])
    np.testing.assert_array_equal(F.interpolate(x, scale_factor=1.6)[0, 0].detach().numpy(),
                                  [[-0.75, -0.75, -0.5, -0.5]] * 2 + [[0.5, 0.5, 0.75, 0.75]] * 2)
    f = lambda t: F.interpolate(t, scale_factor=2.5, mode="bilinear").tanh()  # noqa: E731
    np.testing.assert_allclose(tg.compile(f)(x).detach().numpy(), f(x).detach().numpy(), rtol=1e-12)
    assert tg.gradcheck(tg.compile(f), (x,))
    assert tg.nn.Upsample(scale_factor=2)(x).shape == (1, 1, 6, 6)
    with pytest.raises(ValueError, match="Got 4D input, but linear mode needs 3D input"):
        F.interpolate(x, size=4, mode="linear")
    with pytest.raises(NotImplementedError, match="mode 'bicubic' is not implemented"):
        F.interpolate(x, size=4, mode="bicubic")
    assert math.isclose(F.interpolate(t64([[[0.0, 1.0]]]), size=3, mode="linear", align_corners=True)[0, 0, 1].item(), 0.5)


def test_max_pool_nan_is_the_maximum_and_compiles_to_no_host_kernel():
    x = np.arange(16.0).reshape(1, 1, 4, 4)
    x[0, 0, 0, 1] = np.nan
    got = F.max_pool2d(t64(x), 2)
    assert np.isnan(got[0, 0, 0, 0].item()) and got[0, 0, 1, 1].item() == 15.0
    def step(t):
        loss = (F.max_pool2d(t, 2) ** 2).sum()
        loss.backward()
        return loss
    f = tg.compile(step)
    xt = t64(np.random.default_rng(0).standard_normal((2, 3, 8, 9)))
    f(xt)
    got, xt.grad = xt.grad.numpy().copy(), None
    step(xt)
    np.testing.assert_array_equal(got, xt.grad.numpy())
    assert not any(k["kind"] == "host" for k in f.profile(xt))


def test_three_dimensional_pools_match_reshaped_reductions():
    x = np.random.default_rng(5).standard_normal((2, 3, 4, 6, 8))
    tiles = x.reshape(2, 3, 2, 2, 3, 2, 4, 2)
    np.testing.assert_array_equal(F.max_pool3d(t64(x), (2, 2, 2)).detach().numpy(), tiles.max((3, 5, 7)))
    np.testing.assert_allclose(F.avg_pool3d(t64(x), 2).detach().numpy(), tiles.mean((3, 5, 7)), rtol=1e-12)
    np.testing.assert_allclose(F.adaptive_avg_pool3d(t64(x), (2, 3, 4)).detach().numpy(), tiles.mean((3, 5, 7)),
                               rtol=1e-12)
    assert tg.gradcheck(lambda t: F.max_pool3d(t, 2, 1, 1), (t64(x[:1, :1, :3, :3, :3]),))
