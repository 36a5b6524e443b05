"""Integer-indexed gathers and their scatter-add gradients fused as expressions (ir/passes/gathers.py):
cross_entropy / nll_loss with int labels, x[arange(n), y], per-row picks along the last or another
axis. Compiled (llvm) == eager == the interpret backend on generated inputs, gradients against
float64 central differences, out-of-range labels raise as eagerly, and stage="kernels" shows no host
kernel and no [N, C] intermediate.

TRACEGRAD_GATHER_EXAMPLES raises the example count (default 25, for CI)."""
import os
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import tracegrad as tg
import tracegrad.nn.functional as F

EXAMPLES = int(os.environ.get("TRACEGRAD_GATHER_EXAMPLES", "25"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))


def _run(fn, arrays, grad_of, backend, cotangent=None):
    """(value, gradients of the inputs in grad_of) of fn on fresh tensors: eagerly (backend None) or
    compiled, called three times (the third call may be the joined forward+backward)."""
    call = fn if backend is None else tg.compile(fn, backend=backend)
    for _ in range(3 if backend is not None else 1):
        ts = [tg.tensor(a, requires_grad=i in grad_of) for i, a in enumerate(arrays)]
        out = call(*ts)
        out.backward(None if cotangent is None else tg.tensor(cotangent))
    return out.detach().numpy(), [ts[i].grad.numpy() for i in grad_of]


def _same(got, want, dtype):
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol, equal_nan=True)


def _compare(fn, arrays, grad_of, dtype, cotangent=None):
    want, wgrads = _run(fn, arrays, grad_of, None, cotangent)
    for backend in ("llvm", "interpret"):
        got, grads = _run(fn, arrays, grad_of, backend, cotangent)
        _same(got, want, dtype)
        for g, w in zip(grads, wgrads):
            _same(g, w, dtype)


@st.composite
def _losses(draw):
    n, c = draw(st.integers(1, 9)), draw(st.integers(1, 13))
    extra = draw(st.sampled_from([(), (), (3,)]))            # (N, C, d) inputs: classes on axis 1
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    x = (rng.standard_normal((n, c) + extra) * 3).astype(dtype)
    y = rng.integers(0, c, (n,) + extra).astype(draw(st.sampled_from([np.int32, np.int64])))
    ignore = draw(st.sampled_from([None, -100, 0]))
    if ignore is not None and draw(st.booleans()):
        y.reshape(-1)[rng.integers(0, y.size)] = ignore
    opts = {"reduction": draw(st.sampled_from(["mean", "sum", "none"]))}
    if ignore is not None:
        opts["ignore_index"] = ignore
    if draw(st.booleans()):
        opts["label_smoothing"] = draw(st.sampled_from([0.1, 0.5]))
    weight = rng.uniform(0.5, 2.0, c).astype(dtype) if draw(st.booleans()) else None
    cot = rng.standard_normal((n,) + extra).astype(dtype) if opts["reduction"] == "none" else None
    return x, y, weight, opts, cot


@SETTINGS
@given(_losses(), st.sampled_from(["cross_entropy", "nll_loss"]))
def test_losses_compiled_equal_eager_and_interpret(case, which):
    x, y, weight, opts, cot = case
    if which == "nll_loss":
        opts = {k: v for k, v in opts.items() if k != "label_smoothing"}
    loss = getattr(F, which)
    if weight is None:
        _compare(lambda x, y: loss(x, y, **opts), [x, y], [0], x.dtype, cot)
    else:
        _compare(lambda x, y, w: loss(x, y, weight=w, **opts), [x, y, weight], [0], x.dtype, cot)


@settings(max_examples=max(5, EXAMPLES // 3), deadline=None, suppress_health_check=list(HealthCheck))
@given(_losses())
def test_cross_entropy_gradients_against_central_differences(case):
    x, y, weight, opts, _ = case
    assume(not (opts["reduction"] == "mean" and (y == opts.get("ignore_index", -100)).all()))   # 0 / 0
    w = None if weight is None else tg.tensor(weight.astype(np.float64))
    f = tg.compile(lambda x: F.cross_entropy(x, tg.tensor(y), weight=w, **opts).sum())
    assert tg.gradcheck(f, (tg.tensor(x.astype(np.float64), requires_grad=True),))


@st.composite
def _picks(draw):
    """x, and integer indices picking k entries per row along `axis` (negative ones included)."""
    ndim = draw(st.integers(2, 3))
    shape = tuple(draw(st.integers(1, 7)) for _ in range(ndim))
    axis = draw(st.integers(0, ndim - 1))
    k = draw(st.sampled_from([1, 1, 2, 3]))
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    idx_shape = tuple(k if d == axis else s for d, s in enumerate(shape))
    idx = rng.integers(-shape[axis], shape[axis], idx_shape)
    x = rng.standard_normal(shape).astype(draw(st.sampled_from([np.float32, np.float64])))
    return x, idx, axis


def _take_along(x, idx, axis):
    """x[..., idx, ...] along axis through integer-tensor indexing with aranges on the other axes."""
    index = []
    for d in range(x.ndim):
        if d == axis:
            index.append(idx)
        else:
            index.append(tg.arange(x.shape[d]).reshape(tuple(x.shape[d] if e == d else 1 for e in range(x.ndim))))
    return x[tuple(index)]


@SETTINGS
@given(_picks())
def test_picks_along_any_axis(case):
    x, idx, axis = case
    want = np.take_along_axis(x, idx, axis)
    fn = lambda x, i: (_take_along(x.exp(), i, axis) * tg.arange(1, idx.shape[-1] + 1).to(x.dtype)).sum()
    got = tg.compile(fn)(tg.tensor(x), tg.tensor(idx)).detach()
    _same(got.item(), (np.exp(want) * np.arange(1, idx.shape[-1] + 1)).sum(), x.dtype)
    _compare(fn, [x, idx], [0], x.dtype)


def test_row_pick_with_an_arange_and_negative_labels():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((6, 5))
    y = np.array([0, -1, 4, -5, 2, 3])
    fn = lambda x, y: (x.tanh()[tg.arange(6), y] * 2).sum()
    _compare(fn, [x, y], [0], x.dtype)
    assert tg.gradcheck(tg.compile(fn), (tg.tensor(x, requires_grad=True), tg.tensor(y)))


@pytest.mark.parametrize("label", [5, -6, 1000])
def test_out_of_range_labels_raise_as_eagerly(label):
    x = tg.tensor(np.zeros((4, 5), np.float32), requires_grad=True)
    y = tg.tensor(np.array([0, 1, label, 2]))
    with pytest.raises(IndexError, match=f"index {label} is out of bounds for dimension 1 with size 5"):
        F.cross_entropy(x, y)
    f = tg.compile(lambda x, y: F.cross_entropy(x, y))
    with pytest.raises(IndexError, match=f"index {label} is out of bounds for dimension 1 with size 5"):
        f(x, y)
    good = tg.tensor(np.array([0, 1, 4, 2]))
    assert f(x, good).item() == pytest.approx(np.log(5))       # the error does not stick
    with pytest.raises(IndexError, match="out of bounds"):
        tg.compile(lambda x, y: F.cross_entropy(x, y), check=True)(x, y)


def _kernel_lines(text, program):
    block = text.split(f"({program}):")[1].split("kernels ")[0]
    return [line for line in block.splitlines() if line.strip().startswith("k")]


@pytest.mark.parametrize("loss", ["cross_entropy", "nll_log_softmax", "row_pick"])
def test_kernels_have_no_host_step_and_no_row_sized_intermediate(loss):
    n, c = 64, 50
    rng = np.random.default_rng(0)
    x = tg.tensor(rng.standard_normal((n, c)).astype(np.float32), requires_grad=True)
    y = tg.tensor(rng.integers(0, c, n))
    fn = {"cross_entropy": lambda x, y: F.cross_entropy(x, y),
          "nll_log_softmax": lambda x, y: F.nll_loss(F.log_softmax(x, 1), y),
          "row_pick": lambda x, y: -F.log_softmax(x, 1)[tg.arange(n), y].mean()}[loss]
    f = tg.compile(fn)
    for _ in range(3):
        f(x, y).backward()
    text = f.ir(x, y, stage="kernels")
    fwd, bwd = _kernel_lines(text, "forward"), _kernel_lines(text, "backward")
    assert not any("[host]" in line for line in fwd + bwd), text
    # the forward writes per-row values and the loss only; the backward reads x and writes dx once
    for line in fwd:
        assert f"[{n},{c}]" not in line.split("->")[1], text
    assert len(bwd) == 1 and bwd[0].split("->")[1].count(f"[{n},{c}]") == 1, text
    assert "gather" in " ".join(fwd) and "index_check" in " ".join(fwd)
    assert int(re.search(r"bytes=(\d+)", bwd[0]).group(1)) < 2 * n * c * 4 + 32 * n, text


def test_large_cross_entropy_saves_per_row_values_and_its_joined_call_reads_x_once():
    """Above remat's size for saving transcendentals the forward still saves only x and per-row values
    (the max, the sum of exp); once calls are followed by backward(), the joined call is one pass:
    read x, write dx."""
    from tracegrad.jit import joined
    n, c = 512, 1000
    rng = np.random.default_rng(1)
    xs = rng.standard_normal((n, c)).astype(np.float32)
    ys = rng.integers(0, c, n)
    ys[::7] = -100
    x, y = tg.tensor(xs, requires_grad=True), tg.tensor(ys)
    f = tg.compile(lambda x, y: F.cross_entropy(x, y))
    saved = f.ir(x, y, stage="forward").strip().splitlines()[-2].split("saved")[1]
    types = re.findall(r"%(\w+)", saved)
    forward = f.ir(x, y, stage="forward")
    big = [v for v in types if re.search(rf"%{v}: f32\[{n},{c}\]", forward)]
    assert big == ["x"], forward
    for _ in range(joined.JOIN_AFTER + 2):
        x.grad = None
        loss = f(x, y)
        loss.backward()
    xe = tg.tensor(xs, requires_grad=True)
    le = F.cross_entropy(xe, y)
    le.backward()
    np.testing.assert_allclose(loss.item(), le.item(), rtol=1e-5)
    np.testing.assert_allclose(x.grad.numpy(), xe.grad.numpy(), rtol=1e-5, atol=1e-8)
    x.grad = None                                    # the signature the calls had
    text = f.ir(x, y, stage="kernels")
    assert "forward with gradient" in text, text
    lines = _kernel_lines(text, "forward with gradient, run while calls are followed by backward()")
    assert not any("[host]" in line for line in lines), text
    big = [line for line in lines if f"space={n}x{c}" in line]
    assert len(big) == 1 and big[0].split("->")[1].count(f"[{n},{c}]") == 1, text
    moved = sum(int(re.search(r"bytes=(\d+)", line).group(1)) for line in lines)
    assert moved < 2 * n * c * 4 * 1.02, text


@SETTINGS
@given(_picks(), st.booleans())
def test_gather_and_take_along_dim_equal_numpy_and_eager(case, through_method):
    """gather takes indices in [0, size) (a negative one raises, as PyTorch's); take_along_dim also
    counts negative ones from the end."""
    x, idx, axis = case
    pos = np.where(idx < 0, idx + x.shape[axis], idx)
    g = (lambda x, i: x.gather(axis, i)) if through_method else (lambda x, i: tg.gather(x, axis, i))
    np.testing.assert_array_equal(g(tg.tensor(x), tg.tensor(pos)).numpy(), np.take_along_axis(x, pos, axis))
    if (idx < 0).any():
        with pytest.raises(IndexError, match=f"index {idx.min()} is out of bounds for dimension {axis} with size"):
            g(tg.tensor(x), tg.tensor(idx))
    fn = lambda x, i, j: (g(x.sin(), i) * g(x, i)).sum() + tg.take_along_dim(x, j[..., :1], axis).sum()
    _compare(fn, [x, pos, idx], [0], x.dtype)
    if x.dtype == np.float64:
        assert tg.gradcheck(tg.compile(fn), (tg.tensor(x, requires_grad=True), tg.tensor(pos), tg.tensor(idx)))


def test_gather_fused_reads_only_the_picks_and_checks_its_indices():
    x = tg.tensor(np.arange(60.0).reshape(4, 5, 3), requires_grad=True)
    i = tg.tensor(np.array([[[0, 4, 1], [2, 2, 3]]] * 4))
    f = tg.compile(lambda x, i: tg.gather(x.tanh(), 1, i).sum())
    f(x, i).backward()
    text = f.ir(x, i, stage="kernels")
    assert "[host]" not in text and "gather" in text and "f64[4,5,3]" not in text.split("backward")[0], text
    with pytest.raises(IndexError, match="index 5 is out of bounds for dimension 1 with size 5"):
        f(x, tg.tensor(np.array([[[0, 5, 1], [2, 2, 3]]] * 4)))
    with pytest.raises(TypeError, match="index must be an int64"):
        tg.gather(x, 1, tg.tensor(np.zeros((4, 2, 3))))
    with pytest.raises(RuntimeError, match="as many axes as input"):
        tg.gather(x, 1, tg.tensor(np.zeros((4, 2), np.int64)))
