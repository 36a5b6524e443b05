"""Issue 27's everyday names, sorting and selecting: sort, argsort, msort, topk, kthvalue (values,
indices, gradients, compiled), nonzero and unique (eager; a TraceError naming what to do instead
inside tg.compile). Oracles: NumPy's stable sorts, tg.gradcheck eager and compiled, torch 2.13
literals. Random inputs with ties (hypothesis)."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra import numpy as hnp

import tracegrad as tg

# small integers as floats: many ties; a NaN now and then (the largest, as PyTorch)
ARRAYS = hnp.arrays(np.float64, hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=5),
                    elements=st.one_of(st.integers(-3, 3).map(float), st.just(np.nan)))


def _np_sort(a, axis, descending):
    """Stable order along axis, NaN largest: (values, indices). Descending sorts -a ascending, NaN
    as -inf (the inputs hold no infinities)."""
    keys = np.where(np.isnan(a), -np.inf, -a) if descending else a
    idx = np.argsort(keys, axis=axis, kind="stable")
    return np.take_along_axis(a, idx, axis), idx


@settings(max_examples=60, deadline=None)
@given(ARRAYS, st.integers(0, 2), st.booleans())
def test_sort_matches_a_stable_numpy_sort(a, axis, descending):
    axis = axis % a.ndim
    vals, idx = tg.tensor(a).sort(dim=axis, descending=descending)
    want_vals, want_idx = _np_sort(a, axis, descending)
    np.testing.assert_array_equal(vals.numpy(), want_vals)
    np.testing.assert_array_equal(idx.numpy(), want_idx)
    np.testing.assert_array_equal(tg.argsort(tg.tensor(a), axis, descending).numpy(), want_idx)
    cv, ci = tg.compile(lambda t: tg.sort(t, axis, descending))(tg.tensor(a))
    np.testing.assert_array_equal(cv.numpy(), want_vals)
    np.testing.assert_array_equal(ci.numpy(), want_idx)


@settings(max_examples=60, deadline=None)
@given(ARRAYS, st.data(), st.booleans())
def test_topk_and_kthvalue_select_by_the_sort(a, data, largest):
    axis = a.ndim - 1
    n = a.shape[axis]
    k = data.draw(st.integers(0, n))
    vals, idx = tg.tensor(a).topk(k, largest=largest)
    want_vals, want_idx = _np_sort(a, axis, largest)
    np.testing.assert_array_equal(vals.numpy(), want_vals[..., :k])
    np.testing.assert_array_equal(idx.numpy(), want_idx[..., :k])
    np.testing.assert_array_equal(np.take_along_axis(a, idx.numpy(), axis), vals.numpy())
    cv, ci = tg.compile(lambda t: t.topk(k, largest=largest))(tg.tensor(a))
    np.testing.assert_array_equal(cv.numpy(), vals.numpy())
    np.testing.assert_array_equal(ci.numpy(), idx.numpy())
    j = data.draw(st.integers(1, n))
    kv, ki = tg.kthvalue(tg.tensor(a), j, keepdim=True)
    asc_vals, asc_idx = _np_sort(a, axis, False)
    np.testing.assert_array_equal(kv.numpy(), asc_vals[..., j - 1:j])
    np.testing.assert_array_equal(ki.numpy(), asc_idx[..., j - 1:j])


def test_gradients_flow_to_the_selected_elements():
    x = np.random.default_rng(1).standard_normal((3, 6))          # distinct: the order is locally constant
    for fn in (lambda t: t.sort(1).values * tg.arange(6.0),
               lambda t: t.sort(0, descending=True)[0].exp(),
               lambda t: t.topk(2, dim=1).values.square(),
               lambda t: t.topk(2, dim=0, largest=False).values,
               lambda t: t.kthvalue(3, 1).values * 2,
               lambda t: t.msort() * tg.arange(6.0)):
        t = tg.tensor(x, requires_grad=True)
        assert tg.gradcheck(fn, (t,))
        assert tg.gradcheck(tg.compile(fn), (t,))
    t = tg.tensor([3.0, 1.0, 2.0], requires_grad=True)
    t.sort(descending=True).values.backward(tg.tensor([10.0, 20.0, 30.0]))
    assert t.grad.tolist() == [10.0, 30.0, 20.0]


def test_torch_literals():
    """torch 2.13: x = torch.tensor([3., 1., 2., 1., nan, 3.]); sort, stable descending sort, topk(3),
    kthvalue(2) (torch's unstable topk/kthvalue picked indices [4, 5, 0] and 3 for the same values)."""
    x = tg.tensor([3.0, 1.0, 2.0, 1.0, float("nan"), 3.0])
    s = x.sort()
    np.testing.assert_array_equal(s.values.numpy(), [1.0, 1.0, 2.0, 3.0, 3.0, np.nan])
    assert s.indices.tolist() == [1, 3, 2, 0, 5, 4]
    d = x.sort(descending=True, stable=True)
    np.testing.assert_array_equal(d.values.numpy(), [np.nan, 3.0, 3.0, 2.0, 1.0, 1.0])
    assert d.indices.tolist() == [4, 0, 5, 2, 1, 3]
    np.testing.assert_array_equal(x.topk(3).values.numpy(), [np.nan, 3.0, 3.0])
    assert x.kthvalue(2).values.item() == 1.0
    assert repr(tg.tensor([2, 1]).sort()).startswith("tracegrad.return_types.sort(\nvalues=tensor([1, 2]),")
    z = tg.tensor(5.0).sort()
    assert z.values.item() == 5.0 and z.indices.item() == 0 and z.indices.dtype is tg.int64


def test_selection_errors():
    with pytest.raises(RuntimeError, match="k out of range"):
        tg.tensor([1.0, 2.0]).topk(3)
    with pytest.raises(RuntimeError, match="out of range"):
        tg.tensor([1.0, 2.0]).kthvalue(0)
    with pytest.raises(IndexError):
        tg.tensor([1.0, 2.0]).sort(dim=1)


def test_nonzero_and_argwhere():
    a = np.array([[0, 1, 0], [2, 0, 3]])
    x = tg.tensor(a)
    np.testing.assert_array_equal(x.nonzero().numpy(), np.argwhere(a))
    assert x.nonzero().dtype is tg.int64
    rows, cols = tg.nonzero(x, as_tuple=True)
    assert rows.tolist() == [0, 1, 1] and cols.tolist() == [1, 0, 2]
    np.testing.assert_array_equal(tg.argwhere(x > 1).numpy(), [[1, 0], [1, 2]])
    assert tg.tensor(3.0).nonzero().shape == (1, 0)                   # torch 2.13: size (1, 0)
    assert [t.tolist() for t in tg.tensor(3.0).nonzero(as_tuple=True)] == [[0]]
    assert tg.tensor(0.0).nonzero().shape == (0, 0)


@settings(max_examples=40, deadline=None)
@given(hnp.arrays(np.int64, hnp.array_shapes(min_dims=1, max_dims=3, max_side=5), elements=st.integers(-3, 3)))
def test_unique_against_numpy(a):
    vals, inv, counts = tg.tensor(a).unique(return_inverse=True, return_counts=True)
    w_vals, w_inv, w_counts = np.unique(a, return_inverse=True, return_counts=True)
    np.testing.assert_array_equal(vals.numpy(), w_vals)
    np.testing.assert_array_equal(inv.numpy(), w_inv.reshape(a.shape))
    np.testing.assert_array_equal(counts.numpy(), w_counts)
    np.testing.assert_array_equal(vals.numpy()[inv.numpy()], a)
    assert tg.unique(tg.tensor(a), sorted=False).tolist() == w_vals.tolist()


def test_unique_torch_literals_and_rows():
    """torch.unique(torch.tensor([3, 1, 2, 1, 3]), return_inverse=True, return_counts=True)."""
    v, i, c = tg.unique(tg.tensor([3, 1, 2, 1, 3]), return_inverse=True, return_counts=True)
    assert (v.tolist(), i.tolist(), c.tolist()) == ([1, 2, 3], [2, 0, 1, 0, 2], [2, 1, 2])
    rows = tg.tensor([[1, 2], [0, 5], [1, 2]]).unique(dim=0)
    assert rows.tolist() == [[0, 5], [1, 2]]
    assert tg.tensor([2.5, 2.5]).unique().dtype is tg.float32


@pytest.mark.parametrize("fn,what", [(lambda x: x.nonzero(), "nonzero"), (lambda x: tg.unique(x), "unique"),
                                     (lambda x: tg.nn.functional.one_hot(x.long()), "one_hot")])
def test_data_dependent_shapes_refuse_to_compile(fn, what):
    with pytest.raises(tg.TraceError, match=f"{what}.*(tg.where|fixed-size|num_classes)"):
        tg.compile(fn)(tg.tensor([1.0, 0.0, 2.0]))
