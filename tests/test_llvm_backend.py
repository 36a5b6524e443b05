"""The llvm backend (SPEC §5): vectorized LLVM IR, stage="llvm" and stage="kernels", f.profile,
check=True, fusion expectations, dtypes, views, empty tensors, odd sizes, and the compiled boundary
(non-contiguous inputs, dtype/shape changes, output buffers never reused)."""
import os
import re
import signal
import warnings

import numpy as np
import pytest

import hangs
import tracegrad as tg
import tracegrad.nn.functional as F
from tracegrad.ops import PRIMS

F32, F64 = tg.float32, tg.float64


def rnd(*shape, dtype=np.float32, seed=0, grad=False):
    t = tg.tensor(np.random.default_rng(seed).standard_normal(shape).astype(dtype))
    t.requires_grad = grad
    return t


def kernels(cf, *args, which="forward"):
    """[(kind, ops)] of the forward (or backward) program, parsed from stage="kernels"."""
    out, cur = [], None
    for line in cf.ir(*args, stage="kernels").splitlines():
        m = re.match(r"kernels \S+ \((\w+)\): (\d+)", line)
        if m:
            cur = m.group(1)
            continue
        m = re.match(r"\s+k\d+ \[(\w+)\] space=\S+ split=\d+ ops=(\S+) ", line)
        if m and cur == which:
            out.append((m.group(1), m.group(2).split("+")))
    return out


def kernel_body(text, name="forward_k0"):
    """The LLVM function holding kernel `name`'s loops (its `_body` helper where there is one)."""
    m = (re.search(r"define [^\n]*@%s_body\(.*?\n}" % name, text, re.S)
         or re.search(r"define [^\n]*@%s\(.*?\n}" % name, text, re.S))
    assert m, f"no kernel {name} in the LLVM IR"
    return m.group(0)


def close32(got, want, rtol=1e-4):
    want = np.asarray(want, np.float64)
    scale = max(1.0, float(np.max(np.abs(want)))) if want.size else 1.0
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=rtol, atol=rtol * scale)


def softmax_np(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


# ------------------------------------------------------------------ LLVM IR

def test_elementwise_chain_is_vectorized():
    cf = tg.compile(lambda x, y: ((x * 2.0 + y).relu() - y * 0.5).abs())
    x, y = rnd(64, 1023), rnd(64, 1023, seed=1)
    body = kernel_body(cf.ir(x, y, stage="llvm", optimized=True))
    assert re.search(r"load <\d+ x float>", body) and re.search(r"store <\d+ x float>", body), body[:2000]
    assert re.search(r"fmul <\d+ x float>", body)
    close32(cf(x, y).numpy(), np.abs(np.maximum(x.numpy() * 2 + y.numpy(), 0) - y.numpy() * 0.5))


def test_row_softmax_is_vectorized():
    cf = tg.compile(lambda x: F.softmax(x, axis=-1))
    x = rnd(32, 1000)
    body = kernel_body(cf.ir(x, stage="llvm", optimized=True))
    # the max, the exp-sum and the normalizing loops all run on vectors
    assert re.search(r"<\d+ x float> @llvm\.maximum\.v\d+f32", body), "row max not vectorized"
    assert re.search(r"fadd reassoc <\d+ x float>", body), "row sum not vectorized"
    assert re.search(r"store <\d+ x float>", body)
    close32(cf(x).numpy(), softmax_np(x.numpy()))


def test_column_sum_row_blocks_stay_rolled():
    # a float32 sum over axis 0 adds blocks of OUTER_BLOCK rows in float32: that block loop stays a
    # loop (its constant trips unrolled whole made the body 5x larger, compiled twice as long, no faster)
    cf = tg.compile(lambda x, g: (x * g).sum(0))
    x, g = rnd(256, 256), rnd(256, 256, seed=1)
    assert "llvm.loop.unroll.disable" in cf.ir(x, g, stage="llvm")
    body = kernel_body(cf.ir(x, g, stage="llvm", optimized=True))
    adds = re.findall(r"fadd reassoc <\d+ x float>", body)
    assert 0 < len(adds) <= 32, len(adds)            # a row's vectors once, not 16 rows' of them
    want = (x.numpy().astype(np.float64) * g.numpy()).sum(0)
    np.testing.assert_allclose(cf(x, g).numpy(), want, rtol=1e-5, atol=1e-5)


def test_stage_llvm_plain_vs_optimized():
    cf = tg.compile(lambda x: (x * 3.0).exp().sum(axis=-1))
    x = rnd(8, 100)
    plain = cf.ir(x, stage="llvm")
    opt = cf.ir(x, stage="llvm", optimized=True)
    assert plain == cf.ir(x, stage="llvm", optimized=False)
    for text in (plain, opt):
        assert "void @forward_k0_body(" in text       # kernel k0 of the forward program
    assert "alloca i64" in kernel_body(plain)            # loop counters before SROA
    assert "alloca" not in kernel_body(opt)               # promoted to registers
    assert not re.search(r"<\d+ x ", kernel_body(plain))   # the generator emits scalar code
    assert re.search(r"<\d+ x ", kernel_body(opt))          # LLVM vectorizes it
    assert "@tg_exp_f32" not in kernel_body(opt)           # mathlib routines are inlined
    with pytest.raises(ValueError, match="llvm"):
        tg.compile(lambda x: x + 1, backend="interpret").ir(x, stage="llvm")
    assert cf.stats()["traces"] == 1


def test_profile_rows():
    x, w = rnd(64, 300), rnd(300, 40, seed=1)
    cf = tg.compile(lambda x, w: F.softmax((x @ w) * 0.5, axis=-1))
    rows = cf.profile(x, w, repeat=3)
    assert [r["kernel"] for r in rows] == ["k0", "k1"]
    mm, sm = rows
    assert mm["kind"] == "extern" and mm["ops"] == ["matmul"]
    assert sm["kind"] == "loop" and "exp" in sm["ops"] and "max" in sm["ops"] and "sum" in sm["ops"]
    assert mm["bytes"] == (64 * 300 + 300 * 40 + 64 * 40) * 4
    for r in rows:
        assert r["time"] > 0 and r["bytes"] > 0
        assert r["GB/s"] == pytest.approx(r["bytes"] / r["time"] / 1e9)
    with pytest.raises(ValueError, match="llvm"):
        tg.compile(lambda x: x + 1, backend="interpret").profile(x)


# ------------------------------------------------------------------ check=True

def test_check_mode_passes_values_and_gradients():
    x, w = rnd(6, 17, grad=True), rnd(17, 5, seed=1, grad=True)
    cf = tg.compile(lambda x, w: F.gelu(F.layer_norm(x, (17,)) @ w).sum(), check=True)
    loss = cf(x, w)
    loss.backward()
    assert np.isfinite(loss.item()) and x.grad is not None and w.grad is not None


def test_check_mode_names_the_differing_kernel(monkeypatch):
    x, w = rnd(6, 17), rnd(17, 5, seed=1)
    cf = tg.compile(lambda x, w: (x @ w).exp() * 2.0, check=True)
    cf(x, w)
    exp = PRIMS["exp"]
    monkeypatch.setattr(exp, "impl", lambda a: np.exp(a) + 1.0)   # the oracle now disagrees
    with pytest.raises(tg.CheckError) as err:
        cf(x, w)
    msg = str(err.value)
    assert isinstance(err.value, RuntimeError)
    assert "k1" in msg and "exp" in msg and "mul" in msg and "k0" not in msg, msg


# ------------------------------------------------------------------ fusion

def test_fusion_expectations():
    x = rnd(16, 64)
    assert kernels(tg.compile(lambda x: F.gelu(x)), x) == [("loop", ["mul", "mul", "erf", "add", "mul"])]
    assert kernels(tg.compile(lambda x: F.gelu(x, approximate="tanh")), x)[0][0] == "loop"
    assert len(kernels(tg.compile(lambda x: F.gelu(x, approximate="tanh")), x)) == 1
    ks = kernels(tg.compile(lambda x: F.softmax(x, axis=-1)), x)
    assert len(ks) == 1 and {"max", "sum", "exp"} <= set(ks[0][1])
    w, b = rnd(64, seed=2), rnd(64, seed=3)
    ks = kernels(tg.compile(lambda x, w, b: F.layer_norm(x, (64,), w, b)), x, w, b)
    assert 1 <= len(ks) <= 2 and all(k == "loop" for k, _ in ks)
    ks = kernels(tg.compile(lambda x, w: x @ w), x, rnd(64, 8))
    assert ks == [("extern", ["matmul"])]
    ks = kernels(tg.compile(lambda x, w: (x @ w + 1.0).relu()), x, rnd(64, 8))
    assert ks == [("extern", ["matmul"]), ("loop", ["add", "relu"])]


# ------------------------------------------------------------------ dtypes

def test_float64_kernels():
    x = rnd(9, 17, dtype=np.float64)
    cf = tg.compile(lambda x: F.softmax(x, axis=-1) + x.tanh() * x.sigmoid())
    out = cf(x)
    assert out.dtype == F64
    xn = x.numpy()
    np.testing.assert_allclose(out.numpy(), softmax_np(xn) + np.tanh(xn) / (1 + np.exp(-xn)), rtol=1e-12,
                               atol=1e-12)
    body = kernel_body(cf.ir(x, stage="llvm"))
    assert "double" in body and " float " not in body
    cf2 = tg.compile(lambda x: (x.sin() * x.cos() + x.sqrt().abs() + F.erf(x)).sum(axis=0))
    y = tg.tensor(np.abs(xn) + 0.1)
    import math
    ref = (np.sin(y.numpy()) * np.cos(y.numpy()) + np.sqrt(y.numpy())
           + np.vectorize(math.erf)(y.numpy())).sum(axis=0)
    np.testing.assert_allclose(cf2(y).numpy(), ref, rtol=1e-12, atol=1e-12)


def test_integer_and_bool_ops():
    rng = np.random.default_rng(0)
    a = tg.tensor(rng.integers(-50, 50, (7, 13)).astype(np.int32))
    b = tg.tensor(rng.integers(-50, 50, (7, 13)).astype(np.int32))
    p = tg.tensor(rng.integers(0, 2, (7, 13)).astype(bool))
    q = tg.tensor(rng.integers(0, 2, (7, 13)).astype(bool))

    def f(a, b, p, q):
        c = (a * 3 - b).abs() + tg.maximum(a, b) - a.sign() + (-b).relu()
        m = (a < b) | ((a == b) & p)
        return (c, m, tg.where(m, a, b), a.to(tg.int64).sum(axis=-1), c.amax(axis=0), c.amin(axis=-1),
                p + q, p * q, ~p, (a & b), a.to(tg.float32) * 0.5, c.to(tg.bool), p.to(tg.float64) + 1.0)
    eager = f(a, b, p, q)
    comp = tg.compile(f)(a, b, p, q)
    for e, c in zip(eager, comp):
        assert e.dtype == c.dtype and e.shape == c.shape
        np.testing.assert_array_equal(c.numpy(), e.numpy())
    an, bn, pn, qn = a.numpy(), b.numpy(), p.numpy(), q.numpy()
    np.testing.assert_array_equal(comp[6].numpy(), pn | qn)                  # bool + bool is "or"
    np.testing.assert_array_equal(comp[9].numpy(), an & bn)                   # & of integers is bitwise, as PyTorch's
    ks = kernels(tg.compile(f), a, b, p, q)
    assert all(k in ("loop", "reduce_acc") for k, _ in ks), ks               # all lowered, no host kernels
    i64 = tg.tensor(rng.integers(-2**40, 2**40, (5, 3)))
    out = tg.compile(lambda x: (x * 2 + 1).sum(axis=0) + x.amax(axis=0))(i64)
    np.testing.assert_array_equal(out.numpy(), (i64.numpy() * 2 + 1).sum(axis=0) + i64.numpy().max(axis=0))


def test_float32_constants_beyond_range_round_to_infinity():
    x = tg.tensor(np.array([0.0, 1.5, -2.0, 3.0], np.float32))
    f = lambda x: (x * 1e39, x.clamp(-1e39, 1e39), x + 3.41e38)  # noqa: E731
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        eager = f(x)
        comp = tg.compile(f)(x)
    for e, c in zip(eager, comp):
        np.testing.assert_array_equal(c.numpy(), e.numpy())


# ------------------------------------------------------------------ views, empty tensors, sizes

def test_views_are_read_without_copies():
    x = rnd(12, 10)
    r = rnd(1, 10, seed=1)

    def f(x, r):
        return x.permute(1, 0)[::3, 1::2] * 2.0 + r.expand(12, 10).permute(1, 0)[::3, 1::2]
    ks = kernels(tg.compile(f), x, r)
    assert ks == [("loop", ["mul", "add"])], ks
    out = tg.compile(f)(x, r)
    xn, rn = x.numpy(), r.numpy()
    close32(out.numpy(), (xn.T[::3, 1::2] * 2.0 + np.broadcast_to(rn, (12, 10)).T[::3, 1::2]))
    # a reduction over a transposed, strided view
    g = lambda x: x.permute(1, 0)[1::2].sum(axis=-1)  # noqa: E731
    assert [k for k, _ in kernels(tg.compile(g), x)] in (["loop"], ["reduce_acc"])
    close32(tg.compile(g)(x).numpy(), xn.T[1::2].sum(axis=-1))


def test_empty_tensors():
    def f(x, y):
        out = (x * 2.0 + 1.0, x.sum(axis=0), x.sum(axis=-1), (x + y).exp(), y.sum(), x.mean(axis=0) * 0.0)
        return out + ((F.softmax(x, axis=-1), x.amax(axis=-1)) if x.shape[-1] else ())
    for shape in [(0, 3), (3, 0), (0, 0), (2, 0, 3)]:
        x = rnd(*shape)
        y = rnd(shape[-1])
        eager = f(x, y)
        comp = tg.compile(f)(x, y)
        for e, c in zip(eager, comp):
            assert e.shape == c.shape and e.dtype == c.dtype
            close32(c.numpy(), e.numpy())


@pytest.mark.parametrize("n", [1, 3, 17, 1023])
def test_odd_sizes(n):
    x, w, b = rnd(5, n), rnd(n, seed=1), rnd(n, seed=2)

    def f(x, w, b):
        return (F.softmax(x, axis=-1), F.layer_norm(x, (n,), w, b), x.sum(axis=0), x.amax(axis=-1),
                F.gelu(x * w + b), x.var(axis=-1), x.logsumexp(axis=0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        eager = f(x, w, b)
    for e, c in zip(eager, tg.compile(f)(x, w, b)):
        assert e.shape == c.shape
        close32(c.numpy(), e.numpy())


def test_large_rows_run_on_threads_and_match():
    x = rnd(130, 1023)    # above the runtime's parallel threshold
    cf = tg.compile(lambda x: (F.softmax(x, axis=-1), (x * x).sum(axis=-1), x.tanh() * 2.0))
    sm, ss, th = cf(x)
    xn = x.numpy().astype(np.float64)
    close32(sm.numpy(), softmax_np(xn))
    close32(ss.numpy(), (xn * xn).sum(axis=-1))
    close32(th.numpy(), np.tanh(xn) * 2)


# ------------------------------------------------------------------ the compiled boundary

def test_non_contiguous_inputs_at_call_time():
    cf = tg.compile(lambda x, y: F.softmax(x, axis=-1) * y + x.sum(axis=0))
    x0, y0 = rnd(8, 6), rnd(8, 6, seed=1)
    cf(x0, y0)
    base = rnd(6, 8, seed=2)
    xt = base.permute(1, 0)                          # same shape (8, 6), transposed strides
    ys = rnd(8, 12, seed=3)[:, ::2]                  # stepped slice
    ye = rnd(1, 6, seed=4).expand(8, 6)              # stride-0 broadcast
    assert not xt.numpy().flags.c_contiguous and not ys.numpy().flags.c_contiguous
    for x, y in [(xt, ys), (xt, ye), (x0, ys)]:
        got = cf(x, y).numpy()
        xn, yn = x.numpy(), y.numpy()
        close32(got, softmax_np(xn) * yn + xn.sum(axis=0))
    assert cf.stats()["traces"] == 1


def test_dtype_and_shape_changes_retrace():
    cf = tg.compile(lambda x: (x * 2.0).exp().sum(axis=-1))
    x = rnd(4, 5)
    close32(cf(x).numpy(), np.exp(x.numpy() * 2).sum(-1))
    x64 = rnd(4, 5, dtype=np.float64)
    out = cf(x64)
    assert out.dtype == F64
    np.testing.assert_allclose(out.numpy(), np.exp(x64.numpy() * 2).sum(-1), rtol=1e-12)
    x2 = rnd(4, 7)
    close32(cf(x2).numpy(), np.exp(x2.numpy() * 2).sum(-1))
    s = cf.stats()
    assert s["traces"] == 3
    assert s["retrace_reasons"] == ["x: dtype float32 -> float64", "x: dim 1 became symbolic T (5 -> 7)"]


def test_program_rejects_wrong_arrays_clearly():
    cf = tg.compile(lambda x: x * 2.0)
    x = rnd(4, 5)
    cf(x)
    entry = next(iter(cf.cache.values()))
    prog = entry.programs[0]
    with pytest.raises(ValueError, match=r"expected float32\[4, 5\], got float64\[4, 5\]"):
        prog.run([np.zeros((4, 5))])
    with pytest.raises(ValueError, match=r"expected float32\[4, 5\], got float32\[5, 4\]"):
        prog.run([np.zeros((5, 4), np.float32)])


def test_outputs_are_never_reused_across_calls():
    def f(x, w):
        h = x @ w
        y = (h * 2.0).tanh()
        return h, y, y.reshape(-1), y.sum(axis=-1), x.reshape(-1), x.permute(1, 0)
    x, w = rnd(4, 6, grad=True), rnd(6, 3, seed=1, grad=True)
    cf = tg.compile(f)
    first = cf(x, w)
    snap = [t.detach().numpy().copy() for t in first]
    first[1].sum().backward()
    g1 = x.grad.numpy().copy()
    x2, w2 = rnd(4, 6, seed=5, grad=True), rnd(6, 3, seed=6, grad=True)
    second = cf(x2, w2)
    second[1].sum().backward()
    for a, s in zip(first, snap):
        np.testing.assert_array_equal(a.detach().numpy(), s)
    for a in first:
        for b in second:
            assert not np.shares_memory(a.detach().numpy(), b.detach().numpy())
    for a in first[:4]:                    # results the call computes never alias the arguments
        assert not np.shares_memory(a.detach().numpy(), x.detach().numpy())
    for a in first[4:]:                    # views of an argument view its memory, as eagerly
        assert np.shares_memory(a.detach().numpy(), x.detach().numpy())
    np.testing.assert_array_equal(x.grad.numpy(), g1)
    assert not np.shares_memory(x.grad.numpy(), x2.grad.numpy())
    assert cf.stats()["traces"] == 1


def test_each_call_reads_the_arrays_it_is_given():
    """The program remembers the address of the array it last bound: a new array (same shape) or
    new contents in the same array must be read."""
    cf = tg.compile(lambda x: (x * 2.0).sum())
    x = tg.tensor([1.0, 2.0, 3.0], requires_grad=True)
    assert cf(x).item() == 12.0
    x.data = tg.tensor([10.0, 20.0, 30.0])
    assert cf(x).item() == 120.0
    with tg.no_grad():
        x.fill_(1.0)
    assert cf(x).item() == 6.0
    for _ in range(3):                     # backward's implicit gradient is shared; stored grads are not
        x.grad = None
        cf(x).backward()
        x.grad.add_(tg.ones(3))
        np.testing.assert_array_equal(x.grad.numpy(), [3.0, 3.0, 3.0])
    s, s2 = tg.tensor(3.0, requires_grad=True), tg.tensor(4.0, requires_grad=True)
    s.backward()
    s.grad.add_(tg.tensor(1.0))
    s2.backward()
    assert s.grad.item() == 2.0 and s2.grad.item() == 1.0


def test_concurrent_calls_from_threads_get_their_own_results():
    import threading
    f = tg.compile(lambda x: F.softmax(x * 2.0, axis=-1).sum(axis=-1) + x.mean(axis=-1))
    g = tg.compile(lambda x: (x.tanh() * x).sum(axis=-1))      # another program on the shared thread pool
    xs = [rnd(200, 1000, seed=i) for i in range(4)]
    refs = [(f(x).numpy().copy(), g(x).numpy().copy()) for x in xs]
    bad = []

    def work(i):
        for _ in range(15):
            a, b = f(xs[i]).numpy(), g(xs[i]).numpy()
            if not np.array_equal(a, refs[i][0]):
                bad.append(("f", i, float(np.abs(a - refs[i][0]).max())))
            if not np.array_equal(b, refs[i][1]):
                bad.append(("g", i, float(np.abs(b - refs[i][1]).max())))
    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not bad


@pytest.mark.parametrize("n", [5, 300])
def test_reading_another_rows_reduction_is_not_merged(n):
    x = rnd(n, n)
    f = lambda x: (x - x.sum(axis=-1, keepdims=True).permute(1, 0),  # noqa: E731
                   x * x.amax(axis=-1).reshape(1, n).exp())
    a, b = tg.compile(f)(x)
    xn = x.numpy().astype(np.float64)
    close32(a.numpy(), xn - xn.sum(-1, keepdims=True).T)
    close32(b.numpy(), xn * np.exp(xn.max(-1)).reshape(1, n))


def test_captured_tensor_changes_retrace_or_are_read_correctly():
    W = tg.tensor(np.ones((3, 4), np.float32))
    f = tg.compile(lambda x: (x.to(W.dtype) @ W).relu() + W.sum())    # products do not promote
    x = tg.tensor(np.ones((2, 3), np.float32))
    f(x)
    news = [tg.tensor(np.full((3, 5), 2.0, np.float32)),                           # new shape: retrace
            tg.tensor(np.full((3, 5), 2.0)),                                       # new dtype: retrace
            tg.tensor(np.arange(15, dtype=np.float32).reshape(5, 3)).permute(1, 0),  # transposed view
            tg.tensor(np.arange(30, dtype=np.float32).reshape(6, 5))[::2]]          # stepped view
    assert not news[2].numpy().flags.c_contiguous and not news[3].numpy().flags.c_contiguous
    for w in news:
        W.data = w
        wn = W.numpy().astype(np.float64)
        out = f(x)
        assert out.dtype == w.dtype
        np.testing.assert_allclose(out.numpy(), np.maximum(np.ones((2, 3)) @ wn, 0) + wn.sum(), rtol=1e-6)
    assert f.stats()["traces"] == 4


def test_fuse_false_runs_one_kernel_per_op_with_the_same_results():
    x = tg.randn(100)
    fused = tg.compile(lambda x: (x * 2 + 1).tanh().sum())
    unfused = tg.compile(lambda x: (x * 2 + 1).tanh().sum(), fuse=False)
    np.testing.assert_allclose(fused(x).numpy(), unfused(x).numpy(), rtol=1e-5)
    assert fused.stats()["kernels"] == 1 and unfused.stats()["kernels"] == 4


def test_large_leading_axis_reductions_split_across_threads():
    x = rnd(300, 1023)                     # above the parallel threshold: partial results combined
    i = tg.tensor(np.random.default_rng(1).integers(-1000, 1000, (300, 257)))
    f = tg.compile(lambda x: (x.sum(axis=0), x.amax(axis=0), x.amin(axis=0), (x * x).sum(), x.mean(axis=0)))
    xn = x.numpy().astype(np.float64)
    for got, want in zip(f(x), (xn.sum(0), xn.max(0), xn.min(0), (xn * xn).sum(), xn.mean(0))):
        close32(got.numpy(), want)
    g = tg.compile(lambda i: (i.sum(axis=0), i.amax(axis=0), i.sum()))
    for got, want in zip(g(i), (i.numpy().sum(0), i.numpy().max(0), i.numpy().sum())):
        np.testing.assert_array_equal(got.numpy(), want)


def test_exact_division_keeps_ties_as_in_eager():
    # x / x is exactly 1 in eager; a reciprocal-multiply would break the tie the max gradient splits
    x = tg.tensor(np.array([[1.7, -0.3, 5.1, 0.9], [2.2, 3.3, -4.4, 0.6]], np.float32), requires_grad=True)
    f = lambda x: ((x / x).amax(axis=1, keepdims=True) + x).sum()
    g_eager, = tg.grad(f(x), [x])
    g_comp, = tg.grad(tg.compile(f)(x), [x])
    np.testing.assert_array_equal(g_comp.numpy(), g_eager.numpy())


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_runs_threaded_kernels():
    x = tg.from_numpy(np.random.default_rng(0).standard_normal(1 << 21).astype(np.float32))
    f = tg.compile(lambda x: (x * 2.0).tanh())
    want = f(x).numpy().copy()                     # the parent's pool exists (and may be spinning)
    pid = os.fork()
    if pid == 0:                                   # child: exit 0 only if the threaded kernel ran right
        signal.alarm(hangs.limit(1))               # a hang (waiting on the parent's workers) kills it
        ok = np.array_equal(f(x).numpy(), want)
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
