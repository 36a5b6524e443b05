"""Column normalizations (reductions over leading axes whose statistics the same space reads again:
softmax, log_softmax, logsumexp over dim 0, a normalization by column statistics, batch norm over
(0, 2) and (0, 2, 3)) walk memory as few times as their data dependencies allow
(ir/passes/columns.py). Read from `stage="kernels"` (the walks of the joined forward and backward)
and checked on values: compiled (apart and joined) == eager == interpret == NumPy (float64) on odd
sizes, float32 and float64, transposed, sliced and permuted inputs; gradients against float64
central finite differences.

TRACEGRAD_COLUMN_EXAMPLES raises the hypothesis example count (default 12, for CI)."""
import math
import os
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tracegrad as tg
import tracegrad.jit.joined as joined

EXAMPLES = int(os.environ.get("TRACEGRAD_COLUMN_EXAMPLES", "12"))
EPS = 1e-5


def softmax0(x, g):
    return (x.softmax(dim=0) * g).sum()


def log_softmax0(x, g):
    return (x.log_softmax(dim=0) * g).sum()


def logsumexp0(x, g):
    return (x.logsumexp(dim=0) * g[0]).sum()


def colnorm(x, g):
    return ((x - x.mean(axis=0, keepdims=True)) / x.std(dim=0, keepdim=True) * g).sum()


def softmax02(x, g):
    return ((x - x.logsumexp(dim=(0, 2), keepdim=True)).exp() * g).sum()


def batchnorm(x, g, axes):
    mean = x.mean(axis=axes, keepdims=True)
    d = x - mean
    var = (d * d).mean(axis=axes, keepdims=True)
    w = g.sum(axis=axes, keepdims=True) * 0.1 + 1          # per-channel weight and bias made of g
    return ((d / (var + EPS).sqrt() * w + 0.5) * g).sum()


def batchnorm02(x, g):
    return batchnorm(x, g, (0, 2))


def batchnorm023(x, g):
    return batchnorm(x, g, (0, 2, 3))


def _np_softmax0(x):
    e = np.exp(x - x.max(0, keepdims=True))
    return e / e.sum(0, keepdims=True)


def _np_lse(x, axes):
    m = x.max(axes, keepdims=True)
    return np.log(np.exp(x - m).sum(axes, keepdims=True)) + m


def _np_batchnorm(x, g, axes):
    d = x - x.mean(axes, keepdims=True)
    w = g.sum(axes, keepdims=True) * 0.1 + 1
    return ((d / np.sqrt((d * d).mean(axes, keepdims=True) + EPS) * w + 0.5) * g).sum()


ORACLES = {      # NumPy float64 losses
    softmax0: lambda x, g: (_np_softmax0(x) * g).sum(),
    log_softmax0: lambda x, g: ((x - _np_lse(x, 0)) * g).sum(),
    logsumexp0: lambda x, g: (_np_lse(x, 0)[0] * g[0]).sum(),
    colnorm: lambda x, g: ((x - x.mean(0, keepdims=True)) / x.std(0, ddof=1, keepdims=True) * g).sum(),
    softmax02: lambda x, g: (np.exp(x - _np_lse(x, (0, 2))) * g).sum(),
    batchnorm02: lambda x, g: _np_batchnorm(x, g, (0, 2)),
    batchnorm023: lambda x, g: _np_batchnorm(x, g, (0, 2, 3)),
}
TWO_D = [softmax0, log_softmax0, logsumexp0, colnorm]


def _walks(text, shape, itemsize):
    """The kernels of the joined program (the last block of `text`) that walk memory over `shape`:
    its space, reading or writing at least one array of it."""
    block = text.split("kernels ")[-1]
    assert "forward with gradient" in block.splitlines()[0], "the calls did not join"
    space = "x".join(map(str, shape))
    return [ln for ln in block.splitlines()[1:]
            if f"space={space} " in ln and int(re.search(r"bytes=(\d+)", ln).group(1)) >= math.prod(shape) * itemsize]


def _joined(fn, *arrays):
    """(compiled function, tensors, loss) after enough calls followed by backward() to join them
    (JOIN_MIN_BYTES patched to 0 by the caller)."""
    cf = tg.compile(fn)
    ts = [tg.tensor(a, requires_grad=j == 0) for j, a in enumerate(arrays)]
    for _ in range(joined.JOIN_AFTER + 1):
        ts[0].grad = None
        loss = cf(*ts)
        loss.backward()
    ts[0].grad = None                   # the signature the calls had
    return cf, ts, loss


def test_softmax_dim0_fwd_bwd_walks(monkeypatch):
    """The column max, the sum of exp(x - max) and the backward's sums of g * exp(x - max) in one online
    walk (each maximum paired with the sums that read it), then the loss and dx: two walks (four before:
    max | sum of exp | loss and the backward's sums | dx, and exp(x - max) saved: written, then read)."""
    monkeypatch.setattr(joined, "JOIN_MIN_BYTES", 0)
    rng = np.random.default_rng(0)
    x, g = (rng.standard_normal((700, 401)).astype(np.float32) for _ in "xg")
    cf, ts, _ = _joined(softmax0, x, g)
    walks = _walks(cf.ir(*ts, stage="kernels"), x.shape, 4)
    assert len(walks) == 2, walks
    assert re.search(r"ops=max\+.*exp.*reduce=across d1 threads=d0 online=p0\+p1 online=p0\+p2", walks[0]), walks
    assert "f32[700,401]" in walks[1].split("->")[1] and "f32[]" in walks[1].split("->")[1], walks


def test_logsumexp_dim0_forward_is_one_walk():
    """max and the sum of exp(x - g(max)) (g: 0 where the max is infinite) in one walk over x."""
    x = tg.tensor(np.random.default_rng(2).standard_normal((300, 257)).astype(np.float32))
    with tg.no_grad():
        text = tg.compile(lambda x: x.logsumexp(dim=0)).ir(x, stage="kernels")
    assert len(_walks("kernels joined (forward with gradient)\n" + text.split("kernels ")[1], x.shape, 4)) == 1, text


def test_batchnorm_fwd_bwd_walks(monkeypatch):
    """mean | var beside the backward's channel sums | the loss and dx: three walks over NCHW (five before,
    one of which wrote and read back a shared full-size value)."""
    monkeypatch.setattr(joined, "JOIN_MIN_BYTES", 0)
    rng = np.random.default_rng(1)
    x, g = (rng.standard_normal((8, 16, 14, 14)).astype(np.float32) for _ in "xg")
    cf, ts, _ = _joined(batchnorm023, x, g)
    walks = _walks(cf.ir(*ts, stage="kernels"), x.shape, 4)
    assert len(walks) == 3, walks
    assert re.match(r"ops=sum(\+sum)* ", walks[0].split("split=0 ")[1]), walks    # the means of x (and g)
    assert "f32[8,16,14,14]" in walks[2].split("->")[1], walks


def _layout(a, how, rng):
    """The same values as array a, held transposed, as a slice of a larger array, or permuted."""
    if how == "transposed":
        return np.ascontiguousarray(a.T).T
    if how == "sliced":
        big = np.zeros((a.shape[0] + 2,) + tuple(2 * n for n in a.shape[1:]), a.dtype)
        big[(slice(1, -1),) + (slice(None, None, 2),) * (a.ndim - 1)] = a
        return big[(slice(1, -1),) + (slice(None, None, 2),) * (a.ndim - 1)]
    if how == "permuted":
        perm = rng.permutation(a.ndim)
        return np.ascontiguousarray(a.transpose(perm)).transpose(np.argsort(perm))
    return a


@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(fn=st.sampled_from(sorted(ORACLES, key=lambda f: f.__name__)),
       sizes=st.tuples(st.sampled_from([2, 3, 17, 130]), st.sampled_from([1, 5, 33, 301]),
                       st.sampled_from([1, 3, 7]), st.sampled_from([1, 2, 5])),
       dtype=st.sampled_from([np.float32, np.float64]),
       layout=st.sampled_from(["contiguous", "transposed", "sliced", "permuted"]), seed=st.integers(0, 2 ** 16))
def test_compiled_joined_eager_interpret_numpy_agree(monkeypatch, fn, sizes, dtype, layout, seed):
    monkeypatch.setattr(joined, "JOIN_MIN_BYTES", 0)
    rng = np.random.default_rng(seed)
    shape = sizes[:2] if fn in TWO_D else sizes[:3] if fn in (softmax02, batchnorm02) else sizes
    x0, g0 = (_layout((rng.standard_normal(shape) * 3).astype(dtype), layout, rng) for _ in "xg")
    want = ORACLES[fn](x0.astype(np.float64), g0.astype(np.float64))

    def grads(run):
        x, g = tg.tensor(x0, requires_grad=True), tg.tensor(g0)
        loss = run(x, g)
        loss.backward()
        return loss.item(), x.grad.numpy()
    eager = grads(fn)
    ref = grads(tg.compile(fn, backend="interpret"))
    wide = grads(lambda x, g: fn(x.double(), g.double()))           # eager in float64: the gradient's oracle
    cf = tg.compile(fn)
    calls = [grads(cf) for _ in range(joined.JOIN_AFTER + 2)]         # apart, then joined
    scale = max(1.0, abs(want))
    tol = dict(rtol=3e-4, atol=3e-4 * scale) if dtype == np.float32 else dict(rtol=1e-9, atol=1e-9 * scale)
    gscale = max(np.abs(wide[1]).max(), np.abs(g0).max())     # dx's terms (g, g * p, g / std) cancel
    # where they cancel hardest (a column of two nearly equal values: g / std in the hundreds) float32 itself
    # is that far off: no tighter than eager float32's own error (seed 13, colnorm (2, 301): eager 4.28e-3 off at a
    # zero gradient, compiled 4.29e-3)
    own = 4 * float(np.abs(eager[1] - wide[1]).max()) if dtype == np.float32 else 0.0
    gtol = dict(rtol=3e-4, atol=max(3e-4 * gscale, own)) if dtype == np.float32 else dict(rtol=1e-8, atol=1e-9 * gscale)
    for got in [eager, ref] + calls:
        np.testing.assert_allclose(got[0], want, **tol)
        np.testing.assert_allclose(got[1], wide[1], **gtol)


@pytest.mark.parametrize("fn", sorted(ORACLES, key=lambda f: f.__name__), ids=lambda f: f.__name__)
def test_gradients_match_float64_finite_differences(fn):
    """Compiled in float64: tg.gradcheck's central differences on small odd shapes."""
    rng = np.random.default_rng(7)
    shape = (5, 3) if fn in TWO_D else (3, 2, 5) if fn in (softmax02, batchnorm02) else (3, 2, 3, 2)
    x = tg.tensor(rng.standard_normal(shape), requires_grad=True)
    g = tg.tensor(rng.standard_normal(shape))
    cf = tg.compile(fn)
    assert tg.gradcheck(lambda x: cf(x, g), (x,), eps=1e-6, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_long_rows_walk_in_tiles(dtype):
    """Rows whose vectors would pass ONLINE_LIMIT walk in tiles of the kept axis (threads split them):
    the same values as NumPy, the tiles' edges included."""
    from tracegrad.backends.cpu.plan.limits import ONLINE_LIMIT
    rng = np.random.default_rng(3)
    x0 = (rng.standard_normal((37, ONLINE_LIMIT + 77)) * 4).astype(dtype)
    f = tg.compile(lambda x: x.logsumexp(dim=0))
    with tg.no_grad():
        got = f(tg.tensor(x0)).numpy()
        text = f.ir(tg.tensor(x0), stage="kernels")
    tile = int(re.search(r"loops=d1/(\d+),", text).group(1))
    assert tile < x0.shape[1], text
    tol = dict(rtol=2e-6, atol=2e-6) if dtype == np.float32 else dict(rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(got, _np_lse(x0.astype(np.float64), 0)[0], **tol)


@pytest.mark.parametrize("reduce", ["softmax", "log_softmax", "logsumexp"])
@pytest.mark.parametrize("alias", ["same", "view", "detach", "apart"])
def test_an_input_updated_in_place_after_a_column_walk(reduce, alias):
    """x requires grad and is updated in place after a column normalization of it: the copy of x
    saved for the backward must not ride along the online walk (its sums then read maxima still
    being accumulated: fuzz seed 100, program 74, a silent wrong result)."""
    def f(x0, x1, c):
        v = getattr(x0 + c, reduce)(dim=0)
        with tg.no_grad():
            x1.mul_(0.5)
        return v

    rng = np.random.default_rng(7)
    a0, c0 = rng.standard_normal((5, 3)).astype(np.float32), rng.standard_normal(1).astype(np.float32)
    outs = []
    for fn in (f, tg.compile(f)):
        a, c = tg.tensor(a0.copy(), requires_grad=True), tg.tensor(c0.copy(), requires_grad=True)
        x1 = {"same": a, "view": a.view(a.shape), "detach": a.detach(), "apart": tg.tensor(a0.copy())}[alias]
        v = fn(a, x1, c)
        (v * tg.tensor(np.cos(np.arange(v.numel())).reshape(v.shape).astype(np.float32))).sum().backward()
        outs.append([v.detach().numpy(), a.detach().numpy(), a.grad.numpy(), c.grad.numpy()])
    for e, g in zip(*outs):
        np.testing.assert_allclose(g, e, rtol=2e-5, atol=2e-6)
