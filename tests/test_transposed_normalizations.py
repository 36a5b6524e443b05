"""Row normalizations of a view whose reduced axis is memory's outermost (softmax(x.T, 1),
log_softmax, logsumexp of x.T or x.permute(1, 2, 0) over their last axis) are column normalizations
of memory: their maximum (read back over the input's space) and the reductions that read it are
built over the space permuted into memory order (ir/layout.py's columns_first), so they take the one
online column walk of softmax over dim 0 (a joined softmax(x.T, 1) * g.T: two walks over x's space,
as softmax(x, 0)). Plain sums of such views keep their tiles across the kept axis
(test_across_rows.py). Read from `stage="kernels"`; values: compiled (apart and joined, every
kernel split or none) == eager == interpret == NumPy in float64, odd sizes, float32 and float64,
sliced inputs (hypothesis)."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tracegrad as tg
import tracegrad.jit.joined as joined


def _view(x, nd):
    return x.T if nd == 2 else x.permute(1, 2, 0)


def _np_view(a):
    return a.T if a.ndim == 2 else a.transpose(1, 2, 0)


def _lse(z):
    m = z.max(-1, keepdims=True)
    return np.log(np.exp(z - m).sum(-1, keepdims=True)) + m


FNS = {      # fn(x, g) with z = the view; NumPy float64 oracle
    "softmax": (lambda x, g: (_view(x, x.ndim).softmax(dim=-1) * _view(g, g.ndim)).sum(),
                lambda x, g: (np.exp(_np_view(x) - _lse(_np_view(x))) * _np_view(g)).sum()),
    "log_softmax": (lambda x, g: (_view(x, x.ndim).log_softmax(dim=-1) * _view(g, g.ndim)).sum(),
                    lambda x, g: ((_np_view(x) - _lse(_np_view(x))) * _np_view(g)).sum()),
    "logsumexp": (lambda x, g: (_view(x, x.ndim).logsumexp(dim=-1) * _view(g, g.ndim)[..., 0]).sum(),
                  lambda x, g: (_lse(_np_view(x))[..., 0] * _np_view(g)[..., 0]).sum()),
}


def _joined_kernels(fn, x0, g0):
    cf = tg.compile(fn)
    for _ in range(joined.JOIN_AFTER + 1):
        x, g = tg.tensor(x0, requires_grad=True), tg.tensor(g0)
        cf(x, g).backward()
    return cf.ir(tg.tensor(x0, requires_grad=True), tg.tensor(g0), stage="kernels").split("kernels ")[-1]


def test_softmax_of_a_transposed_view_is_two_walks_like_dim0(monkeypatch):
    monkeypatch.setattr(joined, "JOIN_MIN_BYTES", 0)
    rng = np.random.default_rng(0)
    x0, g0 = (rng.standard_normal((300, 41)).astype(np.float32) for _ in "xg")
    text = _joined_kernels(FNS["softmax"][0], x0, g0)
    assert "forward with gradient" in text.splitlines()[0], text
    lines = [ln for ln in text.splitlines()[1:] if "space=300x41 " in ln]
    assert len(lines) == 2, text
    assert lines[0].endswith("loops=d0,d1 reduce=across d1 threads=d0 online=p0+p1 online=p0+p2 online=p0+p3"), lines
    assert "f32[300,41]" in lines[1].split("->")[1] and "f32[]" in lines[1].split("->")[1], lines


def test_logsumexp_of_a_permuted_view_is_one_column_walk():
    x = tg.tensor(np.random.default_rng(1).standard_normal((50, 7, 33)).astype(np.float32))
    with tg.no_grad():
        text = tg.compile(lambda x: x.permute(1, 2, 0).logsumexp(dim=-1)).ir(x, stage="kernels")
    (line,) = [ln for ln in text.splitlines() if "space=50x7x33 " in ln]
    assert "[reduce_acc]" in line and "online=p0+p1" in line, text


def test_a_plain_row_sum_of_a_transposed_view_keeps_its_tiles():
    x = tg.tensor(np.random.default_rng(2).standard_normal((300, 41)).astype(np.float32))
    text = tg.compile(lambda x: x.T.amax(1) + x.T.sum(1)).ir(x, stage="kernels")
    assert "[reduce_acc]" not in text and "reduce=across d0" in text, text


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(sorted(FNS)), rows=st.sampled_from([2, 3, 17, 130]), cols=st.sampled_from([1, 5, 33]),
       mid=st.sampled_from([0, 1, 3]), dtype=st.sampled_from([np.float32, np.float64]), sliced=st.booleans(),
       split=st.booleans(), seed=st.integers(0, 2 ** 16))
def test_compiled_joined_eager_interpret_numpy_agree(monkeypatch, name, rows, cols, mid, dtype, sliced, split, seed):
    monkeypatch.setattr(joined, "JOIN_MIN_BYTES", 0)
    if split:
        monkeypatch.setenv("TRACEGRAD_THRESHOLDS", "parallel_min_work=1")
    fn, oracle = FNS[name]
    rng = np.random.default_rng(seed)
    shape = (rows, cols) if mid == 0 else (rows, mid, cols)

    def make():
        a = (rng.standard_normal(shape) * 3).astype(dtype)
        if not sliced:
            return a
        big = np.zeros((rows,) + tuple(2 * n for n in shape[1:]), dtype)
        big[(slice(None),) + (slice(None, None, 2),) * (len(shape) - 1)] = a
        return big[(slice(None),) + (slice(None, None, 2),) * (len(shape) - 1)]
    x0, g0 = make(), make()
    want = oracle(x0.astype(np.float64), g0.astype(np.float64))

    def grads(run):
        x, g = tg.tensor(x0, requires_grad=True), tg.tensor(g0)
        loss = run(x, g)
        loss.backward()
        return loss.item(), x.grad.numpy()
    wide = grads(lambda x, g: fn(x.double(), g.double()))
    cf = tg.compile(fn)
    got = [grads(fn), grads(tg.compile(fn, backend="interpret"))] + [grads(cf) for _ in range(joined.JOIN_AFTER + 2)]
    scale = max(1.0, abs(want))
    tol = dict(rtol=3e-4, atol=3e-4 * scale) if dtype == np.float32 else dict(rtol=1e-9, atol=1e-9 * scale)
    gscale = max(np.abs(wide[1]).max(), np.abs(g0).max())
    gtol = dict(rtol=3e-4, atol=3e-4 * gscale) if dtype == np.float32 else dict(rtol=1e-8, atol=1e-9 * gscale)
    for loss, dx in got:
        np.testing.assert_allclose(loss, want, **tol)
        np.testing.assert_allclose(dx, wide[1], **gtol)


@pytest.mark.parametrize("name", sorted(FNS))
def test_gradients_match_float64_finite_differences(name):
    rng = np.random.default_rng(4)
    g = tg.tensor(rng.standard_normal((5, 3)))
    x = tg.tensor(rng.standard_normal((5, 3)), requires_grad=True)
    assert tg.gradcheck(tg.compile(lambda x: FNS[name][0](x, g)), (x,))
