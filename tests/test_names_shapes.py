"""Issue 27's everyday names, shapes and autograd structure: cross, diagonal (a view), trace,
flatten(start, end), the in-place shape changes, tg.Size, the typed constructors (tg.LongTensor)
and grad_fn.next_functions with AccumulateGrad nodes. Oracles: NumPy, tg.gradcheck eager and
compiled, torch 2.13 literals."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tracegrad as tg

R = np.random.default_rng(5)


def test_cross_against_numpy_and_torch():
    a, b = R.standard_normal((4, 3)), R.standard_normal((4, 3))
    np.testing.assert_allclose(tg.cross(tg.tensor(a), tg.tensor(b), dim=1).numpy(), np.cross(a, b), rtol=1e-13)
    np.testing.assert_allclose(tg.tensor(a.T).cross(tg.tensor(b[:1].T), dim=0).numpy(),
                               np.cross(a, b[:1]).T, rtol=1e-13)          # broadcast
    with pytest.warns(UserWarning, match="deprecated"):
        out = tg.cross(tg.tensor([[1.0, 2, 3], [4, 5, 6]]), tg.tensor([[0.5, -1, 2], [3, 0, 1]]))
    assert out.tolist() == [[7.0, -0.5, -2.0], [5.0, 14.0, -15.0]]      # torch.linalg.cross
    fn = lambda x, y: x.cross(y, dim=-1)           # noqa: E731
    args = (tg.tensor(a, requires_grad=True), tg.tensor(b, requires_grad=True))
    assert tg.gradcheck(fn, args) and tg.gradcheck(tg.compile(fn), args)
    with pytest.raises(RuntimeError, match="length 3"):
        tg.cross(tg.ones(2, 4), tg.ones(2, 4), dim=1)


@settings(max_examples=40, deadline=None)
@given(st.integers(-5, 5), st.sampled_from([(0, 1), (1, 2), (2, 0), (-1, 1), (0, 2)]))
def test_diagonal_against_numpy_eager_and_compiled(k, dims):
    a = R.standard_normal((3, 4, 5))
    want = np.diagonal(a, k, *dims)
    x = tg.tensor(a)
    np.testing.assert_array_equal(x.diagonal(k, *dims).numpy(), want)
    np.testing.assert_array_equal(tg.compile(lambda t: tg.diagonal(t, k, *dims) * 1)(x).numpy(), want)
    if want.size:
        fn = lambda t: t.diagonal(k, *dims) * tg.arange(float(want.shape[-1]), dtype=tg.float64)   # noqa: E731
        t = tg.tensor(a, requires_grad=True)
        assert tg.gradcheck(fn, (t,)) and tg.gradcheck(tg.compile(fn), (t,))


def test_diagonal_is_a_view_eager_and_compiled():
    """torch 2.13: x = arange(24.).reshape(2, 3, 4); x.diagonal(1, 1, 2), x.diagonal(-1, 2, 0)."""
    x = tg.arange(24.0).reshape(2, 3, 4)
    assert x.diagonal(1, 1, 2).tolist() == [[1.0, 6.0, 11.0], [13.0, 18.0, 23.0]]
    assert x.diagonal(-1, 2, 0).tolist() == [[1.0, 14.0], [5.0, 18.0], [9.0, 22.0]]
    e = tg.zeros(3, 3)
    e.diagonal().fill_(1.0)
    np.testing.assert_array_equal(e.numpy(), np.eye(3))
    a, b = tg.arange(12.0).reshape(3, 4), tg.arange(12.0).reshape(3, 4)
    tg.compile(lambda t: t.diagonal(1).mul_(10.0))(a)
    b.diagonal(1).mul_(10.0)
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert a[1, 2].item() == 60.0


def test_trace():
    assert tg.trace(tg.arange(12.0).reshape(3, 4)).item() == 15.0         # torch 2.13
    t = tg.tensor([[1, 2], [3, 4]]).trace()
    assert t.dtype is tg.int64 and t.item() == 5
    x = tg.tensor(R.standard_normal((4, 3)), requires_grad=True)
    assert tg.gradcheck(lambda m: m.trace() * m.sum(), (x,))
    assert tg.gradcheck(tg.compile(lambda m: m.trace() * m.sum()), (x,))
    with pytest.raises(RuntimeError, match="expected a matrix"):
        tg.ones(2, 2, 2).trace()


def test_flatten_between_dims():
    x = tg.arange(24.0).reshape(2, 3, 4)
    assert x.flatten(1, 2).shape == (2, 12) and tg.flatten(x, 0, 1).shape == (6, 4)
    assert x.flatten(-2).shape == (2, 12) and x.flatten().shape == (24,)


def test_in_place_shape_changes():
    y = tg.zeros(3)
    assert y.unsqueeze_(0) is y and y.shape == (1, 3)
    y.squeeze_()
    assert y.shape == (3,)
    a = tg.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    a.t_()
    assert a.tolist() == [[1.0, 4.0], [2.0, 5.0], [3.0, 6.0]] and a.stride() == (1, 3)
    a.transpose_(0, 1)
    assert a.shape == (2, 3) and a.is_contiguous()
    z = tg.ones(3, requires_grad=True)
    w = z * 2
    w.unsqueeze_(1)
    (w * tg.tensor([[1.0], [2.0], [3.0]])).sum().backward()
    assert w.shape == (3, 1) and z.grad.tolist() == [2.0, 4.0, 6.0]
    with pytest.raises(RuntimeError, match="leaf Variable"):
        tg.ones(3, requires_grad=True).unsqueeze_(0)
    with pytest.raises(tg.TraceError, match="x = x.unsqueeze"):
        tg.compile(lambda t: t.unsqueeze_(0))(tg.ones(3))


def test_size_is_a_torch_size_like_tuple():
    x = tg.zeros(2, 3, 4)
    s = x.size()
    assert isinstance(s, tg.Size) and isinstance(s, tuple) and s == (2, 3, 4)
    assert s.numel() == 24 and s[1:] == (3, 4) and isinstance(s[1:], tg.Size)
    assert x.size(0) == 2 and x.size(-1) == 4 and x.size(dim=1) == 3
    assert repr(s) == "tracegrad.Size([2, 3, 4])" and str(s) == repr(s)
    assert tg.zeros(*s).shape == (2, 3, 4) and tg.zeros(s).shape == (2, 3, 4)
    assert x.view(s[0], -1).shape == (2, 12)


def test_typed_constructors():
    i = tg.LongTensor([1, 2])
    assert i.dtype is tg.int64 and i.tolist() == [1, 2]
    f = tg.FloatTensor([[1, 2]])
    assert f.dtype is tg.float32 and f.tolist() == [[1.0, 2.0]]
    assert tg.DoubleTensor(2, 3).dtype is tg.float64 and tg.DoubleTensor(2, 3).shape == (2, 3)
    assert tg.IntTensor([3]).dtype is tg.int32 and tg.BoolTensor([1, 0]).tolist() == [True, False]
    assert tg.LongTensor().shape == (0,)
    assert isinstance(i, tg.LongTensor) and not isinstance(i, tg.FloatTensor) and isinstance(f, tg.Tensor)
    assert not isinstance(np.zeros(2), tg.FloatTensor)


def test_next_functions_have_pytorchs_shape():
    """PyTorch's autograd tutorial: a = linspace(requires_grad); b = sin(a); c = 2 * b; d = c + 1."""
    a = tg.linspace(0.0, 6.28, 5, requires_grad=True)
    b = tg.sin(a)
    c = 2 * b
    d = c + 1
    assert d.grad_fn.next_functions == ((c.grad_fn, 0), (None, 0))
    mul, _ = d.grad_fn.next_functions[0]
    assert mul.name() == "MulBackward" and mul is c.grad_fn
    assert mul.next_functions == ((b.grad_fn, 0), (None, 0))
    (acc, idx), = b.grad_fn.next_functions
    assert idx == 0 and acc.name() == "AccumulateGrad" and acc.variable is a and acc.next_functions == ()
    assert b.grad_fn.next_functions[0][0] is acc                  # one node per leaf, as PyTorch
    assert repr(acc) == "<AccumulateGrad>" and repr(mul) == "<MulBackward>"
    e = b * a + 3.0 * b
    assert [n.name() for n, _ in e.grad_fn.next_functions] == ["MulBackward", "MulBackward"]
    f = tg.compile(lambda x: (x * 2).sin())(a)
    assert f.grad_fn.next_functions[0][0].variable is a


def test_type_names_and_converts():
    x = tg.zeros(2)
    assert x.type() == "tracegrad.FloatTensor" and tg.tensor([True]).type() == "tracegrad.BoolTensor"
    assert x.type(tg.LongTensor).dtype is tg.int64 and x.type("torch.IntTensor").dtype is tg.int32
    assert x.type(tg.float64).dtype is tg.float64
    with pytest.raises(ValueError, match="invalid type"):
        x.type("torch.ComplexTensor")
