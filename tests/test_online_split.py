"""An online column walk over whole rows (column maxima and the sums of exp(a - g(max)) that read
them: softmax, log_softmax, logsumexp over leading axes, their backward's sums) is split over the
rows (`threads=d0`): each chunk of rows keeps its own maxima and sums relative to them, and the
region's join rescales each chunk's sums to the joined maximum (joins._online_join). Read from
`stage="kernels"`, and checked with every kernel split (TRACEGRAD_THRESHOLDS=parallel_min_work=1):
compiled (apart and joined) == eager == interpret == NumPy in float64 on odd sizes, float32 and
float64, transposed, sliced and permuted inputs (hypothesis); infinities and NaN as eager; the same
bits on every call whichever mode (threads or one) the region's Judge picks."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tracegrad as tg
import tracegrad.jit.joined as joined
from tracegrad.backends.cpu import regions
from test_column_walks import _layout, log_softmax0, logsumexp0, softmax0      # the column walks' own


def logsumexp01(x, g):
    return (x.logsumexp(dim=(0, 1)) * g[0, 0]).sum()


def softmax0_3d(x, g):
    return (x.softmax(dim=0) * g).sum()


def _lse(x, axes):
    m = x.max(axes, keepdims=True)
    return np.log(np.exp(x - m).sum(axes, keepdims=True)) + m


ORACLES = {     # NumPy float64 losses
    softmax0: lambda x, g: (np.exp(x - _lse(x, 0)) * g).sum(),
    log_softmax0: lambda x, g: ((x - _lse(x, 0)) * g).sum(),
    logsumexp0: lambda x, g: (_lse(x, 0)[0] * g[0]).sum(),
    logsumexp01: lambda x, g: (_lse(x, (0, 1))[0, 0] * g[0, 0]).sum(),
    softmax0_3d: lambda x, g: (np.exp(x - _lse(x, 0)) * g).sum(),     # a kept axis of 1 before the last
}


@pytest.fixture
def split_everything(monkeypatch):
    monkeypatch.setenv("TRACEGRAD_THRESHOLDS", "parallel_min_work=1")
    monkeypatch.setattr(joined, "JOIN_MIN_BYTES", 0)


def _grads(fn, x0, g0):
    x, g = tg.tensor(x0, requires_grad=True), tg.tensor(g0)
    loss = fn(x, g)
    loss.backward()
    return loss.item(), x.grad.numpy()


def _calls(fn, x0, g0, n=joined.JOIN_AFTER + 3):
    """The loss and dx of n calls of the compiled fn: apart, then joined; and its regions."""
    cf = tg.compile(fn)
    out = [_grads(cf, x0, g0) for _ in range(n)]
    entry = cf._entry_for((tg.tensor(x0, requires_grad=True), tg.tensor(g0)), {})[0]
    return cf, out, entry


def test_the_walk_splits_its_rows_and_joins_them_online(split_everything):
    """The joined softmax over dim 0: one online walk whose threads split the rows (threads=d0), the
    chunks' maxima and sums joined by the region, then the loss and dx."""
    rng = np.random.default_rng(0)
    x0, g0 = (rng.standard_normal((301, 37)).astype(np.float32) for _ in "xg")
    cf, out, _ = _calls(softmax0, x0, g0)
    x, g = tg.tensor(x0, requires_grad=True), tg.tensor(g0)
    text = cf.ir(x, g, stage="kernels")
    lines = [ln for ln in text.split("kernels ")[1].splitlines() if "online=" in ln]
    assert lines and all("loops=d0,d1 reduce=across d1 threads=d0 online=p0+p1" in ln for ln in lines), text
    entry = next(iter(e for e in [_calls(softmax0, x0, g0)[2]]))
    online = [r for p in entry.programs if p is not None for r in p.regions if r.chunks.online]
    assert online and all(2 <= r.chunks.n <= regions.ONLINE_CHUNKS for r in online), online
    np.testing.assert_allclose(out[-1][0], ORACLES[softmax0](x0.astype(np.float64), g0.astype(np.float64)),
                               rtol=1e-4, atol=1e-4)


def test_long_rows_keep_their_column_tiles():
    """Rows too long for whole-row vectors keep tiles of the kept axis, which the threads split."""
    x = tg.tensor(np.zeros((4, 20000), np.float32))
    with tg.no_grad():
        text = tg.compile(lambda x: x.logsumexp(dim=0)).ir(x, stage="kernels")
    line = next(ln for ln in text.splitlines() if "online=" in ln)
    assert "threads=" not in line and "loops=d1/" in line, line


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(fn=st.sampled_from(sorted(ORACLES, key=lambda f: f.__name__)),
       rows=st.sampled_from([2, 3, 17, 129, 300]), cols=st.sampled_from([1, 5, 33, 65]),
       dtype=st.sampled_from([np.float32, np.float64]),
       layout=st.sampled_from(["contiguous", "transposed", "sliced", "permuted"]), seed=st.integers(0, 2 ** 16))
def test_split_walks_agree_with_eager_interpret_and_numpy(split_everything, fn, rows, cols, dtype, layout, seed):
    rng = np.random.default_rng(seed)
    shape = (rows, 3, cols) if fn is logsumexp01 else (rows, 1, cols) if fn is softmax0_3d else (rows, cols)
    # each chunk of rows its own scale: the joined maximum comes from one chunk, the others rescale
    x0 = (rng.standard_normal(shape) * 3 + np.linspace(-20, 20, rows).reshape((rows,) + (1,) * (len(shape) - 1))[
        rng.permutation(rows)]).astype(dtype)
    x0, g0 = _layout(x0, layout, rng), _layout(rng.standard_normal(shape).astype(dtype), layout, rng)
    want = ORACLES[fn](x0.astype(np.float64), g0.astype(np.float64))
    wide = _grads(lambda x, g: fn(x.double(), g.double()), x0, g0)
    eager, ref = _grads(fn, x0, g0), _grads(tg.compile(fn, backend="interpret"), x0, g0)
    _, calls, _ = _calls(fn, x0, g0)
    scale = max(1.0, abs(want))
    tol = dict(rtol=3e-4, atol=3e-4 * scale) if dtype == np.float32 else dict(rtol=1e-9, atol=1e-9 * scale)
    gscale = max(np.abs(wide[1]).max(), np.abs(g0).max())
    gtol = dict(rtol=3e-4, atol=3e-4 * gscale) if dtype == np.float32 else dict(rtol=1e-8, atol=1e-9 * gscale)
    for got in [eager, ref] + calls:
        np.testing.assert_allclose(got[0], want, **tol)
        np.testing.assert_allclose(got[1], wide[1], **gtol)


@pytest.mark.parametrize("fn", [softmax0, log_softmax0, logsumexp0], ids=lambda f: f.__name__)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_infinities_and_nan_as_eager(split_everything, fn, dtype):
    """-inf in some chunks of a column only, a column of -inf, +inf, NaN: as eager, element by element
    (a chunk whose maximum is -inf adds nothing; its sums may be exp(-inf - -inf) = NaN)."""
    rng = np.random.default_rng(3)
    x0, g0 = (rng.standard_normal((257, 9)).astype(dtype) for _ in "xg")
    x0[:200, 1] = -np.inf              # the first chunks of column 1 hold only -inf
    x0[:, 2] = -np.inf
    x0[100, 3] = np.inf
    x0[250, 4] = np.nan
    x0[5:9, 5] = np.inf
    cols = [0, 1, 2, 3, 4, 5, 6]
    eager = tg.tensor(x0).__getattribute__(fn.__name__[:-1])(dim=0).numpy()
    cf = tg.compile(lambda x: x.__getattribute__(fn.__name__[:-1])(dim=0))
    with tg.no_grad():
        got = cf(tg.tensor(x0)).numpy()
    np.testing.assert_allclose(got[..., cols], eager[..., cols], rtol=1e-5 if dtype == np.float32 else 1e-12)
    _, calls, _ = _calls(fn, x0, g0)
    want = _grads(fn, x0, g0)
    for loss, dx in calls:
        np.testing.assert_array_equal(np.isnan(dx), np.isnan(want[1]))
        np.testing.assert_allclose(dx, want[1], rtol=1e-4, atol=1e-5)
        assert np.isnan(loss) == np.isnan(want[0])


def test_every_call_gives_the_same_bits(split_everything):
    """The chunks are fixed by the kernel's size: threads or the calling thread alone (the Judge tries
    both within the first calls), the same bits."""
    rng = np.random.default_rng(5)
    x0, g0 = (rng.standard_normal((999, 41)).astype(np.float32) * 4 for _ in "xg")
    _, calls, _ = _calls(softmax0, x0, g0, n=joined.JOIN_AFTER + 6)
    joined_calls = calls[joined.JOIN_AFTER:]
    for loss, dx in joined_calls[1:]:
        assert loss == joined_calls[0][0]
        np.testing.assert_array_equal(dx, joined_calls[0][1])
