"""Broadcasting: result shapes against NumPy (hypothesis), the error, unbroadcast gradients, and the
suspicious-broadcast warning."""
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tracegrad as tg

_dims = st.integers(min_value=0, max_value=4)
_shape = st.lists(st.sampled_from([1, 1, 2, 3, 4, 0]), min_size=0, max_size=4).map(tuple)


@settings(max_examples=300, deadline=None)
@given(st.lists(_shape, min_size=1, max_size=4))
def test_broadcast_shapes_agrees_with_numpy(shapes):
    try:
        expected = np.broadcast_shapes(*shapes)
    except ValueError:
        with pytest.raises(tg.BroadcastError):
            tg.broadcast_shapes(*shapes)
    else:
        assert tg.broadcast_shapes(*shapes) == expected


@settings(max_examples=100, deadline=None)
@given(_shape, _shape)
def test_elementwise_result_shape_and_values_agree_with_numpy(a, b):
    x, y = np.arange(int(np.prod(a))).reshape(a), np.asarray(np.ones(b) * 2)
    try:
        expected = np.asarray(x * y)
    except ValueError:
        with pytest.raises(tg.BroadcastError):
            tg.from_numpy(x) * tg.from_numpy(y)
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tg.BroadcastWarning)
        out = tg.from_numpy(x) * tg.from_numpy(y)
    assert out.shape == expected.shape
    np.testing.assert_array_equal(out.numpy(), expected)


def _summary(e):
    return str(e.value).splitlines()[0]


def test_broadcast_error_type_and_exact_message():
    assert issubclass(tg.BroadcastError, ValueError) and issubclass(tg.BroadcastError, RuntimeError)
    with pytest.raises(tg.BroadcastError) as e:
        tg.broadcast_shapes((3, 4), (5,))
    assert _summary(e) == "shapes (3, 4) and (5,) cannot be broadcast: dimension -1 has sizes 4 and 5"
    assert e.value.args[0] == _summary(e)
    assert str(e.value) == (
        "shapes (3, 4) and (5,) cannot be broadcast: dimension -1 has sizes 4 and 5\n"
        "  dim       -2  -1\n"
        "  (3, 4)     3  4!\n"
        "  (5,)    .->3  5!\n"
        "  result     3   ?\n"
        "  .->n missing dimension (counts as 1) stretched; n! sizes differ and neither is 1")


def test_broadcast_error_names_first_mismatch_from_the_right():
    with pytest.raises(tg.BroadcastError) as e:
        tg.broadcast_shapes((2, 3, 4), (5, 4))
    assert _summary(e) == "shapes (2, 3, 4) and (5, 4) cannot be broadcast: dimension -2 has sizes 3 and 5"
    with pytest.raises(tg.BroadcastError) as e:      # both dimensions mismatch: the right one is named
        tg.ones(2, 3) + tg.ones(3, 2)
    assert _summary(e) == "shapes (2, 3) and (3, 2) cannot be broadcast: dimension -1 has sizes 3 and 2"


@settings(max_examples=200, deadline=None)
@given(_shape, _shape)
def test_error_names_the_rightmost_mismatch_of_any_pair(a, b):
    mismatches = [d for d in range(-1, -min(len(a), len(b)) - 1, -1)
                  if a[d] != b[d] and a[d] != 1 and b[d] != 1]
    if not mismatches:
        assert tg.broadcast_shapes(a, b) == np.broadcast_shapes(a, b)
        return
    d = mismatches[0]
    with pytest.raises(tg.BroadcastError) as e:
        tg.broadcast_shapes(a, b)
    assert _summary(e) == f"shapes {a} and {b} cannot be broadcast: dimension {d} has sizes {a[d]} and {b[d]}"


def test_three_shapes_error_names_shape_so_far_and_offending_one():
    with pytest.raises(tg.BroadcastError) as e:
        tg.broadcast_shapes((2, 1), (1, 4), (3, 1, 5))
    assert _summary(e) == "shapes (2, 4) and (3, 1, 5) cannot be broadcast: dimension -1 has sizes 4 and 5"
    assert "(2, 1)" in e.value.picture and "(1, 4)" in e.value.picture     # the picture shows all three


def test_eager_ops_raise_broadcast_error():
    with pytest.raises(tg.BroadcastError, match=r"shapes \(2, 3\) and \(4,\)"):
        tg.ones(2, 3) + tg.ones(4)
    with pytest.raises(ValueError):  # catchable as either base
        tg.ones(2, 3) * tg.ones(2)


def test_broadcast_shapes_edge_cases():
    assert tg.broadcast_shapes() == ()
    assert tg.broadcast_shapes((2, 3)) == (2, 3)
    assert tg.broadcast_shapes((0,), (1,)) == (0,)
    assert tg.broadcast_shapes((5, 1, 4), (3, 1)) == (5, 3, 4)
    assert tg.broadcast_shapes([2, 1], (1, 3)) == (2, 3)


# ---------------------------------------------------------------- unbroadcast gradients

@settings(max_examples=60, deadline=None)
@given(_shape.filter(lambda s: 0 not in s), _shape.filter(lambda s: 0 not in s))
def test_gradient_is_summed_back_to_each_operands_shape(a, b):
    try:
        out_shape = np.broadcast_shapes(a, b)
    except ValueError:
        return
    rng = np.random.default_rng(0)
    an, bn = rng.standard_normal(a), rng.standard_normal(b)
    wn = rng.standard_normal(out_shape)
    x = tg.tensor(an, requires_grad=True)
    y = tg.tensor(bn, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tg.BroadcastWarning)
        (x * y * tg.tensor(wn)).sum().backward()
    assert x.grad.shape == a and y.grad.shape == b
    # oracle: d/dx sum(w * x * y) = sum over stretched axes of w * y
    gx = np.broadcast_to(wn * bn, out_shape)
    gx = gx.sum(axis=tuple(range(len(out_shape) - len(a)))) if len(out_shape) > len(a) else gx
    gx = gx.sum(axis=tuple(i for i, s in enumerate(a) if s == 1), keepdims=True) if a else gx
    np.testing.assert_allclose(x.grad.numpy(), np.reshape(gx, a), rtol=1e-10, atol=1e-10)


def test_unbroadcast_examples():
    a = tg.ones(3, 1, requires_grad=True)
    b = tg.ones(1, 4, requires_grad=True)
    c = tg.tensor(2.0, requires_grad=True)
    (a * b * c).sum().backward()
    assert a.grad.shape == (3, 1) and a.grad.tolist() == [[8.0], [8.0], [8.0]]
    assert b.grad.shape == (1, 4) and b.grad.tolist() == [[6.0] * 4]
    assert c.grad.shape == () and c.grad.item() == 12.0
    d = tg.ones(4, requires_grad=True)
    (tg.ones(2, 3, 4) - d).sum().backward()
    assert d.grad.shape == (4,) and d.grad.tolist() == [-6.0] * 4


# ---------------------------------------------------------------- the warning

def test_rank_mismatch_broadcast_warns_naming_shapes_result_and_call_site():
    pred, target = tg.zeros(4, 1), tg.zeros(4)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        out = pred - target; line = __import__("inspect").currentframe().f_lineno  # noqa: E702
    assert out.shape == (4, 4)
    hits = [x for x in w if issubclass(x.category, tg.BroadcastWarning)]
    assert len(hits) == 1
    msg = str(hits[0].message)
    assert "(4, 1)" in msg and "(4,)" in msg and "(4, 4)" in msg
    assert f"{__file__}:{line}" in msg
    assert hits[0].filename == __file__ and hits[0].lineno == line
    assert issubclass(tg.BroadcastWarning, UserWarning)


def test_warning_exact_text():
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        tg.zeros(3, 1) * tg.zeros(3); line = __import__("inspect").currentframe().f_lineno  # noqa: E702
    (hit,) = [x for x in w if issubclass(x.category, tg.BroadcastWarning)]
    assert str(hit.message) == (
        f"operands of shapes (3, 1) and (3,) of different ranks were both stretched to (3, 3) at {__file__}:{line}: "
        "the length 3 became two axes. This is often a bug (predictions (N, 1) with targets (N,) give (N, N)); "
        "if it is not intended, make the ranks match (e.g. .squeeze(-1) or [:, None]). "
        "tg.explain_broadcast((3, 1), (3,)) shows how the axes line up.")


def _broadcast_warnings(fn):
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        out = fn()
    return out, [x for x in w if issubclass(x.category, tg.BroadcastWarning)]


def test_deliberate_broadcasts_do_not_warn():
    cases = {
        "matmul batch dims": lambda: tg.ones(5, 1, 2, 3) @ tg.ones(4, 3, 2),
        "matmul batch dims of equal length": lambda: tg.ones(4, 1, 2, 3) @ tg.ones(4, 3, 2),
        "PyTorch tutorial design matrix": lambda: tg.linspace(-1, 1, 2000).unsqueeze(-1) ** tg.tensor([1, 2, 3]),
        "outer product of different lengths": lambda: tg.ones(2000, 1) * tg.ones(3),
        "index tensors": lambda: tg.ones(4, 4)[tg.arange(4)[:, None], tg.arange(4)],
    }
    shapes = {"matmul batch dims": (5, 4, 2, 2), "matmul batch dims of equal length": (4, 4, 2, 2),
              "PyTorch tutorial design matrix": (2000, 3), "outer product of different lengths": (2000, 3),
              "index tensors": (4, 4)}
    for name, fn in cases.items():
        out, hits = _broadcast_warnings(fn)
        assert out.shape == shapes[name], name
        assert not hits, f"{name}: {hits[0].message}"


def test_traced_code_follows_the_same_rule():
    def design(x, p):
        return x ** p
    _, hits = _broadcast_warnings(lambda: tg.make_ir(design)(tg.ones(2000, 1), tg.ones(3)))
    assert not hits
    _, hits = _broadcast_warnings(lambda: tg.make_ir(design)(tg.ones(7, 1), tg.ones(7)))
    assert len(hits) == 1 and "(7, 7)" in str(hits[0].message)


_sizes = st.lists(st.integers(1, 5), max_size=2).map(tuple)


@settings(max_examples=80, deadline=None)
@given(_sizes, st.integers(2, 5), st.integers(2, 5), _sizes, st.booleans())
def test_warns_exactly_when_one_length_becomes_two_axes(lead, m, n, tail, swap):
    """a = (*lead, m, 1, *tail) with b = (n, *tail): b's n stretches a's 1, and a's m and lead stretch b's
    missing axes; one length becomes two axes exactly when n equals m or one of the lead sizes."""
    a, b = lead + (m, 1) + tail, (n,) + tail
    x, y = (tg.ones(*b), tg.ones(*a)) if swap else (tg.ones(*a), tg.ones(*b))
    out, hits = _broadcast_warnings(lambda: x + y)
    assert out.shape == np.broadcast_shapes(a, b)
    assert bool(hits) == (n == m or n in lead)


@settings(max_examples=80, deadline=None)
@given(_shape, _shape)
def test_no_warning_when_ranks_match_or_one_operand_is_not_stretched(a, b):
    try:
        result = np.broadcast_shapes(a, b)
    except ValueError:
        return
    if len(a) != len(b) and result not in (a, b):
        return
    _, hits = _broadcast_warnings(lambda: tg.ones(*a) - tg.ones(*b))
    assert not hits


def test_equal_rank_outer_product_does_not_warn():
    x = tg.arange(4).float()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        d = x[:, None] - x[None, :]
        s = tg.ones(2, 3) + tg.ones(3)      # only one operand stretched
        m = tg.ones(2, 3) * 2.0
    assert d.shape == (4, 4) and s.shape == (2, 3) and m.shape == (2, 3)
    np.testing.assert_array_equal(d.numpy(), np.arange(4)[:, None] - np.arange(4)[None, :])


def test_warning_silenced_by_filterwarnings():
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        warnings.filterwarnings("ignore", category=tg.BroadcastWarning)
        tg.zeros(3, 1) * tg.zeros(3)
    assert not [x for x in w if issubclass(x.category, tg.BroadcastWarning)]


def test_backward_of_a_warned_op_does_not_warn_again():
    p = tg.zeros(3, 1, requires_grad=True)
    with pytest.warns(tg.BroadcastWarning):
        loss = ((p - tg.zeros(3)) ** 2).mean()
    with warnings.catch_warnings():
        warnings.simplefilter("error", tg.BroadcastWarning)
        loss.backward()
    assert p.grad.shape == (3, 1)
