"""The scatter-add of rows (the gradient of weight[ids], an embedding's) as native code in a compiled
program (backends/cpu/scatter.py): the same bits as eager (NumPy's add.at order), negative ids wrapped,
an id out of range raising eager's IndexError."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tracegrad as tg
from tracegrad.core import bind


def _kernel_log(capsys, monkeypatch, fn, *args):
    monkeypatch.setenv("TRACEGRAD_LOG", "kernels")
    capsys.readouterr()
    out = fn(*args)
    return out, capsys.readouterr().err


@settings(max_examples=25, deadline=None, derandomize=True)
@given(st.integers(1, 40), st.sampled_from([(1,), (3,), (17,), (2, 5)]), st.sampled_from([(9,), (13, 3), (40,)]),
       st.sampled_from([np.int32, np.int64]), st.sampled_from([np.float32, np.float64]))
def test_compiled_row_scatter_is_eagers_bits(n, row, ids_shape, itype, dtype):
    r = np.random.default_rng(n * 7 + len(row))
    W0 = r.standard_normal((n, *row)).astype(dtype)
    ids0 = r.integers(-n, n, ids_shape).astype(itype)            # repeated and negative ids
    g0 = (r.standard_normal((*ids_shape, *row)) * 3).astype(dtype)

    def f(W, i, g):
        return (W[i] * g).sum()
    grads = []
    for fn in (f, tg.compile(f)):
        W = tg.tensor(W0, requires_grad=True)
        fn(W, tg.tensor(ids0), tg.tensor(g0)).backward()
        grads.append(W.grad.numpy())
    want = np.zeros_like(W0)
    np.add.at(want, (ids0,), g0)
    assert grads[1].dtype == dtype
    assert np.array_equal(grads[0], want) and np.array_equal(grads[1], want)


def test_the_embedding_gradient_runs_natively_and_gradchecks(capsys, monkeypatch):
    r = np.random.default_rng(3)
    W = tg.tensor(r.standard_normal((6, 4)), requires_grad=True)
    ids = tg.tensor(r.integers(0, 6, (5, 3)))
    f = tg.compile(lambda W: (tg.nn.functional.embedding(ids, W) ** 2).sum())
    loss, err = _kernel_log(capsys, monkeypatch, f, W)
    loss.backward()
    assert "native scatter-add of 15 rows of 4" in err, err
    assert tg.gradcheck(f, (W,))


def test_a_row_scatter_with_an_id_out_of_range_raises_as_eager(capsys, monkeypatch):
    g = tg.tensor(np.ones((12, 4), np.float32))
    ids = tg.tensor(np.array([1, 9, 0] * 4))

    def f(g, i):
        return bind("index_add", g, i, shape=(5, 4), axes=(0,)) * 2.0
    with pytest.raises(IndexError, match="out of bounds"):
        f(g, ids)
    compiled = tg.compile(f)
    ok = tg.tensor(np.array([1, -1, 1] * 4))
    got, err = _kernel_log(capsys, monkeypatch, compiled, g, ok)
    assert "native scatter-add of 12 rows of 4" in err, err
    want = np.zeros((5, 4), np.float32)
    np.add.at(want, [1, 4, 1] * 4, 1.0)
    np.testing.assert_array_equal(got.numpy(), want * 2.0)
    with pytest.raises(IndexError, match="index 9 is out of bounds for dimension 0 with size 5"):
        compiled(g, ids)
    np.testing.assert_array_equal(compiled(g, ok).numpy(), want * 2.0)     # no error left behind


def test_a_dynamic_row_scatter_runs_natively_at_every_size(capsys, monkeypatch):
    """dynamic=True: the ids' count and the table's rows are symbols, read at each call."""
    f = tg.compile(lambda W, i: (W[i] * W[i]).sum(), dynamic=True)
    r = np.random.default_rng(5)
    logged = ""
    for n, k in ((30, 40), (17, 9), (50, 111), (3, 64)):
        W0, ids0 = r.standard_normal((n, 6)).astype(np.float32), r.integers(-n, n, (k,))
        W = tg.tensor(W0, requires_grad=True)
        loss, err = _kernel_log(capsys, monkeypatch, f, W, tg.tensor(ids0))
        loss.backward()
        logged += err
        want = np.zeros_like(W0)
        np.add.at(want, (ids0,), 2 * W0[ids0])
        assert np.array_equal(W.grad.numpy(), want), (n, k)
    assert "native scatter-add of" in logged, logged
