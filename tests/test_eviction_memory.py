"""Evicted means freed: a compiled function that sees many shapes keeps only its `cache_size` most
recent signatures alive (their entries, programs and machine code), and compiling a signature
leaves nothing behind in native memory (llvmlite's pass pipeline used to stay allocated, about
70-130 KB a compile: 1,000 shapes grew a process by 80 MB). Measured by counting live objects and
the C heap's bytes in use (glibc's mallinfo2), never by time."""
import ctypes
import ctypes.util
import gc
import warnings
import weakref

import numpy as np
import pytest

import tracegrad as tg
from tracegrad.backends.cpu import engine
from tracegrad.jit import entry as entry_mod


class _MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in
                "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]


def _heap_in_use():
    """Bytes the C heap has handed out and not had back (the main arena: this thread's compiles)."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    if not hasattr(libc, "mallinfo2"):
        pytest.skip("needs glibc's mallinfo2 (glibc 2.33 or later)")
    libc.mallinfo2.restype = _MallInfo2
    gc.collect()
    return libc.mallinfo2().uordblks


def _shapes(f, rows, w):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")             # "traced N times": the point here
        for n in rows:
            x = np.linspace(-1, 1, n * 8, dtype=np.float32).reshape(n, 8)
            out = f(tg.tensor(x), w)
            out.backward()
            want = (np.tanh(x @ w.detach().numpy()) * 2.0 + 1.0).sum()
            np.testing.assert_allclose(out.item(), want, rtol=1e-4)


def _fn(cache_size):
    """Static signatures (dynamic=False): each shape is its own entry, so eviction is what is measured."""
    return tg.compile(lambda x, w: ((x @ w).tanh() * 2.0 + 1.0).sum(), cache_size=cache_size, dynamic=False)


def test_evicted_signatures_free_their_entries_and_engines(monkeypatch):
    live_entries, live_engines = weakref.WeakSet(), weakref.WeakSet()
    for cls, live in ((entry_mod.Entry, live_entries), (engine.Engine, live_engines)):
        real = cls.__init__

        def init(self, *a, _real=real, _live=live, **k):
            _real(self, *a, **k)
            _live.add(self)
        monkeypatch.setattr(cls, "__init__", init)
    f = _fn(3)
    w = tg.tensor(np.linspace(-1, 1, 64, dtype=np.float32).reshape(8, 8), requires_grad=True)
    _shapes(f, range(1, 31), w)
    gc.collect()
    assert f.stats()["traces"] == 30 and len(f.cache) == 3
    assert len(live_entries) == 3 and len(live_engines) == 3


def test_compiling_new_signatures_keeps_no_native_memory(tmp_path, monkeypatch):
    """Every shape is compiled by LLVM (a fresh disk cache); after a warm-up, 40 more shapes may
    grow the C heap by at most 25 KB each (before: 70 KB or more each)."""
    monkeypatch.setenv("TRACEGRAD_CACHE_DIR", str(tmp_path / "cache"))
    f = _fn(2)
    w = tg.tensor(np.linspace(-1, 1, 64, dtype=np.float32).reshape(8, 8), requires_grad=True)
    _shapes(f, range(1, 11), w)
    before = _heap_in_use()
    _shapes(f, range(11, 51), w)
    grown = _heap_in_use() - before
    assert f.stats()["disk_hits"] == 0 and f.stats()["traces"] == 50
    assert grown < 40 * 25 * 1024, f"the C heap grew by {grown / 1024:.0f} KB over 40 evicted signatures"


def test_optimizing_frees_the_pass_pipeline():
    """LLVM's O3 pipeline, run on 30 distinct modules, leaves under 8 KB each on the C heap."""
    def text(i):
        return (f"define void @k{i}(ptr %p) {{\nentry:\n  %v = load float, ptr %p\n"
                f"  %w = fmul float %v, {float(i)}\n  store float %w, ptr %p\n  ret void\n}}\n")
    for i in range(5):
        engine.optimize(text(i))
    before = _heap_in_use()
    for i in range(5, 35):
        engine.optimize(text(i))
    grown = _heap_in_use() - before
    assert grown < 30 * 8 * 1024, f"{grown / 1024:.0f} KB kept by 30 optimizations"
