"""Tensor semantics a PyTorch user relies on: factories, dtypes, strides, views, conversions, repr,
in-place ops and version counters, item assignment. Oracles: NumPy and hand-derived values."""
import numpy as np
import pytest

import tracegrad as tg


# ---------------------------------------------------------------- factories and dtypes

@pytest.mark.parametrize("make, shape, value", [
    (lambda **kw: tg.zeros(2, 3, **kw), (2, 3), 0.0),
    (lambda **kw: tg.ones((2, 3), **kw), (2, 3), 1.0),
    (lambda **kw: tg.full((2, 3), 7.0, **kw), (2, 3), 7.0),
    (lambda **kw: tg.zeros_like(tg.ones(4), **kw), (4,), 0.0),
    (lambda **kw: tg.ones_like(tg.zeros(1, 2), **kw), (1, 2), 1.0),
])
def test_constant_factories_take_dtype_device_requires_grad(make, shape, value):
    t = make(dtype=tg.float64, device="cpu", requires_grad=True)
    assert t.shape == shape and t.dtype == tg.float64 and t.device == "cpu"
    assert t.requires_grad and t.is_leaf and t.grad_fn is None
    np.testing.assert_array_equal(t.detach().numpy(), np.full(shape, value))
    assert make().dtype == tg.float32 and not make().requires_grad


def test_arange_eye_random_factories():
    assert tg.arange(6).tolist() == [0, 1, 2, 3, 4, 5] and tg.arange(6).dtype == tg.int64
    assert tg.arange(1, 7, 2).tolist() == [1, 3, 5]
    assert tg.arange(0.0, 1.0, 0.25).dtype == tg.float32
    assert tg.arange(3, dtype=tg.float64).dtype == tg.float64
    np.testing.assert_array_equal(tg.eye(3).numpy(), np.eye(3))
    assert tg.eye(3, dtype=tg.int64).dtype == tg.int64
    tg.manual_seed(0)
    a = tg.randn(4, 5)
    tg.manual_seed(0)
    b = tg.randn(4, 5)
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert a.shape == (4, 5) and a.dtype == tg.float32
    r = tg.rand(1000, dtype=tg.float64, requires_grad=True)
    assert r.dtype == tg.float64 and r.requires_grad
    assert 0.0 <= float(r.min()) and float(r.max()) < 1.0
    assert tg.full((2,), 7).dtype == tg.int64


def test_tensor_dtype_rules():
    assert tg.tensor([1.0, 2.0]).dtype == tg.float32
    assert tg.tensor(1.5).dtype == tg.float32
    assert tg.tensor([1, 2]).dtype == tg.int64
    assert tg.tensor([1, 2.5]).dtype == tg.float32
    assert tg.tensor([True, False]).dtype == tg.bool
    assert tg.tensor(np.array([1.0, 2.0])).dtype == tg.float64
    assert tg.tensor(np.array([1, 2], dtype=np.int32)).dtype == tg.int32
    assert tg.tensor(np.array([1, 2], dtype=np.float16)).dtype == tg.float16
    assert tg.tensor(np.float64(2.0)).dtype == tg.float64
    assert tg.tensor([1, 2], dtype=tg.float64).dtype == tg.float64


def test_tensor_of_a_scalar_is_zero_dimensional():
    t = tg.tensor(3.5)
    assert t.shape == () and t.ndim == 0 and t.numel() == 1
    assert t.item() == 3.5
    assert tg.tensor(3).shape == ()


def test_tensor_copies_but_from_numpy_shares_memory():
    a = np.zeros((2, 3), dtype=np.float32)
    copied, shared = tg.tensor(a), tg.from_numpy(a)
    a[0, 1] = 5.0
    assert copied[0, 1].item() == 0.0
    assert shared[0, 1].item() == 5.0
    shared[1, 2] = 7.0
    assert a[1, 2] == 7.0
    assert shared.dtype == tg.float32 and shared.data_ptr() == a.ctypes.data


def test_shape_attributes():
    t = tg.zeros(4, 2, 3)
    assert t.shape == (4, 2, 3) and isinstance(t.shape, tuple)
    assert t.ndim == 3 and t.dim() == 3 and t.numel() == 24
    assert t.size() == (4, 2, 3) and t.size(1) == 2 and t.size(-1) == 3
    assert len(t) == 4
    assert tg.zeros(()).numel() == 1 and tg.zeros(0, 3).numel() == 0


# ---------------------------------------------------------------- strides and views

@pytest.mark.parametrize("shape", [(2, 3, 4), (2, 1, 4), (3, 1), (1,), (), (1, 1, 5), (4, 0, 2)])
def test_contiguous_strides_match_pytorch(shape):
    t = tg.zeros(*shape)
    expected, acc = [], 1
    for s in reversed(shape):  # PyTorch: stride[i] = prod(shape[i+1:]), size-1 dims included
        expected.insert(0, acc)
        acc *= max(s, 1)
    assert t.stride() == tuple(expected)
    assert t.is_contiguous() and t.storage_offset() == 0


def test_transpose_is_a_view_with_swapped_strides():
    t = tg.arange(12).reshape(3, 4)
    for v in (t.T, t.transpose(0, 1), t.permute(1, 0), t.mT):
        assert v.shape == (4, 3) and v.stride() == (1, 4)
        assert not v.is_contiguous() and v.data_ptr() == t.data_ptr()
    b = tg.zeros(2, 3, 4)
    assert b.mT.shape == (2, 4, 3) and b.mT.stride() == (12, 1, 4)
    assert b.permute(2, 0, 1).stride() == (1, 12, 4)
    v = t.T
    v[0, 2] = 100
    assert t[2, 0].item() == 100


def test_slicing_with_steps_is_a_view():
    t = tg.arange(24).reshape(4, 6)
    s = t[1:, ::2]
    assert s.shape == (3, 3) and s.stride() == (6, 2)
    assert s.storage_offset() == 6
    assert s.data_ptr() - t.data_ptr() == 6 * t.element_size()
    s[0, 1] = -1
    assert t[1, 2].item() == -1
    np.testing.assert_array_equal(t[1:3, 1:5:3].numpy(), np.arange(24).reshape(4, 6)[1:3, 1:5:3])
    c = t[:, 3]
    assert c.shape == (4,) and c.stride() == (6,) and c.storage_offset() == 3
    assert t[2].storage_offset() == 12


def test_view_reshape_squeeze_unsqueeze_expand_share_memory():
    base = tg.zeros(2, 6)
    for v in (base.view(3, 4), base.view(-1), base.reshape(4, 3), base.unsqueeze(0), base.unsqueeze(-1),
              base.view(2, 1, 6).squeeze(1), base[None], base[..., None]):
        assert v.data_ptr() == base.data_ptr()
    v = base.view(3, 4)
    v[2, 3] = 9.0
    assert base[1, 5].item() == 9.0
    u = base.unsqueeze(1)
    assert u.shape == (2, 1, 6) and u.stride() == (6, 6, 1)
    u[1, 0, 0] = 4.0
    assert base[1, 0].item() == 4.0
    col = tg.tensor([1.0, 2.0, 3.0])
    e = col.reshape(3, 1).expand(3, 4)
    assert e.shape == (3, 4) and e.stride() == (1, 0) and e.data_ptr() == col.data_ptr()
    col[1] = 20.0
    assert e[1].tolist() == [20.0] * 4
    assert tg.zeros(3, 1).squeeze().shape == (3,)
    assert tg.zeros(1, 3, 1).squeeze(0).shape == (3, 1)


def test_view_on_transposed_tensor_raises_and_reshape_copies():
    t = tg.arange(12).reshape(3, 4)
    with pytest.raises(RuntimeError, match=r"\.reshape\(\.\.\.\)"):
        t.T.view(12)
    r = t.T.reshape(12)
    np.testing.assert_array_equal(r.numpy(), np.arange(12).reshape(3, 4).T.reshape(12))
    assert r.data_ptr() != t.data_ptr()
    r[0] = 99
    assert t[0, 0].item() == 0


def test_contiguous_returns_self_or_a_row_major_copy():
    t = tg.arange(6).reshape(2, 3)
    assert t.contiguous() is t
    c = t.T.contiguous()
    assert c is not t and c.is_contiguous() and c.stride() == (2, 1)
    np.testing.assert_array_equal(c.numpy(), np.arange(6).reshape(2, 3).T)
    assert c.data_ptr() != t.data_ptr()


# ---------------------------------------------------------------- conversions

def test_to_float_double_long():
    t = tg.tensor([1.7, -2.2])
    assert t.double().dtype == tg.float64 and t.float() is t
    assert t.long().tolist() == [1, -2] and t.long().dtype == tg.int64
    assert t.to(tg.float64).dtype == tg.float64 and t.to("cpu") is t
    assert t.to(tg.float32) is t
    assert tg.tensor([1, 2]).float().dtype == tg.float32
    assert t.cpu() is t
    assert t.to(tg.float64).device == "cpu"


def test_item_tolist_numpy():
    assert tg.tensor(2.5).item() == 2.5 and isinstance(tg.tensor(2.5).item(), float)
    assert isinstance(tg.tensor([3]).item(), int)
    assert tg.tensor([[1, 2], [3, 4]]).tolist() == [[1, 2], [3, 4]]
    a = tg.tensor([1.0, 2.0])
    assert isinstance(a.numpy(), np.ndarray)
    np.testing.assert_array_equal(np.asarray(a), [1.0, 2.0])
    r = tg.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="detach"):
        r.numpy()
    np.testing.assert_array_equal(r.detach().numpy(), [1.0, 2.0])


# ---------------------------------------------------------------- repr

def test_repr_examples():
    assert repr(tg.tensor([1.0, 2.0, 3.0])) == "tensor([1., 2., 3.])"
    assert repr(tg.arange(12).reshape(3, 4)) == ("tensor([[ 0,  1,  2,  3],\n"
                                                  "        [ 4,  5,  6,  7],\n"
                                                  "        [ 8,  9, 10, 11]])")
    assert repr(tg.tensor([1.0, 2.0], dtype=tg.float64)) == "tensor([1., 2.], dtype=tracegrad.float64)"
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    assert repr(x) == "tensor([1., 2.], requires_grad=True)"
    y = x * 2
    assert repr(y) == "tensor([2., 4.], grad_fn=<MulBackward>)"
    assert y.grad_fn.name() == "MulBackward"
    assert str(x) == repr(x)
    assert repr(tg.tensor(1.5)) == "tensor(1.5000)"


# ---------------------------------------------------------------- in place and version counters

def test_inplace_ops_values_and_versions():
    t = tg.tensor([1.0, 2.0, 3.0])
    v0 = t._ver[0]
    ptr = t.data_ptr()
    t.add_(1.0)
    t.mul_(tg.tensor([2.0, 2.0, 2.0]))
    t.sub_(1.0)
    t.div_(2.0)
    assert t.tolist() == [1.5, 2.5, 3.5]
    t += 1
    t -= tg.tensor(0.5)
    t *= 2
    t /= 4
    assert t.tolist() == [1.0, 1.5, 2.0]
    assert t._ver[0] - v0 == 8 and t.data_ptr() == ptr
    t.zero_()
    assert t.tolist() == [0.0, 0.0, 0.0]
    t.fill_(3.0)
    assert t.tolist() == [3.0] * 3
    t.copy_(tg.tensor([7.0, 8.0, 9.0]))
    assert t.tolist() == [7.0, 8.0, 9.0] and t._ver[0] - v0 == 11


def test_views_share_the_version_counter():
    t = tg.zeros(2, 3)
    v = t[0]
    before = t._ver[0]
    v.add_(1.0)
    assert t._ver[0] == before + 1
    assert t.tolist() == [[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]]
    t.T.mul_(2.0)
    assert t[0].tolist() == [2.0, 2.0, 2.0]


def test_inplace_add_broadcasts_into_self_but_not_beyond():
    t = tg.zeros(2, 3)
    t.add_(tg.tensor([1.0, 2.0, 3.0]))
    assert t.tolist() == [[1.0, 2.0, 3.0]] * 2
    with pytest.raises(RuntimeError):
        tg.zeros(3).add_(tg.zeros(2, 3))


def test_setitem_basic_and_integer_tensor_indices():
    t = tg.zeros(3, 4)
    ref = np.zeros((3, 4), dtype=np.float32)
    t[1] = 5.0
    ref[1] = 5.0
    t[:, 0] = tg.tensor([1.0, 2.0, 3.0])
    ref[:, 0] = [1.0, 2.0, 3.0]
    t[tg.tensor([0, 2]), tg.tensor([3, 3])] = 9.0
    ref[[0, 2], [3, 3]] = 9.0
    t[::2, 1:3] = tg.tensor([[-1.0, -2.0], [-3.0, -4.0]])
    ref[::2, 1:3] = [[-1.0, -2.0], [-3.0, -4.0]]
    t[tg.tensor([1])] = tg.tensor([6.0, 6.0, 6.0, 6.0])
    ref[[1]] = 6.0
    np.testing.assert_array_equal(t.numpy(), ref)


def test_setitem_bumps_version():
    t = tg.zeros(4)
    v = t._ver[0]
    t[1:3] = 2.0
    assert t._ver[0] > v
    v = t._ver[0]
    t[tg.tensor([0])] = 1.0
    assert t._ver[0] > v


def test_setitem_is_differentiable_in_the_value():
    w = tg.tensor([1.0, 2.0, 3.0, 4.0])
    val = tg.tensor([2.0, 3.0], requires_grad=True)
    base = tg.zeros(4)
    base[1:3] = val
    assert base.tolist() == [0.0, 2.0, 3.0, 0.0] and base.requires_grad
    (base * w).sum().backward()
    assert val.grad.tolist() == [2.0, 3.0]

    val2 = tg.tensor([2.0, 3.0], requires_grad=True)
    base = tg.zeros(4)
    base[tg.tensor([0, 3])] = val2 * 2
    (base * w).sum().backward()
    assert val2.grad.tolist() == [2.0, 8.0]


def test_setitem_on_a_non_leaf_routes_gradient_around_overwritten_positions():
    x = tg.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x * 3.0
    y[1] = 0.0
    (y * tg.tensor([1.0, 10.0, 100.0])).sum().backward()
    assert x.grad.tolist() == [3.0, 0.0, 300.0]


# ---------------------------------------------------------------- PyTorch parity fixes (differential review)

@pytest.mark.parametrize("make, name", [
    (lambda x: x.mean(), "MeanBackward"),
    (lambda x: x.var(1), "VarBackward"),
    (lambda x: x @ x.T, "MmBackward"),
    (lambda x: x @ x[0], "MvBackward"),
    (lambda x: x[0] @ x[0], "DotBackward"),
    (lambda x: x.view(6), "ViewBackward"),
    (lambda x: x.reshape(3, 2), "ViewBackward"),
    (lambda x: x.transpose(0, 1), "TransposeBackward"),
    (lambda x: x.T, "PermuteBackward"),
    (lambda x: x[0], "SelectBackward"),
    (lambda x: x[:, 1:], "SliceBackward"),
    (lambda x: x[None], "UnsqueezeBackward"),
    (lambda x: x.unsqueeze(0), "UnsqueezeBackward"),
    (lambda x: x.clone(), "CloneBackward"),
    (lambda x: x.double(), "ToCopyBackward"),
    (lambda x: 1 - x, "RsubBackward"),
    (lambda x: x.clamp(0, 1), "ClampBackward"),
    (lambda x: x.softmax(-1), "SoftmaxBackward"),
    (lambda x: tg.nn.functional.mse_loss(x, x.detach()), "MseLossBackward"),
    (lambda x: tg.nn.functional.cross_entropy(x, tg.tensor([0, 2])), "NllLossBackward"),
])
def test_grad_fn_names_follow_pytorch(make, name):
    y = make(tg.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], requires_grad=True))
    assert y.grad_fn.name() == name and repr(y).endswith(f"grad_fn=<{name}>)")


def test_version_counter_and_where_method():
    t = tg.zeros(3)
    assert t._version == 0
    t[0] = 1.0
    t.add_(1)
    assert t._version == 2 and t.detach()._version == 2
    assert t.where(t > 1.5, -1.0).tolist() == [2.0, -1.0, -1.0]


def test_requires_grad_flag_of_a_non_leaf_cannot_be_cleared():
    y = tg.ones(2, requires_grad=True) * 2
    with pytest.raises(RuntimeError, match="leaf variables"):
        y.requires_grad = False
    y.requires_grad = True   # no change: allowed
