"""Compiling pauses Python's cyclic garbage collector (jit/function.py: its full collections walk
every live IR object, which made compile time grow with the square of a function's size) and
leaves it as it found it: enabled or disabled, after a successful compile, after one that raised,
and with compiles overlapping in threads."""
import gc
import threading

import pytest

import hangs
import tracegrad as tg
from threads import run_threads


@pytest.fixture
def restore_gc():
    was = gc.isenabled()
    yield
    (gc.enable if was else gc.disable)()


@pytest.mark.parametrize("enabled", [True, False])
def test_compile_leaves_the_collector_as_it_was(restore_gc, enabled):
    (gc.enable if enabled else gc.disable)()
    seen = []

    @tg.compile
    def f(x):
        seen.append(gc.isenabled())            # runs while tracing
        return (x * 2.0).sum()
    f(tg.randn(3))
    assert seen == [False] and gc.isenabled() is enabled

    @tg.compile
    def g(x):
        raise ValueError("fails while tracing")
    with pytest.raises(ValueError):
        g(tg.randn(3))
    assert gc.isenabled() is enabled


def test_overlapping_compiles_in_threads_restore_the_collector(restore_gc):
    gc.enable()
    inside, errors = threading.Barrier(4), []

    def work(i):
        @tg.compile
        def f(x):
            inside.wait(timeout=hangs.limit(0.3))   # all four traces in flight at once (serialized: a hang)
            return x * float(i)
        try:
            f(tg.randn(2))
        except Exception as e:                  # noqa: BLE001 (reported below)
            errors.append(e)
    run_threads(work, 4)
    assert not errors and gc.isenabled()
