"""Streaming (non-temporal) stores of large outputs written once (backends/cpu/stream.py): which outputs
stream (read from the LLVM text), the marking of the optimized IR, and values: compiled == the
`interpret` backend == NumPy on odd sizes (vector tails, rows whose length is not a whole number of
vectors), unaligned input views, transposed views, row kernels (softmax, layer norm and its
gradients), float64, kernels split over threads (chunks starting anywhere), in-place updates.

The size rule is lowered (TRACEGRAD_THRESHOLDS=stream_min_bytes=...) so that small arrays exercise the same code."""
import os
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tracegrad as tg
from tracegrad.backends.cpu import machine, stream

EXAMPLES = int(os.environ.get("TRACEGRAD_HYPOTHESIS_EXAMPLES", "12"))
RNG = np.random.default_rng(5)


@pytest.fixture
def small_rule(monkeypatch):
    monkeypatch.setenv("TRACEGRAD_THRESHOLDS", "stream_min_bytes=1024")


def streamed_lines(fn, *tensors):
    return [line for line in tg.compile(fn).ir(*tensors, stage="llvm").splitlines() if line.startswith("; streamed")]


def nontemporal(fn, *tensors):
    text = tg.compile(fn).ir(*tensors, stage="llvm", optimized=True)
    return [line for line in text.splitlines() if "!nontemporal" in line]


def test_the_rule_reads_in_the_llvm_text(small_rule):
    x = tg.tensor(RNG.standard_normal((37, 64)).astype(np.float32))
    (line,) = streamed_lines(lambda x: (x * 2.0).exp(), x)
    assert "forward_k0_body %stream1 f32[37,64]" in line, line
    stores = [re.search(r"store <(\d+) x float> .*align (\d+), !nontemporal", s)
              for s in nontemporal(lambda x: (x * 2.0).exp(), x)]
    assert all(m and int(m.group(2)) == min(64, 4 * int(m.group(1))) for m in stores), stores   # whole aligned vectors
    assert nontemporal(lambda x: (x * 2.0).exp(), x)
    # an output the program reads again (the product) keeps normal stores
    w = tg.tensor(RNG.standard_normal((64, 8)).astype(np.float32))
    assert streamed_lines(lambda x, w: ((x * 2.0).exp(), (x * 2.0).exp() @ w), x, w) == []


def test_small_outputs_never_stream():
    x = tg.tensor(RNG.standard_normal((37, 64)).astype(np.float32))
    assert machine.value("stream_min_bytes") >= 1 << 20
    assert streamed_lines(lambda x: (x * 2.0).exp(), x) == []


def test_in_place_updates_never_stream(small_rule):
    def f(p, w):
        with tg.no_grad():
            p.mul_(0.5).add_(w)
        return p.sum()
    p = tg.tensor(RNG.standard_normal((40, 64)).astype(np.float32))
    w = tg.tensor(RNG.standard_normal(64).astype(np.float32))
    before = p.numpy().copy()
    fn = tg.compile(f)
    assert streamed_lines(f, p, w) == []
    fn(p, w)
    np.testing.assert_allclose(p.numpy(), before * 0.5 + w.numpy(), rtol=1e-6)


def test_a_gradient_row_kernel_streams_whole_aligned_rows(small_rule):
    """Layer norm's backward writes dx in a row kernel: rows of 64 float32 (256 bytes) start on a
    cache line, so every vector store of dx streams."""
    x = tg.tensor(RNG.standard_normal((50, 64)).astype(np.float32), requires_grad=True)

    def loss(x):
        return (tg.nn.functional.layer_norm(x, (64,)) * 1.5).sum()
    f = tg.compile(loss)
    text = f.ir(x, stage="llvm")
    assert any(line.startswith("; streamed") and "backward_k" in line for line in text.splitlines()), text[:2000]
    f(x).backward()
    xs = x.detach().numpy().astype(np.float64)
    xc = xs - xs.mean(1, keepdims=True)
    rstd = 1 / np.sqrt((xc * xc).mean(1, keepdims=True) + 1e-5)
    xhat = xc * rstd
    dx = rstd * (1.5 - 1.5 - xhat * (1.5 * xhat).mean(1, keepdims=True))
    np.testing.assert_allclose(x.grad.numpy(), dx, atol=2e-5)
    assert x.grad.numpy().ctypes.data % stream.ALIGN == 0


@pytest.mark.parametrize("cols,dtype", [(1000, np.float32), (999, np.float32), (200, np.float64), (1001, np.float64)])
def test_rows_of_partial_lines_stream_their_aligned_interior(small_rule, cols, dtype):
    """A softmax over rows that are not whole lines (1000 classes): each row's first elements up to
    an aligned address are stored normally, the rest through an aligned block pointer (llvm.ptrmask)
    as whole aligned vectors that stream; values as NumPy's."""
    a = RNG.standard_normal((45, cols)).astype(dtype)
    fn = PROGRAMS["softmax"]
    assert nontemporal(fn, tg.tensor(a))
    assert "llvm.ptrmask" in tg.compile(fn).ir(tg.tensor(a), stage="llvm")
    np.testing.assert_allclose(tg.compile(fn)(tg.tensor(a)).numpy(), reference("softmax", a)[0],
                               rtol=1e-5 if dtype == np.float32 else 1e-12, atol=1e-7 if dtype == np.float32 else 1e-15)


PROGRAMS = {
    "gelu": lambda x: 0.5 * x * (1.0 + (0.7978845608 * (x + 0.044715 * x * x * x)).tanh()),
    "softmax": lambda x: (x - x.amax(axis=-1, keepdims=True)).exp() / (x - x.amax(axis=-1, keepdims=True)).exp().sum(
        axis=-1, keepdims=True),
    "center_transposed": lambda x: (x.T - x.T.mean(axis=1, keepdims=True)) * 2.0,
    "two_outputs": lambda x: (x.exp(), x * 3.0 - 1.0),
}


def reference(name, x):
    x = x.astype(np.float64)
    if name == "gelu":
        return [0.5 * x * (1.0 + np.tanh(0.7978845608 * (x + 0.044715 * x * x * x)))]
    if name == "softmax":
        e = np.exp(x - x.max(-1, keepdims=True))
        return [e / e.sum(-1, keepdims=True)]
    if name == "center_transposed":
        return [(x.T - x.T.mean(1, keepdims=True)) * 2.0]
    return [np.exp(x), x * 3.0 - 1.0]


@settings(max_examples=EXAMPLES, deadline=None)
@given(name=st.sampled_from(sorted(PROGRAMS)), rows=st.integers(1, 70), cols=st.sampled_from([1, 15, 16, 17, 64, 67, 100, 1001]),
       start=st.integers(0, 2), dtype=st.sampled_from([np.float32, np.float64]), flat=st.booleans())
def test_values_match_interpret_and_numpy(name, rows, cols, start, dtype, flat):
    """Starting the input at element `start` of its buffer (a slice: unaligned), 1-D or 2-D."""
    with machine.override(stream_min_bytes=256):
        base = RNG.standard_normal(rows * cols + start).astype(dtype)
        a = base[start:] if flat and name in ("gelu", "two_outputs") else base[start:].reshape(rows, cols)
        x = tg.tensor(base)[start:]
        if a.ndim == 2:
            x = x.reshape(rows, cols)
        got = tg.compile(PROGRAMS[name])(x)
        oracle = tg.compile(PROGRAMS[name], backend="interpret")(x)
    got, oracle = (list(v) if isinstance(v, tuple) else [v] for v in (got, oracle))
    tol = 2e-6 if dtype == np.float32 else 1e-12
    for g, o, r in zip(got, oracle, reference(name, a)):
        np.testing.assert_allclose(g.numpy(), o.numpy(), rtol=tol * 4, atol=tol)
        np.testing.assert_allclose(g.numpy(), r, rtol=tol * 4, atol=tol * 4)


def test_a_split_kernel_streams_from_any_chunk_start(small_rule):
    """A 1-D map large enough to split over the threads: chunks start anywhere, each runs a head
    up to its first whole aligned vector, then streams."""
    n = 300_007
    x = RNG.standard_normal(n + 1).astype(np.float32)
    t = tg.tensor(x)[1:]

    def f(x):
        return (x * 0.5).tanh() * 3.0
    assert nontemporal(f, t)
    text = tg.compile(f).ir(t, stage="llvm")
    assert text.count("!llvm.loop !9000") == 1 and '"llvm.loop.vectorize.enable", i1 false' in text   # the head
    got = tg.compile(f)(t).numpy()
    np.testing.assert_allclose(got, np.tanh(x[1:].astype(np.float64) * 0.5) * 3.0, rtol=1e-6, atol=1e-7)
    assert got.ctypes.data % stream.ALIGN == 0


def test_streamed_outputs_are_fresh_aligned_arrays_each_call(small_rule):
    x = tg.tensor(RNG.standard_normal((20, 48)).astype(np.float32))
    f = tg.compile(lambda x: x * 2.0)
    a, b = f(x), f(x)
    assert a.numpy().ctypes.data % stream.ALIGN == 0 and b.numpy().ctypes.data % stream.ALIGN == 0
    assert a.storage_offset() == 0 and a.is_contiguous() and a.stride() == (48, 1)
    assert not np.shares_memory(a.numpy(), b.numpy())
    a.add_(1.0)         # a user's in-place update of one result leaves the other alone
    np.testing.assert_array_equal(b.numpy(), x.numpy() * 2.0)
    np.testing.assert_array_equal(a.numpy(), x.numpy() * 2.0 + 1.0)


def test_empty_is_aligned_and_shaped():
    for shape, dtype in (((3, 5), np.float32), ((7,), np.float64), ((0, 4), np.float32), ((), np.int64)):
        a = stream.empty(shape, np.dtype(dtype))
        assert a.shape == shape and a.dtype == dtype and a.flags.c_contiguous and a.flags.writeable
        root = a
        while isinstance(root.base, np.ndarray):
            root = root.base
        assert root.ctypes.data == a.ctypes.data      # its storage starts at its first element
        assert a.ctypes.data % stream.ALIGN == 0 or a.size == 0


IR = """define internal void @k_body(ptr noalias align 64 %stream0, ptr noalias %b1, i64 %lo, i64 %hi) {
entry:
  %p = getelementptr inbounds float, ptr %stream0, i64 %lo
  %q = getelementptr inbounds nuw i8, ptr %p, i64 64
  %r = getelementptr inbounds float, ptr %b1, i64 %lo
  store <16 x float> %v, ptr %q, align 64
  store <16 x float> %v, ptr %p, align 4
  store <16 x float> %v, ptr %r, align 64
  store float %s, ptr %p, align 64
  store <8 x double> %w, ptr %stream0, align 64, !tbaa !0
  ret void
}

define void @other(ptr %stream0) {
entry:
  store <16 x float> %v, ptr %stream0, align 64
  ret void
}
!0 = !{!"x"}"""


def test_mark_streams_whole_aligned_vectors_through_streamed_pointers_only():
    out = stream.mark(IR).splitlines()
    marked = [line.strip() for line in out if "!nontemporal" in line]
    assert marked == ["store <16 x float> %v, ptr %q, align 64, !nontemporal !1",
                      "store <8 x double> %w, ptr %stream0, align 64, !nontemporal !1, !tbaa !0",
                      "store <16 x float> %v, ptr %stream0, align 64, !nontemporal !1"]
    assert out[-1] == "!1 = !{i32 1}"
    rets = [i for i, line in enumerate(out) if line.strip() == "ret void"]
    assert all(out[i - 1].strip() == "fence seq_cst" for i in rets)
    assert stream.mark(IR.replace("stream0", "b0")) == IR.replace("stream0", "b0")


def test_the_streaming_bench_measures_both_kinds_of_store():
    from tracegrad.bench.streaming import measure
    saved = machine.value("stream_min_bytes")
    r = measure(0.05, rounds=1)
    assert machine.value("stream_min_bytes") == saved
    assert set(r) == {"normal", "stream"} and all(t > 0 for pair in r.values() for t in pair)
