"""Issue 27's random names: uniform_, normal_, bernoulli (and bernoulli_), multinomial, eager and
compiled. Oracles: the distributions' moments and frequencies over many draws, with bounds of many
standard errors (the draws are seeded, so each test sees fixed numbers), and exact properties
(ranges, distinct draws without replacement, zero weights never drawn)."""
import numpy as np
import pytest

import tracegrad as tg


def test_uniform_and_normal_fill_in_place():
    tg.manual_seed(0)
    x = tg.zeros(200, 100)
    assert x.uniform_(-2.0, 3.0) is x
    a = x.numpy()
    assert a.min() >= -2.0 and a.max() < 3.0 and abs(a.mean() - 0.5) < 5 * 5 / np.sqrt(12 * a.size)
    y = tg.empty(200, 100, dtype=tg.float64).normal_(1.5, 0.5)
    b = y.numpy()
    assert y.dtype is tg.float64
    assert abs(b.mean() - 1.5) < 5 * 0.5 / np.sqrt(b.size) and abs(b.std() - 0.5) < 0.01
    tg.manual_seed(7)
    first = tg.zeros(5).uniform_().tolist()
    tg.manual_seed(7)
    assert tg.zeros(5).uniform_().tolist() == first
    with pytest.raises(RuntimeError, match="floating-point"):
        tg.zeros(3, dtype=tg.int64).uniform_()
    with pytest.raises(RuntimeError, match="leaf Variable"):
        tg.zeros(3, requires_grad=True).normal_()
    w = tg.zeros(3, requires_grad=True)
    with tg.no_grad():
        w.uniform_(-1, 1)
    assert w.requires_grad and w.is_leaf and (w.detach().numpy() != 0).all()


def test_fills_in_compiled_code_draw_afresh_each_call():
    x = tg.zeros(1000)
    fill = tg.compile(lambda t: t.uniform_(0.5, 1.0))
    fill(x)
    first = x.numpy().copy()
    fill(x)
    assert first.min() >= 0.5 and first.max() < 1.0 and not np.array_equal(first, x.numpy())
    y = tg.zeros(1000)
    tg.compile(lambda t: (t.normal_(), None)[1])(y)
    assert abs(y.numpy().mean()) < 5 / np.sqrt(1000) and abs(y.numpy().std() - 1) < 0.15


def test_bernoulli():
    tg.manual_seed(1)
    p = tg.tensor(np.linspace(0.0, 1.0, 5)).expand(20000, 5)
    draws = tg.bernoulli(p)
    assert draws.dtype is tg.float64 and set(np.unique(draws.numpy())) <= {0.0, 1.0}
    freq = draws.numpy().mean(0)
    np.testing.assert_allclose(freq, np.linspace(0.0, 1.0, 5), atol=5 * 0.5 / np.sqrt(20000))
    assert freq[0] == 0.0 and freq[-1] == 1.0
    c = tg.compile(lambda p: p.bernoulli())(tg.full((20000,), 0.25))
    assert abs(c.numpy().mean() - 0.25) < 5 * 0.433 / np.sqrt(20000)
    z = tg.zeros(20000).bernoulli_(0.75)
    assert abs(z.numpy().mean() - 0.75) < 5 * 0.433 / np.sqrt(20000)


@pytest.mark.parametrize("compiled", [False, True])
def test_multinomial_frequencies(compiled):
    tg.manual_seed(2)
    weights = np.array([1.0, 0.0, 2.0, 3.0, 4.0])
    p = weights / weights.sum()
    draw = tg.compile(tg.multinomial) if compiled else tg.multinomial
    with_rep = draw(tg.tensor(weights), 20000, True).numpy()
    assert with_rep.dtype == np.int64 and with_rep.shape == (20000,)
    np.testing.assert_allclose(np.bincount(with_rep, minlength=5) / 20000, p, atol=5 * 0.5 / np.sqrt(20000))
    rows = draw(tg.tensor(weights).expand(20000, 5), 4)        # without replacement
    r = rows.numpy()
    assert r.shape == (20000, 4) and (np.sort(r, 1) == [0, 2, 3, 4]).all()     # each nonzero weight once
    np.testing.assert_allclose(np.bincount(r[:, 0], minlength=5) / 20000, p, atol=5 * 0.5 / np.sqrt(20000))


def test_multinomial_errors():
    with pytest.raises(RuntimeError, match="not enough"):
        tg.multinomial(tg.tensor([1.0, 0.0]), 2)
    with pytest.raises(RuntimeError, match="element < 0"):
        tg.multinomial(tg.tensor([1.0, -1.0]), 1)
    with pytest.raises(RuntimeError, match="sum of probabilities"):
        tg.multinomial(tg.tensor([0.0, 0.0]), 1, True)
    with pytest.raises(RuntimeError, match="1 or 2 dim"):
        tg.multinomial(tg.ones(2, 2, 2), 1)
