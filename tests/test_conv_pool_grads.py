"""A ReLU, a 2x2 max pool, then a convolution (between two CNN blocks, W9/W10's): compiled values against
a NumPy oracle (windows by sliding_window_view, the pool by reshape), compiled gradients against eager
and against central differences (tg.gradcheck, float64), over generated kernel sizes, strides,
paddings, dilations and groups. The convolution's input gradient (a window sum, col2im) is read by the
pool's gradient, each element once per pool position: recomputed there (strided 3x3 windows and less) or
written once (larger: window_sums.RECOMPUTE_OFFSETS, or of stride 1); both paths are drawn."""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import tracegrad as tg
import tracegrad.nn.functional as F
from tracegrad.ir.passes.window_sums import RECOMPUTE_OFFSETS


def np_conv2d(x, w, stride, padding, dilation, groups):
    """Cross-correlation by NumPy windows: (N, C, H, W) x (O, C/groups, KH, KW)."""
    xp = np.pad(x, ((0, 0), (0, 0), (padding[0],) * 2, (padding[1],) * 2))
    kh, kw = w.shape[2:]
    win = np.lib.stride_tricks.sliding_window_view(
        xp, ((kh - 1) * dilation[0] + 1, (kw - 1) * dilation[1] + 1), axis=(2, 3))
    win = win[:, :, ::stride[0], ::stride[1], ::dilation[0], ::dilation[1]]      # (N, C, OH, OW, KH, KW)
    cg, og = x.shape[1] // groups, w.shape[0] // groups
    return np.concatenate([np.einsum("nchwij,ocij->nohw", win[:, g * cg:(g + 1) * cg], w[g * og:(g + 1) * og])
                           for g in range(groups)], axis=1)


def np_block(x, w, b, stride, padding, dilation, groups):
    n, c, h, wd = x.shape
    y = np.maximum(x, 0)[:, :, :h // 2 * 2, :wd // 2 * 2]
    y = y.reshape(n, c, h // 2, 2, wd // 2, 2).max(axis=(3, 5))
    return np_conv2d(y, w, stride, padding, dilation, groups) + b[:, None, None]


@st.composite
def blocks(draw):
    groups = draw(st.sampled_from([1, 2]))
    cin, cout = groups * draw(st.integers(1, 3)), groups * draw(st.integers(1, 3))
    kernel = (draw(st.integers(1, 5)), draw(st.integers(1, 5)))
    stride = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    dilation = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    padding = (draw(st.integers(0, 2)), draw(st.integers(0, 2)))
    size = tuple(2 * (max(dl * (k - 1) + 1 - 2 * p, 1) + draw(st.integers(0, 4))) + draw(st.integers(0, 1))
                 for k, dl, p in zip(kernel, dilation, padding))           # pooled, at least the window
    return groups, cin, cout, kernel, stride, dilation, padding, size, draw(st.integers(0, 2 ** 16))


@settings(max_examples=30, deadline=None)
@given(blocks())
def test_compiled_relu_pool_conv_matches_numpy_eager_and_finite_differences(case):
    groups, cin, cout, kernel, stride, dilation, padding, size, seed = case
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((2, cin, *size))
    w, b = rng.standard_normal((cout, cin // groups, *kernel)), rng.standard_normal(cout)
    g = rng.standard_normal(np_block(x, w, b, stride, padding, dilation, groups).shape)

    def block(x, w, b):
        return F.conv2d(F.max_pool2d(F.relu(x), 2), w, b, stride, padding, dilation, groups)

    def step(x, w, b, g):
        out = block(x, w, b)
        (out * g).sum().backward()
        return out
    leaves = [tg.tensor(a, requires_grad=True) for a in (x, w, b)]
    got = tg.compile(step)(*leaves, tg.tensor(g))
    np.testing.assert_allclose(got.detach().numpy(), np_block(x, w, b, stride, padding, dilation, groups),
                               rtol=1e-10, atol=1e-10, err_msg=str(case))
    grads = [t.grad.numpy() for t in leaves]
    eager = [tg.tensor(a, requires_grad=True) for a in (x, w, b)]
    step(*eager, tg.tensor(g))
    for a, e in zip(grads, eager):
        np.testing.assert_allclose(a, e.grad.numpy(), rtol=1e-10, atol=1e-10, err_msg=str(case))
    assert tg.gradcheck(tg.compile(lambda x, w, b: block(x, w, b) * tg.tensor(g)),
                        [tg.tensor(a, requires_grad=True) for a in (x, w, b)])


def _window_sum_kernels(kernel, stride):
    """The kernels of a max pool then a conv2d of `kernel` and `stride`, gradient of the input, that
    hold the window sum (a sum of gathers) with their strategies: [(space, Strategy)]."""
    from tracegrad.backends.cpu.plan import plan
    rng = np.random.default_rng(0)
    x = tg.tensor(rng.standard_normal((4, 3, 28, 28)).astype(np.float32), requires_grad=True)
    w = tg.tensor(rng.standard_normal((6, 3, kernel, kernel)).astype(np.float32))

    def step(x, w):
        loss = F.conv2d(F.max_pool2d(x, 2), w, stride=stride, padding=1).sum()
        loss.backward()
        return loss
    f = tg.compile(step)
    f(x, w)
    entry, _ = f._entry_for((x, w), {}, concrete=True)
    return [(k.shape, plan(k)) for k in entry.programs[0].kernels
            if k.kind == "loop" and k.ops().count("gather") > 1 and "add" in k.ops()]


def test_a_large_or_unit_step_window_sum_is_written_once_not_per_pool_read():
    """A 5x5 convolution's input gradient read by a 2x2 pool's: its gathers run over the pooled and
    padded shape, once per element, not over the pool's broadcast space (four times each, as they
    were). So does a 3x3 stride-1 one, its kernel box by box; a 3x3 stride-2 one is recomputed."""
    assert 5 * 5 > RECOMPUTE_OFFSETS >= 3 * 3
    for kernel, stride in ((5, 1), (3, 1)):
        found = _window_sum_kernels(kernel, stride)
        assert [shape for shape, _ in found] == [(4, 3, 16, 16)], found
        assert found[0][1].boxes == (kernel == 3), found
    found = _window_sum_kernels(3, 2)
    assert len(found) == 1 and len(found[0][0]) == 6 and 2 in found[0][0], found      # the pool's 2x2 space
